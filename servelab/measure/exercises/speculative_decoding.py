"""Chapter 06's exercises: the acceptance a draft needs to break even, and the depth a cut needs to agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from servelab.measure.speculative import live, load
from servelab.sim.speculative.theory import expected_tokens

Cases = dict[str, tuple[tuple[Any, ...], Any]]


def break_even_alpha(k: int, draft_cost: float, verify_cost: Callable[[int], float]) -> float | None:
    """Exercise 1: the smallest alpha at which `k` draft steps of relative cost `draft_cost` and one verification
    of k + 1 tokens (`verify_cost`, in plain steps) emit as many tokens as they cost; None if even alpha = 1 does
    not."""
    need = k * draft_cost + verify_cost(k + 1)
    if float(expected_tokens(1.0, k)) < need:
        return None
    grid = np.linspace(0, 1, 100_001)
    return float(grid[np.argmax(expected_tokens(grid, k) >= need)])


def break_even_cases(name: str, k: int, draft_cost: float, verify_cost: Callable[[int], float]) -> Cases:
    """Nothing to check where no alpha breaks even (the solution says so in words)."""
    alpha = break_even_alpha(k, draft_cost, verify_cost)
    return {} if alpha is None else {f"{name}, k = {k}": ((), alpha)}


def half_agreement_layers(shallow: pd.DataFrame) -> int | None:
    """Exercise 3: the fewest draft layers whose cut agrees with the target on at least half the tokens."""
    halfway = shallow[shallow.agreement >= 0.5]
    return None if halfway.empty else int(halfway["draft layers"].iloc[0])


def half_agreement_cases(shallow: pd.DataFrame | None) -> Cases:
    """None (the profile cut no drafts) or no cut that agrees on half: nothing to check."""
    layers = None if shallow is None else half_agreement_layers(shallow)
    return {} if layers is None else {"draft layers": ((), layers)}


def best_k(steps: float, drafted: float, survival: np.ndarray, k: int, b: int,
           verify_cost: Callable[[float], float]) -> int:
    """Exercise 2: the k' <= k that maximises prompt lookup's predicted speedup with `b` requests (0: none gains).

    `steps`: decode steps without speculation; `drafted`: tokens from verifications (accepted plus one bonus
    each), from the engine's counters; E(k') = 1 + the first k' survival values; the drafted tokens are held fixed
    (drafted / E(k') verifications) and a step without a draft stays one plain step; a lookup costs nothing."""
    gains = {}
    for kk in range(1, k + 1):
        e = 1 + float(np.asarray(survival)[:kk].sum())
        n = drafted / e
        verify = load.batch_costs(kk, 0.0, b, verify_cost)[1]
        gains[kk] = live.predicted_speedup(steps + 1, n, n * (e - 1), kk, 0.0, verify)
    top = max(gains, key=lambda kk: gains[kk])
    return top if gains[top] > 1 else 0


def best_k_cases(steps: float, drafted: float, survival: np.ndarray, k: int,
                 concurrency: list[int], verify_cost: Callable[[float], float]) -> Cases:
    return {f"{b} request{'s' if b > 1 else ''}": ((b,), best_k(steps, drafted, survival, k, b, verify_cost))
            for b in concurrency}
