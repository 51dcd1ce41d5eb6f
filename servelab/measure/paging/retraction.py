"""Chapter 02: SGLang made to retract on purpose, and its retractions counted from its own signals.

SGLang admits a request only when its prompt and its whole answer fit beside what the running
requests are expected to need: their remaining answers times `new_token_ratio`
(`PrefillAdder.add_one_req` in `sglang/srt/managers/schedule_policy.py`). A request that arrives
while others decode sees their remaining answers only at the ratio, which starts at
`SGLANG_INIT_NEW_TOKEN_RATIO` (0.7) times `--schedule-conservativeness` (`NewTokenRatioTracker` in
`sglang/srt/managers/scheduler_components/new_token_ratio_tracker.py`) and only decays from there.

`plan` sizes two waves so that the second takes the room the first still needs: a first wave whose
prompts and answers fit the pool even at full length (so it never overcommits, however SGLang splits
it into prefill batches), and one late request that fits only because the first wave's answers are
counted at the ratio. Every length is in tokens, for pages of one token (`force` refuses other page
sizes); the plan holds for any capacity, and for any lag up to `lag` answer tokens the first wave
has generated when the second is admitted (`ForcedRetraction.early_tokens` measures it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from servelab.engines.server import Server
from servelab.measure.kv_memory.capacity import engine_capacity
from servelab.measure.paging.parallel_sampling import prompt_with_tokens
from servelab.measure.paging.pressure import PressureRun, run_pressure
from servelab.measure.workloads import long_prompt
from servelab.sim.prefix_cache.radix_tree import RadixTree

RATIO_INIT = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO's default (sglang/srt/environ.py)
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS's default (sglang/srt/environ.py)
LOG_LINE = "KV cache pool is full. Retract requests."  # Scheduler.update_running_batch's warning
_PREFILL = re.compile(r"Prefill batch, #new-seq: (?P<seqs>\d+), #new-token: (?P<new>\d+), "
                      r"#cached-token: (?P<cached>\d+)")
_EVENT = re.compile(r"#retracted_reqs: (?P<n>\d+), #new_tokens_gained: (?P<gained>-?\d+).*"
                    r"#new_token_ratio: (?P<before>[\d.]+) -> (?P<after>[\d.]+)")


@dataclass(frozen=True)
class RetractionPlan:
    """Two waves for one SGLang pool of `capacity` tokens; `shared`: prompt tokens all prompts have in common."""

    capacity: int
    shared: int
    ratio: float
    first_requests: int
    first_prompt: int
    first_answer: int
    second_prompt: int
    second_answer: int
    lag: int
    margin: int

    @property
    def prompt_tokens(self) -> list[int]:
        return [self.first_prompt] * self.first_requests + [self.second_prompt]

    @property
    def answer_tokens(self) -> list[int]:
        return [self.first_answer] * self.first_requests + [self.second_answer]

    @property
    def waves(self) -> list[int]:
        return [0] * self.first_requests + [1]

    @property
    def reserved_at_ratio(self) -> int:
        """Most tokens SGLang sets aside for the first wave's answers when the late request arrives."""
        return math.ceil(self.ratio * self.first_requests * self.first_answer)

    def free_after_second(self, lag: int) -> int:
        """Free KV tokens once the late request's prompt is in, if each first request had stored `lag` answer tokens.

        The radix tree stores the common beginning of the prompts once; the rest of each prompt and every
        stored answer token takes one token of the pool.
        """
        k = self.first_requests
        held = k * self.first_prompt - (k - 1) * self.shared + k * lag + self.second_prompt - self.shared
        return self.capacity - held

    def late_admitted(self, lag: int, ratio: float) -> bool:
        """SGLang's rule (`PrefillAdder.add_one_req`): the late request's new prompt tokens and its whole answer
        fit, strictly, beside what the early ones hold after `lag` tokens and their remaining answers x `ratio`."""
        k = self.first_requests
        held = k * self.first_prompt - (k - 1) * self.shared + k * lag
        remaining = k * (self.first_answer - lag) * ratio
        return (self.second_prompt - self.shared) + self.second_answer + 1 < self.capacity - held - remaining

    def steps_to_retraction(self, lag: int) -> int:
        """Decode steps after the late request's admission until the running requests need more than is free."""
        return self.free_after_second(lag) // (self.first_requests + 1) + 1


def new_token_ratio(conservativeness: float) -> float:
    """SGLang's starting `new_token_ratio` for a `--schedule-conservativeness` (capped at 1)."""
    if not conservativeness > 0:
        raise ValueError(f"schedule conservativeness must be > 0, got {conservativeness!r}")
    return min(RATIO_INIT * conservativeness, 1.0)


