"""The step loop: requests arrive, each step is planned (``policies``), costed (``cost``) and timed.

At each step boundary the requests that have reached the scheduler join the waiting queue, the
engine's planner decides who computes how many tokens, and the cost model gives the step's duration.
Every token a step samples (a finished prefill's first token, a decode's next token) is delivered at
the end of the step. When nothing is queued the clock jumps to the next arrival.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from servelab.sim.chunked_prefill.cost import CostModel
from servelab.sim.chunked_prefill.policies import Queues, ReqState, SchedulerConfig, plan_step

STEP_COLUMNS = ["step", "start_s", "end_s", "request", "kind", "tokens"]
MAX_STEPS = 200_000


@dataclass(frozen=True)
class Request:
    """A request as a client sends it: ``arrival_s`` is when the client sends it."""

    name: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float = 0.0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"request {self.name!r}: prompt_tokens and output_tokens must be >= 1, "
                             f"got {self.prompt_tokens} and {self.output_tokens}")
        if not np.isfinite(self.arrival_s) or self.arrival_s < 0:
            raise ValueError(f"request {self.name!r}: arrival_s must be a finite time >= 0, got {self.arrival_s}")


@dataclass(frozen=True)
class SimResult:
    """A finished run. ``steps``: one row per (step, request) with the tokens it computed (``kind``
    prefill or decode). ``token_times``: per request, when each of its tokens reached the client."""

    config: SchedulerConfig
    cost: CostModel
    requests: tuple[Request, ...]
    steps: pd.DataFrame = field(repr=False)
    token_times: dict[str, np.ndarray] = field(repr=False)

    def ttft(self, name: str) -> float:
        """Time to first token: from the client sending the request to its first token."""
        return float(self.token_times[name][0] - self.request(name).arrival_s)

    def itl(self, name: str) -> np.ndarray:
        """Inter-token latencies of one request (seconds between consecutive tokens)."""
        return np.diff(self.token_times[name])

    def summary(self) -> pd.DataFrame:
        """One row per request: arrival, first token, finish, TTFT, and the number of steps it was in."""
        counts = self.steps.groupby("request")["step"].nunique()
        return pd.DataFrame([{
            "request": r.name, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "arrival_s": r.arrival_s, "first_token_s": float(self.token_times[r.name][0]),
            "finish_s": float(self.token_times[r.name][-1]), "ttft_s": self.ttft(r.name),
            "steps": int(counts.get(r.name, 0)),
        } for r in self.requests])

    def request(self, name: str) -> Request:
        for r in self.requests:
            if r.name == name:
                return r
        raise KeyError(f"no request named {name!r}; requests: {', '.join(r.name for r in self.requests)}")


def simulate(requests: Sequence[Request], config: SchedulerConfig, cost: CostModel) -> SimResult:
    """Run every request to completion under ``config``'s scheduler, timed by ``cost``."""
    names = [r.name for r in requests]
    if not requests or len(set(names)) != len(names):
        raise ValueError(f"requests need distinct names and at least one request, got {names}")
    # A request reaches the scheduler request_s after the client sends it; ties keep the given order.
    pending = sorted((ReqState(r.name, r.prompt_tokens, r.output_tokens, r.arrival_s + cost.request_s)
                      for r in requests), key=lambda s: s.arrival_s)
    q = Queues()
    times: dict[str, list[float]] = {n: [] for n in names}
    rows: list[tuple] = []
    now, step = 0.0, 0
    while pending or q.busy():
        while pending and pending[0].arrival_s <= now:
            q.waiting.append(pending.pop(0))
        if not q.busy():
            now = pending[0].arrival_s
            continue
        plan = plan_step(q, config)
        if not plan:
            if pending:
                now = pending[0].arrival_s
                continue
            stuck = q.waiting[0] if q.waiting else q.chunked
            raise ValueError(f"request {stuck.name!r} ({stuck.prompt_tokens} prompt tokens) can never be "
                             f"scheduled with budget={config.budget}, chunking={config.chunking}")
        if step >= MAX_STEPS:
            raise RuntimeError(f"simulation passed {MAX_STEPS} steps; is the budget too small to make progress?")
        prefill = sum(n for r, n in plan if r.prefilling)
        decodes = [r for r, _ in plan if not r.prefilling]
        end = now + cost.step_seconds(prefill, len(decodes), sum(r.context for r in decodes))
        for req, n in plan:
            rows.append((step, now, end, req.name, "prefill" if req.prefilling else "decode", n))
            was_prefilling = req.prefilling
            req.computed += n
            if was_prefilling and req.prefilling:
                continue  # a chunk that did not finish the prompt samples nothing
            req.emitted += 1
            times[req.name].append(end)
            if was_prefilling and req not in q.running:
                q.running.append(req)  # SGLang: a finished prefill joins the decoding batch
        q.running = [r for r in q.running if r.emitted < r.output_tokens]
        now, step = end, step + 1
    return SimResult(config=config, cost=cost, requests=tuple(requests),
                     steps=pd.DataFrame(rows, columns=STEP_COLUMNS),
                     token_times={n: np.array(t) for n, t in times.items()})
