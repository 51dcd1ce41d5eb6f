"""Chapter 03: an agent tree run by SGLang's frontend ``fork``, its hits predicted, then replayed on vLLM.

``run_on_sglang`` empties the server's cache and runs ``sgl_agent_tree.py`` in SGLang's venv: the
frontend sends the root, commits it at the ``fork`` (a request with ``max_new_tokens`` 0), runs the
branches in parallel threads, and each branch forks again. Every ``/generate`` request is recorded
with its text and answer; ``frontend_cache.to_requests`` turns them into SGLang's own token ids and
keeps when each was sent and answered, and ``frontend_cache.predict_timed`` gives each request's cached
tokens as a range (what the requests in flight at the same time contribute is up to the scheduler).

``replay_on_vllm`` sends the same token ids to vLLM in the same shape: each request waits until the
requests that SGLang had answered before it was sent are answered on vLLM, and for the requests sent
before it, so requests in flight together on SGLang are in flight together on vLLM. One output token
each (only prompts are cached). ``block_ranges`` predicts vLLM's hits for that shape on our block
cache: ``low``, the cache holding the prompts answered before; ``high``, also those in flight.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

from servelab.engines.engine_side import script
from servelab.engines.server import Server
from servelab.machine import engine_envs
from servelab.measure.prefix_cache import frontend_cache
from servelab.measure.prefix_cache.burst import common_prefix
from servelab.measure.prefix_cache.live import counters, flush, send
from servelab.sim.prefix_cache import BlockHashCache


@dataclass(frozen=True)
class ForkRun:
    outputs: dict[str, Any]  # plan, steps, results: the generated texts
    texts: list[str]  # each request's prompt text, in the order sent
    commits: list[bool]  # sent by a fork to commit the text so far (max_new_tokens 0)
    requests: list[frontend_cache.Request]  # SGLang's token ids, groups, reports
    counted: dict[str, float]  # growth of SGLang's prompt-token and cached-token counters


def label(text: str, commit: bool, branches: int, sub_branches: int) -> str:
    """Where a request sits in the tree, from the markers its text carries ("branch 1.0: generate")."""
    place = "root"
    for b in range(branches):
        if f"Branch {b}. " in text:
            place = f"branch {b}"
            for s in range(sub_branches):
                if f"Sub-branch {b}.{s}. " in text:
                    place = f"branch {b}.{s}"
    return f"{place}: {'fork (commit)' if commit else 'generate'}"


def run_on_sglang(server: Server, texts: dict[str, Any], *, max_tokens: int) -> ForkRun:
    """Empty SGLang's cache and run the agent tree (``prefix_workloads.agent_fork_texts``) with ``fork``.
    Every fork needs at least two branches: ``fork`` commits the text so far only when ``size > 1``."""
    sizes = [len(texts["branches"]), *(len(subs) for subs in texts["sub_branches"])]
    if min(sizes) < 2:
        raise ValueError(f"every fork needs >= 2 branches (a fork of one commits nothing); got branch counts {sizes}")
    if server.engine != "sglang":
        raise ValueError(f"the frontend needs an SGLang server; got {server.engine!r}")
    flush(server)
    before = counters(server)
    python = engine_envs.get(server.profile.sglang_env).require().python
    out = engine_envs.run_script(python, script("sgl_agent_tree.py"), server.url,
                                 stdin=json.dumps({**texts, "max_tokens": max_tokens}))
    after = counters(server)
    recorded = out.pop("requests")
    if any(not isinstance(call["body"]["text"], str) for call in recorded):
        raise ValueError("the agent tree sent a batch of texts; expected one text per request")
    commits = [call["body"]["sampling_params"].get("max_new_tokens") == 0 for call in recorded]
    return ForkRun(out, [call["body"]["text"] for call in recorded], commits,
                   frontend_cache.to_requests(server, recorded), {k: after[k] - before[k] for k in after})


def sglang_table(run: ForkRun, *, page_size: int, overlap: bool, capacity: int, branches: int,
                 sub_branches: int) -> pd.DataFrame:
    """Per request in the order sent: its place, group, tokens, SGLang's report and our range."""
    table = frontend_cache.predict_timed(run.requests, page_size, overlap=overlap, capacity=capacity)
    table.insert(0, "request", [label(text, commit, branches, sub_branches)
                                for text, commit in zip(run.texts, run.commits, strict=True)])
    table["parent prefix"] = parent_prefixes(table["request"].tolist(), [r.prompt for r in run.requests], page_size)
    return table


