"""What a simulated run leaves behind: segments of uninterrupted running, and blocked intervals."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Trace:
    """What an engine run leaves behind; metrics are computed from it afterwards, vectorised.

    A *segment* is one stretch of steps a request ran without interruption: it started at step
    ``start`` holding ``len0`` tokens and appended one token in each of its ``steps`` steps. A
    *blocked* interval ``[t0, t1)`` is a stretch in which the head of the queue was refused; ``need`` is
    what it asked for, in tokens.
    """

    seg_req: list[int] = field(default_factory=list)
    seg_start: list[int] = field(default_factory=list)
    seg_len0: list[int] = field(default_factory=list)
    seg_steps: list[int] = field(default_factory=list)
    blocked: list[tuple[int, int, int]] = field(default_factory=list)
    preemptions: int = 0

    def segment(self, req: int, start: int, len0: int, steps: int) -> None:
        self.seg_req.append(req)
        self.seg_start.append(start)
        self.seg_len0.append(len0)
        self.seg_steps.append(steps)

