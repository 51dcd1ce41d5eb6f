"""Chapter 00: the prompt tokens SGLang serves from its radix cache while the frontend programs run, predicted.

`run` empties the server's cache, runs the frontend programs (`sgl_agent.py`), which record every
/generate request as it is sent, and reads the growth of `sglang:cached_tokens`. `predict` replays
those requests on our radix tree (`servelab.sim.prefix_cache.RadixTree`), each text tokenized by the
server itself (`/tokenize`, checked against the prompt tokens the server reported for it), under
SGLang's rules:

* a request matches at most all but its last prompt token, and, when it asks for prompt
  log-probabilities, at most `logprob_start_len` tokens (`Req._compute_max_prefix_len` in
  `sglang/srt/managers/schedule_batch.py`); with pages of `page_size` tokens, whole pages only;
* once a request finishes, the tree holds its prompt and the generated tokens it fed to the model
  (whole pages only). A decode step commits the KV of the token it feeds (`alloc_for_decode` in
  `sglang/srt/mem_cache/allocation.py`), and the tree keeps what was committed up to the stop
  (`Req.owned_kv_len`). Without overlap scheduling that is all but the last generated token. With
  overlap the scheduler prepares the next step before it reads the previous step's token, so a
  request that stopped at an end-of-sequence or stop token has fed its last one too; but a request
  whose next token reaches `max_new_tokens` is left out of the next step beforehand
  (`Scheduler._reqs_finishing_inflight`, called by `update_running_batch` in
  `sglang/srt/managers/scheduler.py`, under `enable_skip_finishing_decode`, which
  `event_loop_overlap` sets), so one that finished by length has not (`Request.finish`: SGLang's
  `finish_reason` type, "length" or "stop").

Requests in flight together (the fork's branches, the choices of one `select`, a program's request
and the next program's opening one) can each be scheduled before or after the others' prompts have
entered the tree; with overlap scheduling a prompt enters it only when its batch's result is
processed, after the next batch has been formed. So for them the prediction is a range: `low`, the
tree as it was before the group (none sees another member); `high`, each member also sees the
prompts of the members sent before it, an upper bound except that it leaves out those members'
generated tokens (which members that branch off after a shared prompt do not reach anyway). The
cache is assumed large enough that nothing is evicted; `predict` checks that against a `capacity`
when given one. `predict_timed` (chapter 04's agent tree) draws the same range from each request's own
send and answer times: a request sent after another was answered finds it whole, even while a third is
still in flight, and `high` counts every request in flight with it, sent before or after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pandas as pd

from servelab.engines.metrics import scrape
from servelab.engines.server import Server
from servelab.measure.prefix_cache.live import flush
from servelab.measure.setup.check import run_frontend_programs
from servelab.sim.prefix_cache.radix_tree import RadixTree


@dataclass(frozen=True)
class Request:
    """One request as SGLang saw it: prompt and generated token ids, its match limit, and what it reported."""

    group: int  # requests in flight together share a group
    prompt: list[int]
    output: list[int]
    limit: int  # most prompt tokens it may take from the cache
    reported_cached: int
    finish: str = "stop"  # SGLang's finish_reason type: "length" (max_new_tokens reached), "stop", ...
    sent_s: float = 0.0  # when it was sent and answered (the recorder's clock)
    answered_s: float = 0.0


@dataclass(frozen=True)
class FrontendRun:
    outputs: dict[str, Any]
    requests: list[dict[str, Any]]  # as recorded by sgl_agent.py, in the order sent
    cached: int  # growth of sglang:cached_tokens while the programs ran


def run(server: Server) -> FrontendRun:
    """Empty SGLang's cache, run the frontend programs against `server`, and read its cached-token counter."""
    if server.engine != "sglang":
        raise ValueError(f"the frontend programs need an SGLang server; got {server.engine!r}")
    flush(server)
    before = _cached(server)
    outputs = run_frontend_programs(server.profile, server.url)
    recorded = outputs.pop("requests")
    return FrontendRun(outputs, recorded, int(_cached(server) - before))


def _cached(server: Server) -> float:
    try:
        return scrape(server.url).value("sglang:cached_tokens")
    except KeyError:  # SGLang creates the counter at its first increment
        return 0.0


def token_ids(server: Server, text: str) -> list[int]:
    """The token ids SGLang's /generate makes of `text` (its /tokenize, no chat template)."""
    reply = httpx.post(f"{server.url}/tokenize", timeout=60, json={"model": server.served_model, "prompt": text})
    reply.raise_for_status()
    return list(reply.json()["tokens"])