def parent_prefixes(labels: Sequence[str], prompts: Sequence[Sequence[int]], page_size: int) -> list[int]:
    """For a branch's request: the tokens it shares with the commit of the fork it came from, in whole pages
    (what a cache that kept the commit must give it); 0 for the root's requests and for commits."""
    commits = {lab.split(":")[0]: p for lab, p in zip(labels, prompts, strict=True) if lab.endswith("(commit)")}
    out = []
    for lab, prompt in zip(labels, prompts, strict=True):
        place = lab.split(":")[0]
        parent = "root" if place.count(".") == 0 else place.rsplit(".", 1)[0]
        if lab.endswith("(commit)") or place == "root" or parent not in commits:
            out.append(0)
            continue
        shared = min(common_prefix(commits[parent], prompt), len(prompt) - 1)
        out.append(shared // page_size * page_size)
    return out


def block_ranges(prompts: Sequence[Sequence[int]], timing: Sequence[tuple[list[int], list[int]]], *,
                 block_size: int, capacity: int) -> pd.DataFrame:
    """vLLM's hit per request (one output token each): ``low`` with the prompts of ``timing``'s answered
    requests cached, ``high`` with those in flight too (``frontend_cache.timing``), on our block cache with
    ``capacity // block_size`` blocks; refuses prompts that would not fit."""
    if len(prompts) != len(timing):
        raise ValueError(f"one timing entry per prompt: {len(timing)} for {len(prompts)} prompts")

    def hit(history: Sequence[int], prompt: Sequence[int]) -> int:
        cache = BlockHashCache(capacity // block_size, block_size)
        for i, tokens in enumerate([*(prompts[j] for j in history), prompt]):
            admitted = cache.allocate(str(i), list(tokens))
            if admitted is None:
                raise ValueError(f"a prompt of {len(tokens)} tokens does not fit {capacity // block_size} blocks")
            cache.free(str(i))
        return admitted.hit_tokens

    return pd.DataFrame([{"low": hit(done, p), "high": hit(done + flying, p)}
                         for p, (done, flying) in zip(prompts, timing, strict=True)])


def vllm_token_ids(server: Server, text: str) -> list[int]:
    """The token ids vLLM makes of ``text`` as a completion prompt (its ``/tokenize``, no chat template)."""
    reply = httpx.post(f"{server.url}/tokenize", timeout=60, json={"model": server.served_model, "prompt": text})
    reply.raise_for_status()
    return list(reply.json()["tokens"])


def replay_on_vllm(server: Server, run: ForkRun, *, block_size: int, capacity: int
                   ) -> tuple[pd.DataFrame, dict[str, float]]:
    """Empty vLLM's cache and send SGLang's token ids in SGLang's shape (module docstring); rows in the order
    sent: ``cached_tokens`` as vLLM reported, our range (``low``, ``high``) for ``block_size`` and ``capacity``,
    and ``same ids``, whether vLLM's own tokenization of the text gives SGLang's ids. Also vLLM's counters."""
    flush(server)
    before = counters(server)
    order = frontend_cache.timing(run.requests)
    answered = [threading.Event() for _ in run.requests]
    sent = [threading.Event() for _ in run.requests]

    def one(i: int) -> pd.DataFrame:
        for j in order[i][0]:
            answered[j].wait()
        for j in range(i):
            sent[j].wait()
        sent[i].set()
        try:
            return send(server, [run.requests[i].prompt], [str(i)])
        finally:
            answered[i].set()

    with ThreadPoolExecutor(len(run.requests)) as pool:
        frame = pd.concat(list(pool.map(one, range(len(run.requests)))), ignore_index=True)
    after = counters(server)
    frame[["low", "high"]] = block_ranges([r.prompt for r in run.requests], order, block_size=block_size,
                                          capacity=capacity)
    frame["same ids"] = [vllm_token_ids(server, t) == r.prompt for t, r in zip(run.texts, run.requests, strict=True)]
    return frame, {k: after[k] - before[k] for k in after}


def save_jsonl(run: ForkRun, path: Path | str) -> Path:
    """One recorded request per line, in the order sent: text, SGLang's token ids, output ids, times, report."""
    path = Path(path)
    path.write_text("".join(json.dumps({"text": text, "commit": commit, **asdict(req)}) + "\n"
                            for text, commit, req in zip(run.texts, run.commits, run.requests, strict=True)))
    return path
