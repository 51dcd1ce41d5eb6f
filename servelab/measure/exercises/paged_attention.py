"""Chapter 03's exercises: which block sizes waste little, parallel sampling's saving, the budget that never
preempts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from servelab.measure.paging.pressure import peak_blocks
from servelab.sim.paging.parallel_sampling import parallel_sampling_blocks

Cases = dict[str, tuple[tuple[Any, ...], Any]]


def waste_answer(sim: pd.DataFrame, below_pct: float = 2.0) -> dict[str, Any]:
    """Exercise 1, from the chapter's simulation table (index "paged:...", columns block_size, wasted_pct,
    mean_batch): the block sizes that waste less than `below_pct` % of the capacity, and whether the mean batch
    grows at every step as the block shrinks."""
    paged = sim.loc[sim.index.str.startswith("paged:")].sort_values("block_size", ascending=False)
    growth = paged.mean_batch.diff().dropna()
    return {"block sizes": sorted(int(b) for b in paged.block_size[paged.wasted_pct < below_pct]),
            "mean batch keeps growing": bool((growth > 0).all())}


def waste_cases(sim: pd.DataFrame) -> Cases:
    return {"": ((sim,), waste_answer(sim))}


def saving_pct(prompt_tokens: int, output_tokens: int, n: int, block_size: int) -> float:
    """Exercise 2: the share of blocks (%) that sharing the prompt saves for `n` samples, by the allocator."""
    blocks = parallel_sampling_blocks(prompt_tokens, output_tokens, n, block_size)
    return 100 * (1 - blocks["shared"] / blocks["unshared"])


def saving_cases(prompt_tokens: int, output_tokens: int, samples: Sequence[int], sizes: Sequence[int]) -> Cases:
    return {f"block {size}, n = {n}": ((prompt_tokens, output_tokens, n, size),
                                       saving_pct(prompt_tokens, output_tokens, n, size))
            for size in sizes for n in samples if n > 1}


def never_preempts(prompt_tokens: Sequence[int], output_tokens: Sequence[int], block_size: int) -> int:
    """Exercise 3: the smallest `kv_tokens` at which vLLM never preempts these requests sent together: the blocks
    they hold at the peak, plus vLLM's null block."""
    return (peak_blocks(prompt_tokens, output_tokens, block_size) + 1) * block_size


def never_preempts_cases(prompt_tokens: Sequence[int], output_tokens: Sequence[int], block_size: int) -> Cases:
    return {f"{len(prompt_tokens)} requests, block {block_size}": (
        (), never_preempts(prompt_tokens, output_tokens, block_size))}
