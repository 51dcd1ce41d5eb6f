"""Contiguous reservation: a first-fit token-addressed memory, and serving a workload from it."""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from servelab.sim.paging.trace import Trace


class FirstFitMemory:
    """A token-addressed KV region handing out contiguous chunks, first fit, holes merged on free.

    This is what storing each request's KV as one contiguous tensor amounts to. Chunks of different
    sizes come and go, and the free space ends up cut into holes: a request can be refused while the
    total free space would hold it (external fragmentation).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.holes: list[tuple[int, int]] = [(0, capacity)] if capacity else []  # (start, size), sorted
        self.free_total = capacity

    def alloc(self, size: int) -> int | None:
        """Start address of a new ``size``-token chunk, or ``None`` if no hole is big enough."""
        for k, (start, hole) in enumerate(self.holes):
            if hole >= size:
                if hole == size:
                    del self.holes[k]
                else:
                    self.holes[k] = (start + size, hole - size)
                self.free_total -= size
                return start
        return None

    def free(self, start: int, size: int) -> None:
        """Give a chunk back, merging it with the holes on either side."""
        k = 0
        while k < len(self.holes) and self.holes[k][0] < start:
            k += 1
        end = start + size
        if k < len(self.holes) and self.holes[k][0] == end:  # merge with the hole after
            end += self.holes.pop(k)[1]
        if k > 0 and sum(self.holes[k - 1]) == start:  # merge with the hole before
            start = self.holes[k - 1][0]
            self.holes[k - 1] = (start, end - start)
        else:
            self.holes.insert(k, (start, end - start))
        self.free_total += size

    def largest_hole(self) -> int:
        return max((h for _, h in self.holes), default=0)



def run_contiguous(
    arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray, size: np.ndarray, capacity: int
) -> Trace:
    """Reserve ``size[i]`` contiguous tokens for request ``i`` at admission, free them at the end.

    Event-driven: nothing changes between an arrival and a completion, so the loop jumps between them.
    A request admitted at step ``t`` runs steps ``t .. t + output - 1`` and its chunk is free again for
    admissions at step ``t + output``.
    """
    trace, memory = Trace(), FirstFitMemory(capacity)
    n, nxt, t = len(arrival), 0, 0
    waiting: deque[int] = deque()
    running: list[tuple[int, int, int]] = []  # heap of (end step, request, chunk start)
    while True:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        while waiting:  # FCFS: stop at the first request that does not fit
            i = waiting[0]
            start = memory.alloc(int(size[i]))
            if start is None:
                break
            waiting.popleft()
            heapq.heappush(running, (t + int(output[i]), i, start))
            trace.segment(i, t, int(prompt[i]), int(output[i]))
        events = [running[0][0]] if running else []
        if nxt < n and not waiting:  # arrivals only matter when nobody is already waiting
            events.append(int(arrival[nxt]))
        if not events:
            if waiting:
                raise RuntimeError(f"request {waiting[0]} does not fit in an empty memory")
            return trace
        t_next = min(events)
        if waiting:
            trace.blocked.append((t, t_next, int(size[waiting[0]])))
        t = t_next
        while running and running[0][0] <= t:
            _, i, start = heapq.heappop(running)
            memory.free(start, int(size[i]))

