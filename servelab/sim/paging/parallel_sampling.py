"""Parallel sampling on the block pool: n samples of one prompt share its blocks until they write."""

from __future__ import annotations

from servelab.integers import ceil_div
from servelab.sim.paging.block_pool import BlockAllocator


def parallel_sampling_blocks(prompt_tokens: int, output_tokens: int, n: int, block_size: int) -> dict[str, int]:
    """Blocks `n` samples of one prompt hold at the end of generation, with and without sharing.

    Runs the allocator: the prompt is allocated once, forked n-1 times, and every sample then
    appends its own output (copying the shared last block on its first write).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    per_sample = ceil_div(prompt_tokens + output_tokens, block_size)
    alloc = BlockAllocator(num_blocks=n * per_sample, block_size=block_size)
    alloc.allocate(0, prompt_tokens)
    for child in range(1, n):
        alloc.fork(0, child)
    for seq in range(n):
        alloc.append_tokens(seq, output_tokens)
    return {"shared": alloc.stats().used_blocks, "unshared": n * per_sample}
