"""Chapter 04's exercises, from `servelab.measure.prefix_cache.analysis` (the functions the solutions call)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from servelab.measure.prefix_cache.analysis import (
    Tokens,
    extra_prefill,
    gap_table,
    other_block_size,
    smallest_budget,
    vllm_budget_for,
)

Cases = dict[str, tuple[tuple[Any, ...], Any]]


def gap_cases(rates: pd.DataFrame, workloads: Mapping[str, Tokens], block_size: int, capacity: int) -> Cases:
    """Exercise 1: per workload, SGLang's measured hit rate minus vLLM's simulated one at the other block size,
    in percentage points."""
    table = gap_table(rates, workloads, block_size, capacity)
    other = table.attrs["other"]
    return {f"{name}, block {other}": ((name, other), float(table.simulated[name])) for name in table.index}


def budget_cases(cycle: Tokens, first_round: int, block_size: int, limit: int) -> Cases:
    """Exercise 2: the `kv_cache_tokens` at which the second round finds what an unlimited cache finds."""
    vllm = smallest_budget("block", cycle, first_round, block_size=block_size, limit=limit)
    sglang = smallest_budget("radix", cycle, first_round, limit=limit)
    return {"vLLM": (("vLLM",), None if vllm is None else vllm_budget_for(vllm, block_size)),
            "SGLang": (("SGLang",), sglang)}


def extra_prefill_cases(turns: Tokens, block_size: int, capacity: int) -> Cases:
    """Exercise 3: per turn, the tokens prefilled beyond the turn's new ones, for SGLang's tree and vLLM blocks
    of this run's size and of the other size."""
    caches = {"SGLang": ("radix", 1)} | {f"vLLM, block {s}": ("block", s)
                                         for s in (block_size, other_block_size(block_size))}
    table = extra_prefill(turns, caches, capacity)
    return {label: ((cache, size), [int(v) for v in table[label]]) for label, (cache, size) in caches.items()}