def sizes(is_cpu: bool) -> dict[str, int]:
    """`plan`'s `answer` and `lag` for a profile: on a GPU the first wave may run many more decode steps
    before the late request is admitted (a step takes milliseconds there, while its prompt is prefilled)."""
    return {"answer": 40, "lag": 8} if is_cpu else {"answer": 256, "lag": 96}


def plan(capacity: int, shared: int, conservativeness: float, *, requests: int = 6, answer: int = 48,
         lag: int = 16, margin: int = 16) -> RetractionPlan:
    """Waves that make SGLang retract: `requests` first requests of `answer` tokens, then one late request.

    The first wave's prompts and answers fill `capacity - margin` tokens, so SGLang admits them
    together. The late request is as long as fits beside them when each has stored up to `lag` answer
    tokens and their remaining answers count at the starting ratio (an upper bound: it decays), less
    `margin`. Its answer is long enough that it still runs when the free tokens run out, whatever the
    lag from 0 to `lag`; the first wave's answers are long enough that they still run then too.
    """
    ratio = new_token_ratio(conservativeness)
    if requests < 1 or lag < 0 or margin < 0:
        raise ValueError(f"need requests >= 1, lag >= 0, margin >= 0; got {requests}, {lag}, {margin}")
    first_prompt = (capacity - margin) // requests - answer
    reserved = math.ceil(ratio * requests * answer)
    second_answer = lag + math.ceil((reserved + margin) / requests) + 8
    # admitted: (its prompt beyond the shared part) + its answer < the pool less what the first wave holds
    # after `lag` tokens each and their answers at the ratio
    second_prompt = (capacity - requests * first_prompt + (requests - 1) * shared - requests * lag - reserved
                     - margin - second_answer + shared)
    result = RetractionPlan(capacity, shared, ratio, requests, first_prompt, answer, second_prompt, second_answer,
                            lag, margin)
    if min(first_prompt, second_prompt) <= shared:
        raise ValueError(f"a pool of {capacity} tokens leaves prompts of {first_prompt} and {second_prompt} tokens, "
                         f"no longer than the {shared} shared ones; use fewer requests or shorter answers")
    latest = max(result.steps_to_retraction(d) for d in (0, lag))
    if latest >= min(second_answer, answer - lag):
        raise ValueError(f"answers of {answer} tokens end before SGLang runs out ({latest} steps after the late "
                         f"request); use longer answers or a smaller lag than {lag}")
    return result


def token_ids(server: Server, prompt: str) -> list[int]:
    """The token ids the chat prompt `prompt` becomes on `server` (its /tokenize, chat template included)."""
    response = httpx.post(f"{server.url}/tokenize", timeout=30, json={
        "model": server.served_model, "messages": [{"role": "user", "content": prompt}]})
    response.raise_for_status()
    return list(response.json()["tokens"])


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common beginning of two token sequences (what a radix tree stores once)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def retraction_events(log_path: Path) -> pd.DataFrame:
    """SGLang's `LOG_LINE` warnings so far, one row each: `retracted` requests, `tokens_gained`, and its
    `new_token_ratio` before and after (`ratio_before`, `ratio_after`)."""
    text = Path(log_path).read_text(errors="replace") if Path(log_path).is_file() else ""
    rows = []
    for line in text.splitlines():
        if LOG_LINE in line and (m := _EVENT.search(line)):
            rows.append({"retracted": int(m["n"]), "tokens_gained": int(m["gained"]),
                         "ratio_before": float(m["before"]), "ratio_after": float(m["after"])})
    return pd.DataFrame(rows, columns=["retracted", "tokens_gained", "ratio_before", "ratio_after"])


def readmissions(log_path: Path, skip: int = 0) -> pd.DataFrame:
    """The first prefill batch SGLang logged after each of its `LOG_LINE` warnings, from the `skip`-th on:
    `seqs` requests, `new_tokens` computed, `cached_tokens` found in the radix tree. After a retraction of
    the last requests waiting, that batch is the retracted requests' readmission."""
    text = Path(log_path).read_text(errors="replace") if Path(log_path).is_file() else ""
    rows, seen, waiting = [], 0, False
    for line in text.splitlines():
        if LOG_LINE in line and _EVENT.search(line):
            seen += 1
            waiting = seen > skip
        elif waiting and (m := _PREFILL.search(line)):
            rows.append({"seqs": int(m["seqs"]), "new_tokens": int(m["new"]), "cached_tokens": int(m["cached"])})
            waiting = False
    return pd.DataFrame(rows, columns=["seqs", "new_tokens", "cached_tokens"])


def held_by_prompts(prompts: list[list[int]]) -> int:
    """Tokens a radix tree holds once it has stored every prompt (their common beginnings once)."""
    tree = RadixTree()
    for ids in prompts:
        tree.insert(ids)
    return tree.total_tokens


