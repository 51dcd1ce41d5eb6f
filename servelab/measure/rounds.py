"""A ratio measured in interleaved rounds: one value per round, and what every round agrees on.

A chapter that compares two settings measures them in turn, round after round, so that a slow
stretch of the host lands on both sides of a ratio; each round gives one ratio. The conclusion a
chapter draws ("on is faster") holds only if every round agrees. With ``r`` rounds and no real
difference, all rounds land on one side of 1 by chance with probability ``2 * 0.5 ** r``
(:func:`chance_of_agreement`), which the chapters state beside their verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.integers import int_at_least


def spread(values: Sequence[float]) -> dict[str, float]:
    """The median of one ratio per round, and the lowest and highest round."""
    ordered = sorted(float(v) for v in values)
    if not ordered:
        raise ValueError("spread needs at least one round's value, got none")
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"rounds": n, "median": median, "lowest": ordered[0], "highest": ordered[-1]}


def one_side(values: Sequence[float], threshold: float = 1.0) -> str:
    """"above" where every round's value is above ``threshold``, "below" where every one is below, else
    "both sides" (also for no rounds, or a value exactly at ``threshold``)."""
    values = [float(v) for v in values]
    if values and all(v > threshold for v in values):
        return "above"
    return "below" if values and all(v < threshold for v in values) else "both sides"


def every_round_above(values: Sequence[float], threshold: float = 1.0) -> bool:
    """True when every round's ratio is above ``threshold`` (and there is at least one round)."""
    return one_side(values, threshold) == "above"


def chance_of_agreement(rounds: int) -> float:
    """The probability that ``rounds`` rounds of a ratio with no real effect all fall on one side of 1."""
    return 2 * 0.5 ** int_at_least("rounds", rounds, 1)