def to_requests(server: Server, recorded: Sequence[dict[str, Any]]) -> list[Request]:
    """The recorded /generate calls as `Request`s (a call with a list of texts is one request per text)."""
    out: list[Request] = []
    group, busy_until = -1, float("-inf")
    for call in recorded:
        if call["sent_s"] >= busy_until:  # nothing sent earlier is still in flight: a new group
            group += 1
        busy_until = max(busy_until, call["answered_s"]) if call["sent_s"] < busy_until else call["answered_s"]
        body, answers = call["body"], call["answer"]
        texts = body["text"] if isinstance(body["text"], list) else [body["text"]]
        answers = answers if isinstance(answers, list) else [answers]
        for text, answer in zip(texts, answers, strict=True):
            prompt = token_ids(server, text)
            reported = answer["meta_info"]["prompt_tokens"]
            if len(prompt) != reported:
                raise ValueError(f"/tokenize made {len(prompt)} tokens of a prompt SGLang counted as {reported}; "
                                 "the replay needs the server's own token ids")
            limit = len(prompt) - 1
            if body.get("return_logprob") and body.get("logprob_start_len", -1) >= 0:
                limit = min(limit, body["logprob_start_len"])
            finish = (answer["meta_info"].get("finish_reason") or {}).get("type", "")
            out.append(Request(group, prompt, list(answer.get("output_ids") or []), max(limit, 0),
                               int(answer["meta_info"].get("cached_tokens", 0)), finish, call["sent_s"],
                               call["answered_s"]))
    return out


def fed(req: Request, overlap: bool) -> list[int]:
    """The generated tokens a finished request fed to the model, which the tree keeps: all with overlap
    scheduling unless it finished by length, else all but the last."""
    return req.output if overlap and req.finish != "length" else req.output[:-1]


def predict(reqs: Sequence[Request], page_size: int = 1, *, overlap: bool, capacity: int | None = None
            ) -> pd.DataFrame:
    """Per request: cached tokens predicted if in-flight requests see none of each other (`low`) or all
    sent before (`high`), and what SGLang reported (`reported`). `overlap`: SGLang schedules with
    overlap (`fed`). `capacity`: the cache's tokens; a replay that holds more is refused."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size!r}")
    tree, rows = RadixTree(), []

    def pages(n: int) -> int:
        return n // page_size * page_size

    def hit(tokens: list[int], limit: int) -> int:
        return pages(min(tree.match_prefix(tokens[:pages(limit)]).length, limit))

    for group in sorted({r.group for r in reqs}):
        members = [r for r in reqs if r.group == group]
        low = [hit(r.prompt, r.limit) for r in members]  # the tree as the group found it
        high = []
        for r in members:
            high.append(hit(r.prompt, r.limit))
            tree.insert(r.prompt[:pages(len(r.prompt))])  # as if it had been prefilled before the next one
        for r in members:
            stored = r.prompt + fed(r, overlap)
            tree.insert(stored[:pages(len(stored))])
        rows += [{"group": group, "prompt tokens": len(r.prompt), "generated": len(r.output), "finish": r.finish,
                  "limit": r.limit,
                  "low": lo, "high": hi, "reported": r.reported_cached}
                 for r, lo, hi in zip(members, low, high, strict=True)]
    if capacity is not None and tree.total_tokens > capacity:
        raise ValueError(f"the requests hold {tree.total_tokens} tokens, more than the cache's {capacity}; "
                         "SGLang would evict, which this replay does not model")
    return pd.DataFrame(rows)


def timing(reqs: Sequence[Request]) -> list[tuple[list[int], list[int]]]:
    """Per request (in the order sent): the requests answered before it was sent (``done``), and every other
    request whose lifetime overlaps its own (``flying``: sent before it was answered, answered after it was
    sent), as indices. An answered request's tokens are in the tree (SGLang answers after it has cached a
    finished request); a flying one's may or may not be, whether it was sent before or after: a sibling sent
    later can be scheduled first, and an engine that caches blocks when it schedules them (vLLM) can then
    give its prefix to the one sent earlier."""
    out = []
    for i, r in enumerate(reqs):
        done = [j for j, q in enumerate(reqs) if j != i and q.answered_s <= r.sent_s]
        out.append((done, [j for j, q in enumerate(reqs)
                           if j != i and j not in done and q.sent_s < r.answered_s]))
    return out


def predict_timed(reqs: Sequence[Request], page_size: int = 1, *, overlap: bool, capacity: int | None = None
                  ) -> pd.DataFrame:
    """Like ``predict``, from each request's own send and answer times instead of groups: ``low``, the tree
    holding what was answered before it was sent; ``high``, also every request in flight with it, sent
    before or after it (``timing``), generated tokens included (an upper bound). Requests listed in the
    order sent."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size!r}")

    def pages(n: int) -> int:
        return n // page_size * page_size

    def hit(members: Sequence[int], r: Request) -> int:
        tree = RadixTree()
        for j in members:
            stored = reqs[j].prompt + fed(reqs[j], overlap)
            tree.insert(stored[:pages(len(stored))])
        if capacity is not None and tree.total_tokens > capacity:
            raise ValueError(f"the requests hold {tree.total_tokens} tokens, more than the cache's {capacity}; "
                             "SGLang would evict, which this replay does not model")
        return pages(min(tree.match_prefix(r.prompt[:pages(r.limit)]).length, r.limit))

    return pd.DataFrame([{"group": r.group, "prompt tokens": len(r.prompt), "generated": len(r.output),
                          "finish": r.finish, "limit": r.limit, "low": hit(done, r), "high": hit(done + flying, r),
                          "reported": r.reported_cached}
                         for r, (done, flying) in zip(reqs, timing(reqs), strict=True)])
