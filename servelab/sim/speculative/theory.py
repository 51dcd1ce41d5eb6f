"""Speculative decoding in theory: tokens per verification, the walltime it buys, and the best k.

Sources: Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023 (arXiv:2211.17192), section 3 (they call the speculation length gamma; here it is k);
Chen et al., "Accelerating Large Language Model Decoding with Speculative Sampling" (arXiv:2302.01318).

The model and its simplifications, stated:

* Every draft token is accepted with the same probability ``alpha``, independently of the others
  (Leviathan et al. assume the per-token acceptance rates are i.i.d.; alpha is their mean). The
  accepted drafts of one verification are then a geometric count capped at ``k``, and the tokens one
  verification emits (accepted drafts plus the one token the target always adds, a correction or a
  bonus) have the mean ``E = (1 - alpha**(k+1)) / (1 - alpha)``, which is ``k + 1`` at ``alpha = 1``.
* One draft step costs ``c`` target steps, so drafting k tokens costs ``k c``; verifying them (one
  target forward over ``k + 1`` positions) costs one target step. That holds while a forward pass is
  bound by reading the weights (memory bandwidth), not by arithmetic. The walltime improvement
  factor is then ``E / (k c + 1) = (1 - alpha**(k+1)) / ((1 - alpha)(k c + 1))`` (Leviathan et al.).
* On real hardware verification is not free. With ``v(n)`` the measured cost of one target forward
  over ``n`` tokens, in single-token target steps (``v(1) = 1``), the factor becomes
  ``E / (k c + v(k + 1))``. ``v = 1`` gives the paper's formula back.
* Ignored: the time to sample, compare and roll back; a draft that runs more or fewer than k steps;
  acceptance that varies with position and context (see :mod:`servelab.sim.speculative.acceptance`);
  batching, which makes a forward over many sequences compute-bound, so ``v`` grows with batch size.

Speculation can pay only when ``alpha > c`` (with ``v = 1``): ``E <= 1 + k alpha`` for every k, so
``alpha <= c`` gives a factor of at most 1; and ``k = 1`` gives ``(1 + alpha) / (1 + c) > 1`` when
``alpha > c``. Leviathan et al. state the sufficient direction with that bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from servelab.integers import int_at_least

ArrayLike = float | np.ndarray
VerifyCost = Callable[[int], float]


def _alpha(alpha: ArrayLike) -> np.ndarray:
    a = np.asarray(alpha, dtype=float)
    if not np.all((a >= 0) & (a <= 1)):
        raise ValueError(f"alpha (acceptance probability) must lie in [0, 1], got {alpha!r}")
    return a


def _nonnegative(name: str, value: float) -> float:
    if not value >= 0:  # also rejects nan
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def expected_tokens(alpha: ArrayLike, k: int) -> ArrayLike:
    """Mean tokens emitted per verification: ``1 + alpha + ... + alpha**k``.

    The sum equals ``(1 - alpha**(k+1)) / (1 - alpha)`` and stays exact at and near ``alpha = 1``,
    where the closed form divides zero by zero.
    """
    a, k = _alpha(alpha), int_at_least("k (draft tokens per step)", k, 0)
    # Summed in order (cumsum), not pairwise (np.sum): then one more draft or a higher alpha never rounds lower.
    out = np.cumsum(a[..., None] ** np.arange(k + 1), axis=-1)[..., -1]
    return float(out) if out.ndim == 0 else out


def leading_kept(kept: np.ndarray) -> np.ndarray:
    """Per row of ``kept`` (verifications by draft positions, True where that draft passed its test), the
    drafts a verification keeps: those before the first rejection, in 0..k."""
    kept = np.asarray(kept, dtype=bool)
    return np.where(kept.all(axis=-1), kept.shape[-1], np.argmin(kept, axis=-1))


def sample_accepted(alpha: float, k: int, verifications: int, *, seed: int) -> np.ndarray:
    """Accepted drafts of ``verifications`` verifications under the model: each draft kept with probability alpha.

    A verification keeps its drafts up to the first rejection, so each count is the number of leading
    successes of k independent draws, in 0..k (:func:`leading_kept`); the tokens it emits are that count plus one.
    """
    a = float(_alpha(alpha))
    k = int_at_least("k (draft tokens per verification)", k, 1)
    n = int_at_least("verifications", verifications, 1)
    return leading_kept(np.random.default_rng(seed).random((n, k)) < a)


def draft_acceptance_rate(alpha: ArrayLike, k: int) -> ArrayLike:
    """Accepted / drafted tokens (what vLLM logs as "draft acceptance rate") under the i.i.d. model.

    It is ``(alpha + ... + alpha**k) / k``, lower than alpha: a token after a rejection is never
    checked, yet counts as drafted. So an engine's acceptance rate is not the papers' alpha.
    """
    k = int_at_least("k (draft tokens per step)", k, 1)
    return (expected_tokens(alpha, k) - 1) / k


def speedup(alpha: ArrayLike, k: int, c: float, verify_cost: float = 1.0) -> ArrayLike:
    """Walltime improvement factor ``E / (k c + v)``; ``v`` = cost of verifying k drafts in target steps."""
    c, v = _nonnegative("c (draft/target cost ratio)", c), float(verify_cost)
    if not v > 0:
        raise ValueError(f"verify_cost must be > 0 (target steps per verification), got {verify_cost!r}")
    return expected_tokens(alpha, k) / (k * c + v)


def optimal_k(alpha: float, c: float, k_max: int = 16, verify_cost: VerifyCost | None = None) -> int:
    """The k in ``0..k_max`` with the largest speedup; 0 means "do not speculate" (factor 1).

    ``verify_cost(n)`` is the cost of a target forward over ``n`` tokens in single-token steps
    (default: 1 for every n, the paper's assumption). Ties go to the smaller k (less work).
    """
    k_max = int_at_least("k_max", k_max, 0)
    cost = verify_cost or (lambda n: 1.0)
    factors = [1.0] + [speedup(alpha, k, c, cost(k + 1) / cost(1)) for k in range(1, k_max + 1)]
    best = max(factors)
    return next(k for k, f in enumerate(factors) if f >= best * (1 - 1e-12))


def verify_cost_from_times(seconds_by_tokens: Mapping[int, float], *, monotone: bool = False) -> VerifyCost:
    """``v(n)`` from measured forward times over n tokens, relative to n = 1, linear in between.

    ``seconds_by_tokens`` must include n = 1; asking for an n beyond the largest measured one is an
    error (no extrapolation). With ``monotone``, each time is first raised to the largest time of any
    smaller pass (a cumulative maximum): a pass over more tokens never counts as cheaper than one over
    fewer, so a dip in the measurements cannot make ``v`` fall below 1.
    """
    if 1 not in seconds_by_tokens or any(t <= 0 for t in seconds_by_tokens.values()):
        raise ValueError(f"need positive times including n = 1 token, got {dict(seconds_by_tokens)!r}")
    ns = np.array(sorted(seconds_by_tokens), dtype=float)
    times = np.array([seconds_by_tokens[int(n)] for n in ns])
    if monotone:
        times = np.maximum.accumulate(times)
    rel = times / times[0]

    def cost(n: int) -> float:
        if not ns[0] <= n <= ns[-1]:
            raise ValueError(f"no measured forward cost near {n} tokens; measured: {ns.astype(int).tolist()}")
        return float(np.interp(n, ns, rel))

    return cost
