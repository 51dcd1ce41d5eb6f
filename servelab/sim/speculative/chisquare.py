"""Pearson's chi-square goodness-of-fit test, with its p-value computed here (the kernel has no scipy).

The p-value of a statistic ``x`` with ``df`` degrees of freedom is the chi-square survival function,
``Q(df/2, x/2)``, where ``Q`` is the regularised upper incomplete gamma function. It is evaluated the
classic way (Press et al., Numerical Recipes, section 6.2): the power series of the lower function
``P = 1 - Q`` when ``x < a + 1``, a continued fraction for ``Q`` (modified Lentz) otherwise. Both are
carried in logarithms, so p-values far below the smallest float (a broken sampler's) stay readable
as ``log10_p``.

The test: ``n`` samples fall into cells with probabilities ``p_i``; ``X2 = sum (O_i - n p_i)**2 / (n p_i)``
is approximately chi-square with ``cells - 1 - fitted_parameters`` degrees of freedom when every
expected count ``n p_i`` is at least about 5. Cells with smaller expected counts are pooled (by
expected count alone, so the pooling does not look at the data). A sample in a cell of probability 0
is impossible under the hypothesis: the p-value is then exactly 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servelab.integers import int_at_least

EPS = 1e-15
TINY = 1e-300
MAX_ITERATIONS = 100_000


def _log_prefactor(a: float, x: float) -> float:
    """log of x**a e**-x / Gamma(a), the factor both expansions share."""
    return a * math.log(x) - x - math.lgamma(a)


def _log_lower_series(a: float, x: float) -> float:
    """log P(a, x) from the series P = x**a e**-x / Gamma(a) * sum_n x**n / (a (a+1) ... (a+n))."""
    term = total = 1.0 / a
    ap = a
    for _ in range(MAX_ITERATIONS):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * EPS:
            return _log_prefactor(a, x) + math.log(total)
    raise ArithmeticError(f"incomplete gamma series did not converge for a={a}, x={x}")


def _log_upper_fraction(a: float, x: float) -> float:
    """log Q(a, x) from its continued fraction, evaluated by the modified Lentz method."""
    b = x + 1.0 - a
    c = 1.0 / TINY
    d = 1.0 / b if abs(b) > TINY else 1.0 / TINY
    h = d
    for i in range(1, MAX_ITERATIONS):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = TINY if abs(d) < TINY else d
        c = b + an / c
        c = TINY if abs(c) < TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < EPS:
            return _log_prefactor(a, x) + math.log(h)
    raise ArithmeticError(f"incomplete gamma continued fraction did not converge for a={a}, x={x}")


def log_gamma_q(a: float, x: float) -> float:
    """Natural log of the regularised upper incomplete gamma function Q(a, x), for a > 0, x >= 0."""
    if not a > 0 or not x >= 0:
        raise ValueError(f"Q(a, x) needs a > 0 and x >= 0, got a={a!r}, x={x!r}")
    if x == 0:
        return 0.0
    if math.isinf(x):
        return -math.inf
    if x < a + 1.0:
        return math.log1p(-math.exp(_log_lower_series(a, x))) if x > 0 else 0.0
    return _log_upper_fraction(a, x)


def gamma_q(a: float, x: float) -> float:
    """Regularised upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a)."""
    return math.exp(log_gamma_q(a, x))


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with ``df`` degrees of freedom: the test's p-value."""
    df = int_at_least("df (degrees of freedom)", df, 1)
    return 1.0 if x <= 0 else gamma_q(df / 2.0, x / 2.0)


def chi2_log10_sf(x: float, df: int) -> float:
    """log10 of :func:`chi2_sf`, finite even where the p-value itself underflows to 0."""
    df = int_at_least("df (degrees of freedom)", df, 1)
    return 0.0 if x <= 0 else log_gamma_q(df / 2.0, x / 2.0) / math.log(10.0)


class TooFewCells(ValueError):
    """Fewer than two cells (plus one per fitted parameter) are left after pooling: take more samples."""


def chi2_critical(significance: float, df: int) -> float:
    """The statistic whose p-value is ``significance``: reject above it (bisection on :func:`chi2_sf`)."""
    if not 0 < significance < 1:
        raise ValueError(f"significance must lie in (0, 1), got {significance!r}")
    lo, hi = 0.0, float(df)
    while chi2_sf(hi, df) > significance:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, df) > significance else (lo, mid)
    return hi


@dataclass(frozen=True)
class GofResult:
    """One chi-square goodness-of-fit test."""

    statistic: float
    df: int
    p_value: float
    log10_p: float
    samples: int
    cells: int  # after pooling
    impossible: int  # samples that fell where the hypothesis puts probability 0

    def rejects(self, significance: float) -> bool:
        return self.p_value < significance


def pool_small_cells(expected: np.ndarray, min_expected: float) -> np.ndarray:
    """A cell -> group label map that merges the smallest expected cells until every group reaches
    ``min_expected`` (a group that cannot joins the next smallest). Depends on ``expected`` only."""
    order = np.argsort(expected, kind="stable")
    labels = np.empty(len(expected), dtype=int)
    group, running = 0, 0.0
    for i in order:
        labels[i] = group
        running += expected[i]
        if running >= min_expected:
            group, running = group + 1, 0.0
    if running > 0 and group > 0:  # a last, too small group joins the one before it
        labels[labels == group] = group - 1
    return labels


def chi_square_gof(observed: np.ndarray, probs: np.ndarray, *, min_expected: float = 5.0,
                   fitted_parameters: int = 0) -> GofResult:
    """Test that the counts ``observed`` come from the cell probabilities ``probs``."""
    obs = np.asarray(observed, dtype=float).ravel()
    p = np.asarray(probs, dtype=float).ravel()
    if obs.shape != p.shape or np.any(obs < 0) or np.any(p < 0) or not math.isclose(p.sum(), 1.0, abs_tol=1e-9):
        raise ValueError(f"need counts >= 0 and probabilities >= 0 summing to 1 over the same cells; "
                         f"got {obs.size} counts, {p.size} probabilities summing to {p.sum()!r}")
    n = int(obs.sum())
    impossible = int(obs[p == 0].sum())
    possible = p > 0
    expected = n * p[possible]
    labels = pool_small_cells(expected, min_expected)
    cells = int(labels.max()) + 1 if labels.size else 0
    o = np.bincount(labels, weights=obs[possible], minlength=cells)
    e = np.bincount(labels, weights=expected, minlength=cells)
    df = cells - 1 - fitted_parameters
    if df < 1:
        raise TooFewCells(f"too few cells for a chi-square test: {cells} after pooling cells below {min_expected} "
                         f"expected samples, {fitted_parameters} fitted parameter(s); take more samples")
    if impossible:
        return GofResult(math.inf, df, 0.0, -math.inf, n, cells, impossible)
    stat = float(np.sum((o - e) ** 2 / e))
    return GofResult(stat, df, chi2_sf(stat, df), chi2_log10_sf(stat, df), n, cells, 0)