@dataclass(frozen=True)
class ForcedRetraction:
    """The plan, the run (`kv_pressure.PressureRun`, with a `wave` per request) and SGLang's own records of it."""

    plan: RetractionPlan
    run: PressureRun
    events: pd.DataFrame  # SGLang's log warnings during the run (`retraction_events`)
    readmitted: pd.DataFrame  # the prefill batch after each warning (`readmissions`)
    held: int  # prompt tokens the radix tree holds for the prompts sent (`held_by_prompts`)

    @property
    def late(self) -> int:
        """The late request's number (`req`), the last one sent."""
        return len(self.run.requests) - 1

    @property
    def early_tokens(self) -> int:
        """Most answer tokens an early request had received when the late request's first token arrived:
        an upper bound on the `lag` at the late request's admission, which the plan must cover."""
        first = float(self.run.requests.set_index("req").loc[self.late, "first_token_s"])
        early = self.run.tokens[(self.run.tokens.req != self.late) & (self.run.tokens.t_s < first)]
        return int(early.groupby("req").size().max()) if len(early) else 0

    def ratio_after_range(self, slack: int = 1) -> tuple[float, float]:
        """SGLang's ratio after the first retraction, from the streams' counts: when only the late request
        was retracted, `estimate_new_token_ratio_after_retract` over the early ones, (tokens generated +
        `RETRACT_DECODE_STEPS` each) / (their `max_tokens` + 1), capped at 1. Generated: what each had
        received by the late request's last token before its pause, +- `slack` tokens. (nan, nan) when
        the first retraction was another."""
        first = self.events.iloc[0] if len(self.events) else None
        times = np.sort(self.run.tokens[self.run.tokens.req == self.late].t_s.to_numpy())
        if first is None or first["retracted"] != 1 or len(times) < 2:
            return math.nan, math.nan
        stop = float(times[np.argmax(np.diff(times))])  # the late request's last token before its longest gap
        early = self.run.requests[self.run.requests.req != self.late]
        got = self.run.tokens[(self.run.tokens.req != self.late) & (self.run.tokens.t_s <= stop)].groupby("req").size()
        got = got.reindex(early.req, fill_value=0)
        k, total = len(early), float(early.max_tokens.sum()) + 1

        def ratio(extra: int) -> float:
            return min(1.0, (float(got.sum()) + extra * k + RETRACT_DECODE_STEPS * k) / total)

        return ratio(-slack), ratio(slack)

    @property
    def logged(self) -> int:
        """Requests retracted during the run, by SGLang's log."""
        return int(self.events["retracted"].sum())

    @property
    def counted(self) -> int:
        """Growth of `sglang:num_retracted_requests_total` during the run."""
        evictions = self.run.timeline["evictions"]
        return int(evictions.iloc[-1] - evictions.iloc[0])


def force(server: Server, conservativeness: float, seed: int = 0, **sizes: int) -> ForcedRetraction:
    """Run `plan`'s two waves on a live SGLang `server` started with that `--schedule-conservativeness`.

    `sizes`: `plan`'s keyword arguments. The prompts are made exactly as long as the plan says on
    this server's tokenizer; the capacity is read from the server (`engine_capacity`). The plan counts
    tokens, so the server must page its KV one token at a time, and the prompts sent must hold in the
    radix tree what the plan counts (their common beginning once): both are checked before the run.
    """
    if server.engine != "sglang":
        raise ValueError(f"force makes SGLang retract; got a {server.engine} server")
    capacity = engine_capacity(server)
    if capacity["block_size"] != 1:
        raise ValueError(f"the retraction plan counts single tokens; this SGLang server pages its KV in "
                         f"{capacity['block_size']}-token pages (--page-size); start it with pages of 1 token")
    seeds = [seed * 1000 + 100 + i for i in range(sizes.get("requests", 6) + 1)]
    shared = common_prefix(token_ids(server, long_prompt(0, seeds[0])), token_ids(server, long_prompt(0, seeds[1])))
    chosen = plan(capacity["tokens"], shared, conservativeness, **sizes)
    prompts = [prompt_with_tokens(server, n, s) for n, s in zip(chosen.prompt_tokens, seeds, strict=True)]
    held = held_by_prompts([token_ids(server, p) for p in prompts])
    planned = sum(chosen.prompt_tokens) - chosen.first_requests * chosen.shared
    if held != planned:
        raise ValueError(f"the prompts sent hold {held} tokens in a radix tree, the plan counted {planned} "
                         f"(its {shared} shared tokens once); try another seed than {seed}")
    before = len(retraction_events(server.log_path))
    run = run_pressure(server, prompts, chosen.answer_tokens, waves=chosen.waves)
    events = retraction_events(server.log_path).iloc[before:].reset_index(drop=True)
    return ForcedRetraction(chosen, run, events, readmissions(server.log_path, before), held)
