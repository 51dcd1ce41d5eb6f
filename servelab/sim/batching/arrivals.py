"""Requests as a simulator sees them: when each arrives, its prompt and its answer length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.integers import int_at_least


@dataclass(frozen=True)
class Request:
    """One request: it arrives at ``arrival_s``, has ``prompt_tokens`` to prefill and generates ``output_tokens``."""

    name: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        int_at_least("prompt_tokens", self.prompt_tokens, 1)
        int_at_least("output_tokens", self.output_tokens, 1)
        if not self.arrival_s >= 0:
            raise ValueError(f"arrival_s must be >= 0 s, got {self.arrival_s}")


def poisson_arrivals(rate: float, count: int, *, prompt_tokens: int, output_tokens: tuple[int, int],
                     seed: int = 0) -> list[Request]:
    """``count`` requests arriving at random at ``rate`` per second on average (exponential gaps, as a load
    generator's Poisson process), each with ``prompt_tokens`` and an answer length drawn uniformly from
    ``output_tokens`` (low, high; both included): answers of different lengths are what static batching
    wastes slots on."""
    count = int_at_least("count", count, 1)
    low, high = (int_at_least("output_tokens", n, 1) for n in output_tokens)
    if not rate > 0 or low > high:
        raise ValueError(f"need rate > 0 requests/s and output_tokens low <= high; got {rate} and {output_tokens}")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, count))
    lengths = rng.integers(low, high + 1, count)
    return [Request(f"r{i}", float(t), prompt_tokens, int(n)) for i, (t, n) in enumerate(zip(arrivals, lengths,
                                                                                            strict=True))]
