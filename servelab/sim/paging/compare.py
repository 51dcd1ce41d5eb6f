"""Serve one workload with each reservation policy and gather tidy tables: ``simulate``, ``compare_policies``."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from servelab.integers import ceil_div, int_at_least
from servelab.sim.paging.accounting import COMPONENTS, SimResult, measure
from servelab.sim.paging.contiguous import run_contiguous
from servelab.sim.paging.paged import run_paged
from servelab.sim.paging.policies import Policy, parse_policy
from servelab.sim.paging.requests import DEFAULT_CAPACITY, DEFAULT_MAX_LEN, DEFAULT_POLICIES, sample_requests


def simulate(
    requests: pd.DataFrame,
    policy: str | Policy,
    capacity_tokens: int = DEFAULT_CAPACITY,
    *,
    max_len: int = DEFAULT_MAX_LEN,
    watermark: float = 0.0,
    check_invariants: bool = False,
) -> SimResult:
    """Serve ``requests`` (as made by :func:`sample_requests`) with one reservation ``policy``.

    ``capacity_tokens`` is the KV cache size in tokens (slots). ``watermark`` is the share of blocks
    paging keeps free when it admits a request, so newly admitted requests are not preempted at once.
    The default, 0.0, is vLLM V1's (``SchedulerConfig.watermark`` in ``vllm/config/scheduler.py``: "0.0
    (the default) disables the watermark"); vLLM's V0 block manager kept 0.01. ``check_invariants``
    re-checks the block allocator after every event (slow; for tests).
    """
    pol = parse_policy(policy)
    capacity = int_at_least("capacity_tokens", capacity_tokens, 1, "KV cache size in tokens")
    max_len = int_at_least("max_len", max_len, 1, "context length in tokens")
    if not (isinstance(watermark, int | float) and 0 <= watermark < 1):
        raise ValueError(f"watermark must be a fraction in [0, 1), got {watermark!r}")
    missing = {"arrival", "prompt_len", "output_len"} - set(requests.columns)
    if missing:
        raise ValueError(f"requests lacks column(s) {sorted(missing)}; make it with sample_requests()")
    reqs = requests.sort_values("arrival", kind="stable").reset_index(drop=True)
    arrival = reqs["arrival"].to_numpy(np.int64)
    prompt = reqs["prompt_len"].to_numpy(np.int64)
    output = reqs["output_len"].to_numpy(np.int64)
    if len(reqs) == 0:
        raise ValueError("requests is empty; make at least one with sample_requests(n >= 1, ...)")
    if (arrival < 0).any() or (prompt < 1).any() or (output < 1).any():
        raise ValueError("requests need arrival >= 0, prompt_len >= 1 and output_len >= 1")
    longest = int((prompt + output).max())
    if longest > max_len:
        raise ValueError(f"a request needs {longest} tokens, more than max_len={max_len}; raise max_len")
    if capacity < max_len:
        raise ValueError(
            f"capacity_tokens={capacity} is smaller than max_len={max_len}; the KV cache must hold at "
            "least one full-length request"
        )

    if pol.kind == "paged":
        bs = pol.block_size
        assert bs is not None
        num_blocks = capacity // bs
        wm_blocks = int(watermark * num_blocks)
        if num_blocks < ceil_div(max_len, bs) + wm_blocks:
            raise ValueError(
                f"capacity_tokens={capacity} makes {num_blocks} blocks of {bs} tokens, fewer than one "
                f"{max_len}-token request needs ({ceil_div(max_len, bs)}) plus the watermark ({wm_blocks}); "
                "use a smaller block_size or a larger capacity"
            )
        trace = run_paged(arrival, prompt, output, bs, num_blocks, wm_blocks, check_invariants)
        pool_tokens = num_blocks * bs
    else:
        size = np.full_like(prompt, max_len) if pol.kind == "max_len" else prompt + output
        trace = run_contiguous(arrival, prompt, output, size, capacity)
        pool_tokens = capacity
    return measure(pol, reqs, trace, capacity, pool_tokens, max_len)



@dataclass(frozen=True)
class Comparison:
    """Several policies on one workload, as tidy tables a notebook can plot directly.

    ``summary``: one row per policy. ``breakdown``: long form (policy, component, tokens, pct of the
    capacity), for stacked bars like the paper's Fig. 2. ``timeline`` and ``requests``: the per-step and
    per-request tables of every policy, stacked.
    """

    summary: pd.DataFrame
    breakdown: pd.DataFrame
    timeline: pd.DataFrame
    requests: pd.DataFrame
    seconds: float


def compare_policies(
    requests: pd.DataFrame,
    policies: tuple[str | Policy, ...] | list[str | Policy] = DEFAULT_POLICIES,
    capacity_tokens: int = DEFAULT_CAPACITY,
    *,
    max_len: int = DEFAULT_MAX_LEN,
    watermark: float = 0.0,
) -> Comparison:
    """Run :func:`simulate` for each policy on the same ``requests`` and gather the tables."""
    start = time.perf_counter()
    parsed = [parse_policy(p) for p in policies]  # reject a bad name before running anything
    results = [simulate(requests, p, capacity_tokens, max_len=max_len, watermark=watermark) for p in parsed]
    summary = pd.DataFrame([r.summary for r in results])
    summary["block_size"] = summary["block_size"].astype("Int64")
    order = pd.CategoricalDtype([p.label for p in parsed], ordered=True)
    breakdown = summary.melt(
        id_vars="policy", value_vars=list(COMPONENTS), var_name="component", value_name="tokens"
    )
    breakdown["pct"] = 100 * breakdown["tokens"] / summary["capacity_tokens"].iloc[0]
    breakdown["component"] = pd.Categorical(breakdown["component"], COMPONENTS, ordered=True)
    tables = [summary, breakdown]
    timeline = pd.concat([r.timeline for r in results], ignore_index=True)
    per_request = pd.concat([r.requests for r in results], ignore_index=True)
    for table in (*tables, timeline, per_request):
        table["policy"] = table["policy"].astype(order)
    breakdown = breakdown.sort_values(["policy", "component"], ignore_index=True)
    return Comparison(summary, breakdown, timeline, per_request, time.perf_counter() - start)


def default_scenario(n: int = 1000, seed: int = 0) -> Comparison:
    """The chapter's scenario: ShareGPT-like lengths, the paper's 15.7K-slot KV cache, every policy."""
    return compare_policies(sample_requests(n, seed))


SUMMARY_COLUMNS = [
    "policy",
    "steps",
    "mean_batch",
    "max_batch",
    "preemptions",
    "used",
    "reserved_for_future",
    "never_used",
    "external_frag",
    "stranded",
    "idle",
    "used_pct",
    "wasted_pct",
    "used_pct_saturated",
]


def main() -> None:
    """Print the default scenario's summary: ``python -m servelab.sim.paging``."""
    result = default_scenario()
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 1):
        print(result.summary[SUMMARY_COLUMNS].to_string(index=False))
    first = result.summary.iloc[0]
    print(
        f"\n{len(result.summary)} policies, {first['requests']} requests, capacity "
        f"{first['capacity_tokens']} tokens, simulated in {result.seconds:.2f} s"
    )

