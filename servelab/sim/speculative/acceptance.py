"""Acceptance per draft position, as an engine counts it, against the i.i.d. model of the theory.

vLLM counts, per verified draft, how many of its tokens were accepted, and per position i (0-based)
how many drafts had their token i accepted (``vllm:spec_decode_num_accepted_tokens_per_pos_total``
with label ``position``; see ``vllm/v1/spec_decode/metrics.py``). Acceptance stops at the first
rejection, so ``A_i`` = drafts whose first ``i + 1`` tokens were all accepted, and ``A_i / drafts``
is a survival curve. Under the theory's i.i.d. model it is ``alpha**(i+1)``.

Estimates of alpha from these counts:

* ``conditional_rates``: ``A_i / A_(i-1)`` (``A_(-1)`` = drafts), the acceptance at position i given
  that the draft got that far. Flat under the i.i.d. model; a real draft usually falls with depth.
* ``iid_alpha``: the maximum-likelihood alpha of the capped geometric model. A draft with L
  accepted tokens contributes L acceptances and, if ``L < k``, one rejection, so
  ``alpha = S / (S + R)`` with ``S = sum_i A_i`` (all accepted tokens) and ``R = drafts - A_(k-1)``.
* ``iid_fit``: a chi-square test of the accepted-length histogram against that model (one fitted
  parameter), saying whether "acceptance is i.i.d." is a fair summary of the run.

Assumed: every draft had all k tokens. vLLM's n-gram proposer can propose fewer near the end of its
match, and the per-position draft counts are not exported; check ``draft_tokens == k * drafts``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.sim.speculative.chisquare import GofResult, TooFewCells, chi_square_gof


def _counts(accepted_per_pos: list[float] | np.ndarray, drafts: float) -> np.ndarray:
    a = np.asarray(accepted_per_pos, dtype=float)
    if a.ndim != 1 or a.size == 0 or drafts <= 0 or np.any(a < 0) or np.any(np.diff(np.r_[drafts, a]) > 0):
        raise ValueError(f"accepted counts per position must be non-increasing, start at most at drafts={drafts!r}, "
                         f"and not be empty; got {a.tolist()}")
    return a


def survival(accepted_per_pos: list[float] | np.ndarray, drafts: float) -> np.ndarray:
    """``A_i / drafts``: the share of drafts whose first i + 1 tokens were all accepted."""
    return _counts(accepted_per_pos, drafts) / drafts


def conditional_rates(accepted_per_pos: list[float] | np.ndarray, drafts: float) -> np.ndarray:
    """Acceptance at position i among drafts that reached it (nan where none reached it)."""
    a = _counts(accepted_per_pos, drafts)
    reached = np.r_[drafts, a[:-1]]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(reached > 0, a / np.where(reached > 0, reached, 1), np.nan)


def accepted_length_histogram(accepted_per_pos: list[float] | np.ndarray, drafts: float) -> np.ndarray:
    """Drafts with exactly L accepted tokens, for L = 0..k."""
    a = _counts(accepted_per_pos, drafts)
    at_least = np.r_[drafts, a]  # drafts with >= L accepted, L = 0..k
    return at_least - np.r_[a, 0.0]


def iid_alpha(accepted_per_pos: list[float] | np.ndarray, drafts: float) -> float:
    """Maximum-likelihood alpha of the i.i.d. model: accepted / (accepted + rejections)."""
    a = _counts(accepted_per_pos, drafts)
    accepted, rejections = a.sum(), drafts - a[-1]
    return float(accepted / (accepted + rejections)) if accepted + rejections else float("nan")


def iid_length_probabilities(alpha: float, k: int) -> np.ndarray:
    """P(L accepted) under the i.i.d. model: ``alpha**L (1 - alpha)`` for L < k, ``alpha**k`` for L = k."""
    lengths = np.arange(k + 1)
    probs = alpha**lengths * (1 - alpha)
    probs[k] = alpha**k
    return probs


@dataclass(frozen=True)
class IidFit:
    alpha: float
    observed: np.ndarray  # drafts with L = 0..k accepted
    expected: np.ndarray  # the same under the fitted i.i.d. model
    test: GofResult | None  # None when too few kinds of outcome (cells after pooling) are left for a test


def iid_fit(accepted_per_pos: list[float] | np.ndarray, drafts: float) -> IidFit:
    """Fit the i.i.d. model and test it on the accepted-length histogram (chi-square, 1 fitted parameter)."""
    alpha = iid_alpha(accepted_per_pos, drafts)
    observed = accepted_length_histogram(accepted_per_pos, drafts)
    probs = iid_length_probabilities(alpha, observed.size - 1)
    try:
        test = chi_square_gof(np.rint(observed), probs, fitted_parameters=1)
    except TooFewCells:
        test = None
    return IidFit(alpha=alpha, observed=observed, expected=drafts * probs, test=test)
