"""Chapter 05's exercises, by the simulator the solutions run (`servelab.sim.chunked_prefill`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from servelab.measure.chunked_prefill.live import scenario_for
from servelab.sim.chunked_prefill import CostModel, SchedulerConfig
from servelab.sim.chunked_prefill.scenario import Scenario, tradeoff

Cases = dict[str, tuple[tuple[Any, ...], Any]]


def gap_ratio(scenario: Scenario, sizes: Sequence[int], cost: CostModel, threshold: int) -> float:
    """Exercise 1: the streams' p90 gap at the largest budget with `--long-prefill-token-threshold threshold`,
    over their p90 gap at the smallest budget without it (vLLM's scheduler)."""
    small = tradeoff(scenario, [sizes[0]], cost, SchedulerConfig("vllm")).iloc[0]
    row = tradeoff(scenario, [sizes[-1]], cost, SchedulerConfig("vllm", long_prefill_token_threshold=threshold)).iloc[0]
    return float(row.itl_p90_s / small.itl_p90_s)


def threshold_effect(answer: Callable[[], int], scenario: Scenario, sizes: Sequence[int],
                     cost: CostModel) -> Callable[[], float | None]:
    """The check's view of a threshold answer: the gap ratio it gives (None while `answer` gives none)."""
    def ratio() -> float | None:
        threshold = answer()
        return None if threshold is None or threshold is Ellipsis else gap_ratio(scenario, sizes, cost, int(threshold))
    return ratio


def threshold_cases(sizes: Sequence[int]) -> Cases:
    """The property a right threshold has: the same p90 gap at the largest budget as at the smallest."""
    return {f"p90 gap at budget {sizes[-1]} with your threshold / at budget {sizes[0]}": ((), 1.0)}


def doubled_streams(max_model_len: int, sizes: Sequence[int], cost: CostModel, *, streams: int,
                    stream_prompt_tokens: int, long_prompt_fraction: float) -> dict[str, float]:
    """Exercise 2: at the smallest budget, twice the streams over the chapter's: the p90 gap and the long
    prompt's TTFT, each as a ratio."""
    def row(n: int) -> Any:
        scenario = scenario_for(max_model_len, sizes[0], streams=n, stream_prompt_tokens=stream_prompt_tokens,
                                long_prompt_fraction=long_prompt_fraction)
        return tradeoff(scenario, [sizes[0]], cost, SchedulerConfig("vllm")).iloc[0]
    base, more = row(streams), row(2 * streams)
    return {"p90 gap ratio": float(more.itl_p90_s / base.itl_p90_s),
            "long TTFT ratio": float(more.long_ttft_s / base.long_ttft_s)}


def doubled_cases(max_model_len: int, sizes: Sequence[int], cost: CostModel, **scenario: Any) -> Cases:
    return {f"{2 * scenario['streams']} streams": ((), doubled_streams(max_model_len, sizes, cost, **scenario))}


def stall_cases(scenario: Scenario, sizes: Sequence[int], cost: CostModel) -> Cases:
    """Exercise 3: SGLang without mixed chunk: the streams' longest stall over the long prompt's TTFT, per chunk
    size."""
    plain = tradeoff(scenario, sizes, cost, SchedulerConfig("sglang"))
    return {f"chunk {int(r.budget)}": ((int(r.budget),), float(r.longest_stall_s / r.long_ttft_s))
            for r in plain.itertuples()}
