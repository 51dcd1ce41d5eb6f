"""The chapter's scenario: steady streams, then one long prompt; its TTFT against the streams' ITL.

``streams`` requests of ``stream_prompt_tokens`` arrive together and decode. Once the last stream (the
last admitted, so every stream is past its prefill) has received ``warmup_tokens`` tokens, a prompt of
``long_prompt_tokens`` tokens arrives. What the streams
feel is their inter-token gaps during the window from its arrival to its first token
(``latency.itl_summary``); what it feels is its time to first token. ``tradeoff`` repeats that for
several step budgets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pandas as pd

from servelab.sim.chunked_prefill.cost import CostModel
from servelab.sim.chunked_prefill.latency import itl_summary
from servelab.sim.chunked_prefill.policies import SchedulerConfig
from servelab.sim.chunked_prefill.simulate import Request, SimResult, simulate

LONG = "long"


def stream_name(i: int) -> str:
    return f"stream {i}"


@dataclass(frozen=True)
class Scenario:
    streams: int
    stream_prompt_tokens: int
    stream_output_tokens: int
    long_prompt_tokens: int
    long_output_tokens: int = 2
    warmup_tokens: int = 4

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"scenario {name} must be an integer >= 1, got {value!r}")
        if self.warmup_tokens >= self.stream_output_tokens:
            raise ValueError(f"warmup_tokens ({self.warmup_tokens}) must be below stream_output_tokens "
                             f"({self.stream_output_tokens}): the streams must still run when the long prompt comes")

    def streams_only(self) -> list[Request]:
        return [Request(stream_name(i), self.stream_prompt_tokens, self.stream_output_tokens)
                for i in range(self.streams)]

    def requests(self, long_arrival_s: float) -> list[Request]:
        return [*self.streams_only(), Request(LONG, self.long_prompt_tokens, self.long_output_tokens,
                                              long_arrival_s)]


def run_scenario(scenario: Scenario, config: SchedulerConfig, cost: CostModel) -> SimResult:
    """The scenario under one scheduler: the long prompt arrives when every stream got its warm-up
    tokens (the last stream's ``warmup_tokens``-th token), so it never queues behind a stream's prefill."""
    warm = simulate(scenario.streams_only(), config, cost)
    arrival = max(float(t[scenario.warmup_tokens - 1]) for t in warm.token_times.values())
    return simulate(scenario.requests(arrival), config, cost)


def window_stats(result: SimResult) -> dict[str, float]:
    """The long prompt's TTFT and the streams' ITL statistics from its arrival to its first token."""
    long = result.request(LONG)
    first = float(result.token_times[LONG][0])
    streams = {r.name: result.token_times[r.name] for r in result.requests if r.name != LONG}
    ended = [n for n, t in streams.items() if t[-1] < first]
    if ended:
        raise ValueError(f"{', '.join(ended)} finished before the long prompt's first token (budget "
                         f"{result.config.budget}): raise stream_output_tokens so the streams run through the window")
    steps = result.steps
    return {"long_ttft_s": first - long.arrival_s,
            "long_prefill_steps": int(steps.loc[(steps.request == LONG) & (steps.kind == "prefill"), "step"].nunique()),
            **itl_summary(streams, long.arrival_s, first)}


def tradeoff(scenario: Scenario, budgets: Sequence[int | None], cost_model: CostModel,
             config: SchedulerConfig | None = None) -> pd.DataFrame:
    """One row per budget: the long prompt's TTFT and the streams' ITL p50/p90/longest stall meanwhile.

    ``config`` is the scheduler every budget is put into (default: vLLM, chunked prefill on).
    """
    if not budgets:
        raise ValueError("budgets is empty; give at least one step budget (tokens, or None for unlimited)")
    base = config or SchedulerConfig()
    rows = []
    for budget in budgets:
        cfg = replace(base, budget=budget)
        rows.append({"engine": cfg.engine, "budget": budget, "chunking": cfg.chunking,
                     **window_stats(run_scenario(scenario, cfg, cost_model))})
    frame = pd.DataFrame(rows)
    frame["budget"] = pd.array(list(budgets), dtype="Int64")  # None (unlimited) stays missing, not NaN-float
    return frame
