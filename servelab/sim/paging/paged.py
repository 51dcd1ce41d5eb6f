"""Paged reservation, vLLM style: blocks taken one at a time, recompute preemption when the pool runs dry."""

from __future__ import annotations

from collections import deque

import numpy as np

from servelab.integers import ceil_div
from servelab.sim.paging.block_pool import BlockAllocator
from servelab.sim.paging.trace import Trace


def run_paged(
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    block_size: int,
    num_blocks: int,
    watermark_blocks: int,
    check: bool,
) -> Trace:
    """Serve the workload from a :class:`BlockAllocator`, vLLM style.

    Each step: (1) every running request needs room for one more token; if the free blocks do not
    cover that, preempt the most recently admitted request (free its blocks; it goes back to the front
    of the queue and recomputes its KV when readmitted). (2) If nothing was preempted, admit from the
    queue while the newcomer's blocks plus the running requests' new blocks plus the watermark fit.
    (3) Everyone appends a token; finished requests free their blocks.

    Event-driven like :func:`run_contiguous`. Between events the only change is growth, which is
    deterministic, so the next step at which the pool would run dry is found by a binary search on
    ``sum(ceil((len + d + 1) / block_size))`` and the allocator is brought up to date in one
    ``append_tokens`` call per request.
    """
    trace, pool = Trace(), BlockAllocator(num_blocks, block_size)
    n, nxt, t = len(arrival), 0, 0
    target = prompt + output
    generated = np.zeros(n, dtype=np.int64)  # output tokens kept across preemptions (recomputed)
    length: dict[int, int] = {}  # tokens held by each running request at the start of step t
    started: dict[int, tuple[int, int]] = {}  # request -> (segment start, len0)
    waiting: deque[int] = deque()
    running: list[int] = []  # admission order: the last one is preempted first

    def end_segment(i: int, now: int) -> None:
        start, len0 = started.pop(i)
        trace.segment(i, start, len0, now - start)
        pool.free(i)
        del length[i]

    while True:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        # (1) room for this step's token, preempting the newest request while it does not fit
        preempted = False
        growing = sum(1 for i in running if length[i] % block_size == 0)
        while running and growing > pool.num_free_blocks:
            victim = running.pop()
            growing -= int(length[victim] % block_size == 0)
            generated[victim] = length[victim] - prompt[victim]
            end_segment(victim, t)
            waiting.appendleft(victim)
            trace.preemptions += 1
            preempted = True
        # (2) admission (vLLM does not admit new prefills in a step that preempted)
        need_blocks = 0
        while waiting:
            i = waiting[0]
            len0 = int(prompt[i] + generated[i])
            need_blocks = pool.blocks_needed(len0 + 1) + growing + watermark_blocks
            if preempted or need_blocks > pool.num_free_blocks:
                break
            waiting.popleft()
            pool.allocate(i, len0)
            growing += pool.blocks_needed(len0 + 1) - pool.blocks_needed(len0)
            running.append(i)
            length[i] = len0
            started[i] = (t, len0)
        # (3) jump to the next event: a completion, an arrival, the step after a preemption, or the
        # first step at which growth would need more blocks than the pool has
        lens = np.fromiter((length[i] for i in running), dtype=np.int64, count=len(running))
        events = []
        if running:
            events.append(t + int((target[running] - lens).min()))
        if nxt < n and not waiting:
            events.append(int(arrival[nxt]))
        if preempted:
            events.append(t + 1)
        if not events:
            if waiting:
                raise RuntimeError(f"request {waiting[0]} does not fit in an empty pool")
            return trace
        t_next = min(events)

        if running and _blocks_after(lens, t_next - t - 1, block_size) > num_blocks:
            lo, hi = 1, t_next - t - 1  # _blocks_after(0) fits (checked above); find the first misfit
            while lo < hi:
                mid = (lo + hi) // 2
                if _blocks_after(lens, mid, block_size) > num_blocks:
                    hi = mid
                else:
                    lo = mid + 1
            t_next = t + lo
        if waiting:
            trace.blocked.append((t, t_next, need_blocks * block_size))
        dt = t_next - t
        for i in running:
            pool.append_tokens(i, dt)
            length[i] += dt
        for i in [i for i in running if length[i] == target[i]]:
            running.remove(i)
            end_segment(i, t_next)
        if check:
            pool.check_invariants()
            assert pool.num_free_blocks == num_blocks - sum(pool.blocks_needed(v) for v in length.values())
        t = t_next


def _blocks_after(lens: np.ndarray, d: int, block_size: int) -> int:
    """Blocks held by requests now ``lens`` long once they have appended ``d + 1`` tokens."""
    return int(ceil_div(lens + d + 1, block_size).sum())

