"""Static and continuous batching, step by step, on the same requests and the same step cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.integers import int_at_least
from servelab.sim.batching.arrivals import Request
from servelab.sim.chunked_prefill.cost import CostModel


@dataclass(frozen=True)
class Served:
    """When a request was admitted, got its first token (end of its prefill step) and its last."""

    request: Request
    admitted_s: float
    first_token_s: float
    finished_s: float

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.request.arrival_s

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (0 for a one-token answer)."""
        n = self.request.output_tokens - 1
        return (self.finished_s - self.first_token_s) / n if n else 0.0

    @property
    def latency_s(self) -> float:
        return self.finished_s - self.request.arrival_s


@dataclass
class _Running:
    request: Request
    admitted_s: float
    first_token_s: float
    generated: int  # tokens so far (the prefill step gives the first)

    @property
    def context(self) -> int:
        return self.request.prompt_tokens + self.generated


def _check(requests: Sequence[Request], max_batch: int) -> list[Request]:
    int_at_least("max_batch", max_batch, 1)
    if not requests:
        raise ValueError("nothing to schedule: give at least one request")
    if len({r.name for r in requests}) != len(requests):
        raise ValueError("request names must be distinct")
    return sorted(requests, key=lambda r: (r.arrival_s, r.name))


def _step_end(now: float, cost: CostModel, prefills: Sequence[Request], decodes: Sequence[_Running]) -> float:
    """When a step from ``now`` ends: it prefills ``prefills`` and decodes one token of each of ``decodes``."""
    return now + cost.step_seconds(sum(r.prompt_tokens for r in prefills), len(decodes),
                                   sum(r.context for r in decodes))


def _retire(running: list[_Running], now: float, served: list[Served]) -> list[_Running]:
    """Moves the requests that have all their tokens into ``served`` (finished at ``now``); the others."""
    served += [Served(r.request, r.admitted_s, r.first_token_s, now) for r in running
               if r.generated == r.request.output_tokens]
    return [r for r in running if r.generated < r.request.output_tokens]


def static(requests: Sequence[Request], cost: CostModel, *, max_batch: int) -> list[Served]:
    """Static batching: take up to ``max_batch`` of the requests waiting (the first to arrive first), prefill
    them in one step, decode them all together until the longest is done, and only then form the next
    batch. A finished request keeps no work in the batch but its slot stays empty."""
    waiting, now, served = _check(requests, max_batch), 0.0, []
    while waiting:
        now = max(now, waiting[0].arrival_s)
        batch = [r for r in waiting if r.arrival_s <= now][:max_batch]
        waiting = [r for r in waiting if r not in batch]
        start, now = now, _step_end(now, cost, batch, [])
        running = _retire([_Running(r, start, now, 1) for r in batch], now, served)
        while running:
            now = _step_end(now, cost, [], running)
            for r in running:
                r.generated += 1
            running = _retire(running, now, served)
    return sorted(served, key=lambda s: s.request.name)


def continuous(requests: Sequence[Request], cost: CostModel, *, max_batch: int,
               max_prefill_tokens: int | None = None) -> list[Served]:
    """Continuous batching: at every step the finished requests have left, the waiting ones that arrived join
    (first come, first served, while the batch holds fewer than ``max_batch`` and their prompts fit
    ``max_prefill_tokens``; a larger prompt joins as the step's only newcomer), and the step prefills the newcomers and
    decodes everyone else."""
    waiting, now, served, running = _check(requests, max_batch), 0.0, [], []
    if max_prefill_tokens is not None:
        int_at_least("max_prefill_tokens", max_prefill_tokens, 1)
    while waiting or running:
        if not running:
            now = max(now, waiting[0].arrival_s)
        joining, budget = [], max_prefill_tokens
        for r in [r for r in waiting if r.arrival_s <= now]:
            fits = budget is None or r.prompt_tokens <= budget or not joining
            if len(running) + len(joining) >= max_batch or not fits:
                break
            joining.append(r)
            budget = None if budget is None else budget - r.prompt_tokens
        waiting = [r for r in waiting if r not in joining]
        end = _step_end(now, cost, joining, running)
        for r in running:
            r.generated += 1
        running = _retire(running + [_Running(r, now, end, 1) for r in joining], end, served)
        now = end
    return sorted(served, key=lambda s: s.request.name)
