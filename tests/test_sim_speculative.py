"""Speculative decoding from scratch: the theory's formulas, the chi-square test, the sampler (exact and broken).

The sampler's tests are statistical with fixed seeds: the exact rule must pass a chi-square
goodness-of-fit test against the target's own distribution at SIGNIFICANCE, and each broken rule
must fail the same test. Before trusting a rejection, the test's power against that broken rule is
computed from its exact output distribution (numpy's noncentral chi-square), so a pass of the
exact rule is evidence, not a test too weak to fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.sim.speculative import (
    VARIANTS,
    TooFewCells,
    acceptance_probability,
    accepted_length_histogram,
    chi2_critical,
    chi2_log10_sf,
    chi2_sf,
    chi_square_gof,
    conditional_rates,
    draft_acceptance_rate,
    expected_tokens,
    first_token_distribution,
    generate,
    greedy_continuation,
    iid_alpha,
    iid_fit,
    iid_length_probabilities,
    leading_kept,
    optimal_k,
    sample_accepted,
    sequence_counts,
    sequence_probabilities,
    softmax,
    speculative_step,
    speedup,
    survival,
    verify_cost_from_times,
)

SIGNIFICANCE = 1e-3  # per test; the exact rule must pass, every broken rule must fail
SAMPLES = 40_000
V = 4
alphas = st.floats(0.0, 1.0)
ks = st.integers(1, 12)
costs = st.floats(0.0, 1.0)

# ---------------------------------------------------------------------------------------------- theory


@given(ks)
def test_no_acceptance_gives_one_token_and_full_acceptance_k_plus_one(k):
    assert expected_tokens(0.0, k) == 1.0
    assert expected_tokens(1.0, k) == k + 1
    assert expected_tokens(1 - 1e-12, k) == pytest.approx(k + 1, rel=1e-9)  # the limit, no 0/0


@given(st.floats(0.0, 0.999), ks)
def test_expected_tokens_is_the_papers_closed_form(alpha, k):
    assert expected_tokens(alpha, k) == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), rel=1e-12)


@given(alphas, alphas, ks)
def test_more_acceptance_or_more_drafts_never_gives_fewer_tokens(a, b, k):
    lo, hi = sorted((a, b))
    assert expected_tokens(lo, k) <= expected_tokens(hi, k)
    assert expected_tokens(hi, k) <= expected_tokens(hi, k + 1)


def test_expected_tokens_matches_a_simulated_acceptance_process():
    """Independent of the formula: draw i.i.d. accept/reject and count tokens per verification."""
    for alpha, k in [(0.3, 2), (0.7, 4), (0.9, 8)]:
        tokens = sample_accepted(alpha, k, 200_000, seed=0) + 1
        assert abs(tokens.mean() - expected_tokens(alpha, k)) < 5 * tokens.std() / math.sqrt(tokens.size)


def test_sampled_verifications_keep_drafts_up_to_the_first_rejection():
    assert set(sample_accepted(0.0, 4, 50, seed=1)) == {0} and set(sample_accepted(1.0, 4, 50, seed=1)) == {4}
    counts = np.bincount(sample_accepted(0.5, 3, 100_000, seed=2), minlength=4) / 100_000
    assert np.allclose(counts, [0.5, 0.25, 0.125, 0.125], atol=0.01)  # geometric, capped at k
    with pytest.raises(ValueError, match="alpha"):
        sample_accepted(1.5, 3, 10, seed=0)
    with pytest.raises(ValueError, match="verifications"):
        sample_accepted(0.5, 3, 0, seed=0)


def test_a_verification_keeps_the_drafts_before_the_first_rejection():
    kept = np.array([[True, True, False, True], [False, True, True, True], [True, True, True, True]])
    assert leading_kept(kept).tolist() == [2, 0, 4]


@given(alphas, costs, ks)
def test_speculation_pays_exactly_when_alpha_exceeds_c(alpha, c, k):
    if alpha <= c:
        assert speedup(alpha, k, c) <= 1 + 1e-12
        assert optimal_k(alpha, c) == 0
    elif alpha > c + 1e-9:
        assert speedup(alpha, 1, c) == pytest.approx((1 + alpha) / (1 + c))
        assert optimal_k(alpha, c) >= 1


@given(alphas, alphas, costs)
@settings(max_examples=50)
def test_optimal_k_grows_with_acceptance(a, b, c):
    lo, hi = sorted((a, b))
    assert optimal_k(lo, c) <= optimal_k(hi, c)


@given(alphas, costs, costs)
@settings(max_examples=50)
def test_optimal_k_shrinks_as_the_draft_gets_dearer(alpha, c1, c2):
    cheap, dear = sorted((c1, c2))
    assert optimal_k(alpha, dear) <= optimal_k(alpha, cheap)


def test_a_free_perfect_draft_uses_every_slot_and_the_best_k_beats_its_neighbours():
    assert optimal_k(1.0, 0.0, k_max=10) == 10
    best = optimal_k(0.8, 0.05, k_max=32)
    assert 1 <= best < 32
    assert speedup(0.8, best, 0.05) >= max(speedup(0.8, best - 1, 0.05), speedup(0.8, best + 1, 0.05))


@given(st.floats(0.0, 0.999), costs)
def test_compute_bound_verification_never_pays(alpha, c):
    """If a forward over n tokens costs n steps, verification is no cheaper than decoding."""
    assert optimal_k(alpha, c, verify_cost=lambda n: float(n)) == 0


def test_measured_verification_cost_lowers_the_speedup_and_the_best_k():
    cost = verify_cost_from_times({1: 0.010, 2: 0.011, 4: 0.014, 8: 0.025, 16: 0.050})
    assert cost(1) == 1.0 and cost(3) == pytest.approx(1.25)
    assert speedup(0.8, 4, 0.05, cost(5)) < speedup(0.8, 4, 0.05)
    assert optimal_k(0.8, 0.05, k_max=15, verify_cost=cost) < optimal_k(0.8, 0.05, k_max=15)
    with pytest.raises(ValueError, match="no measured forward cost near 17"):
        cost(17)
    with pytest.raises(ValueError, match="including n = 1"):
        verify_cost_from_times({2: 0.01})


def test_a_monotone_verification_cost_never_falls_below_a_smaller_pass():
    """A measured dip (4 tokens faster than 1 and 2) makes v(4) < 1; the monotone curve takes the running maximum."""
    times = {1: 0.049, 2: 0.056, 4: 0.043, 8: 0.053, 16: 0.067}
    raw, flat = verify_cost_from_times(times), verify_cost_from_times(times, monotone=True)
    assert raw(4) < 1 and flat(4) == pytest.approx(0.056 / 0.049) and flat(8) == flat(4)
    assert flat(16) == pytest.approx(0.067 / 0.049) == raw(16)
    assert all(flat(n) >= flat(m) for m in range(1, 16) for n in range(m, 17))


@given(st.floats(0.001, 0.999), st.integers(2, 12))
def test_engine_acceptance_rate_is_below_alpha(alpha, k):
    assert draft_acceptance_rate(alpha, k) < alpha
    assert draft_acceptance_rate(1.0, k) == 1.0 and draft_acceptance_rate(0.0, k) == 0.0


def test_bad_theory_inputs_are_one_clear_error():
    with pytest.raises(ValueError, match=r"alpha .* \[0, 1\], got 1.5"):
        expected_tokens(1.5, 3)
    with pytest.raises(ValueError, match="k .* >= 0, got -1"):
        expected_tokens(0.5, -1)
    with pytest.raises(ValueError, match="c .* >= 0, got -0.1"):
        speedup(0.5, 2, -0.1)

# ------------------------------------------------------------------------------------------ chi-square

# chi-square quantiles: (statistic, df, upper-tail probability), from standard tables
QUANTILES = [(3.841458820694124, 1, 0.05), (6.634896601021214, 1, 0.01), (5.991464547107979, 2, 0.05),
             (7.814727903251178, 3, 0.05), (16.26623619623813, 3, 0.001), (9.487729036781154, 4, 0.05),
             (11.070497693516351, 5, 0.05), (20.515005652432873, 5, 0.001), (18.307038053275146, 10, 0.05),
             (23.209251158954356, 10, 0.01), (124.34211340400407, 100, 0.05)]


@pytest.mark.parametrize(("x", "df", "p"), QUANTILES)
def test_p_values_match_chi_square_tables(x, df, p):
    assert chi2_sf(x, df) == pytest.approx(p, rel=1e-9)
    assert chi2_critical(p, df) == pytest.approx(x, rel=1e-9)


@given(st.floats(0.0, 200.0), st.integers(1, 30))
def test_p_values_match_the_closed_forms(x, half_df):
    """Even df: Q(n, y) = e^-y sum_{i<n} y^i / i!; df 1 and 3 through erfc."""
    y = x / 2
    even = math.exp(-y) * sum(y**i / math.factorial(i) for i in range(half_df))
    assert chi2_sf(x, 2 * half_df) == pytest.approx(even, rel=1e-9, abs=1e-300)
    assert chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(y)), rel=1e-9, abs=1e-300)
    df3 = math.erfc(math.sqrt(y)) + math.sqrt(2 * x / math.pi) * math.exp(-y)
    assert chi2_sf(x, 3) == pytest.approx(df3, rel=1e-9, abs=1e-300)


def test_log_p_value_survives_where_the_p_value_underflows():
    assert chi2_sf(5000.0, 2) == 0.0
    assert chi2_log10_sf(5000.0, 2) == pytest.approx(-2500 / math.log(10), rel=1e-12)  # log10 e^-x/2
    assert chi2_log10_sf(30.0, 7) == pytest.approx(math.log10(chi2_sf(30.0, 7)), rel=1e-12)


def test_the_test_is_calibrated_on_data_that_fit():
    """Counts drawn by numpy's multinomial from the hypothesis: about 5 % of p-values fall below 0.05."""
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(8))
    p_values = np.array([chi_square_gof(rng.multinomial(2000, probs), probs).p_value for _ in range(600)])
    assert 0.03 <= np.mean(p_values < 0.05) <= 0.075  # binomial(600, 0.05): mean 0.05, sd 0.009
    assert 0.4 <= np.median(p_values) <= 0.6


def test_impossible_samples_small_cells_and_too_few_cells():
    assert chi_square_gof([5, 5, 1], [0.5, 0.5, 0.0]).p_value == 0.0
    pooled = chi_square_gof([500, 490, 6, 4], [0.5, 0.49, 0.006, 0.004])  # 6 and 4 expected: pooled into one
    assert pooled.cells == 3 and pooled.df == 2
    with pytest.raises(TooFewCells):
        chi_square_gof([3, 2], [0.6, 0.4])
    with pytest.raises(ValueError, match="summing to 1"):
        chi_square_gof([3, 2], [0.6, 0.6])

# ---------------------------------------------------------------------------------------------- sampler


def _rows(rng: np.random.Generator, zeros: tuple[int, ...] = ()) -> np.ndarray:
    """A bigram table whose rows are bounded away from 0 (so every cell is well filled), with zero columns."""
    m = 0.5 * rng.dirichlet(np.ones(V), size=V) + 0.5 / V
    m[:, list(zeros)] = 0.0
    return m / m.sum(axis=1, keepdims=True)


def _pairs() -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """(target, draft, samples) per case. A draft close to the target (alpha 0.98) hides a broken rule
    well: its bias shrinks with (1 - alpha)**2, so that case needs four times the samples for the power."""
    rng = np.random.default_rng(2025)
    p = _rows(rng)
    return {
        "dense": (_rows(rng), _rows(rng), SAMPLES),
        "draft_never_proposes_token_0": (_rows(rng), _rows(rng, zeros=(0,)), SAMPLES),
        "draft_proposes_impossible_token_1": (_rows(rng, zeros=(1,)), _rows(rng), SAMPLES),
        "greedy_one_hot_draft": (_rows(rng), np.eye(V)[rng.integers(0, V, V)], SAMPLES),  # vLLM's default drafts
        "close_draft": (p, 0.8 * p + 0.2 * _rows(rng), 4 * SAMPLES),
    }


PAIRS = _pairs()


def _fits(counts: np.ndarray, probs: np.ndarray) -> bool:
    """The counts are consistent with ``probs`` (a one-cell distribution: every sample in that cell)."""
    if (probs > 0).sum() == 1:
        return counts[probs > 0].sum() == counts.sum()
    return not chi_square_gof(counts, probs).rejects(SIGNIFICANCE)


@pytest.mark.parametrize("k", [1, 3])  # k = 1: the second token is often the bonus token
@pytest.mark.parametrize("case", PAIRS)
def test_exact_rule_reproduces_the_target_distribution(case, k):
    target, draft, samples = PAIRS[case]
    counts = sequence_counts(generate(target, draft, k, samples, 2, seed=11), V)
    first = chi_square_gof(counts.sum(axis=1), target[0])
    pair = chi_square_gof(counts, sequence_probabilities(target, 2))
    assert not first.rejects(SIGNIFICANCE), first
    assert not pair.rejects(SIGNIFICANCE), pair


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "exact"])
@pytest.mark.parametrize("case", PAIRS)
def test_broken_rules_are_rejected_by_the_same_test(case, variant):
    target, draft, samples = PAIRS[case]
    wrong = first_token_distribution(target[0], draft[0], variant)
    assert np.abs(wrong - target[0]).sum() > 0.01  # the broken rule really emits something else
    counts = sequence_counts(generate(target, draft, 3, samples, 2, seed=11, variant=variant), V)
    first = chi_square_gof(counts.sum(axis=1), target[0])
    assert first.rejects(SIGNIFICANCE), first
    assert chi_square_gof(counts, sequence_probabilities(target, 2)).rejects(SIGNIFICANCE)
    assert _fits(counts.sum(axis=1), wrong)  # it emits what first_token_distribution says it does


@pytest.mark.parametrize("case", PAIRS)
def test_the_test_has_the_power_to_see_each_broken_rule(case):
    """Power from the exact output distributions: noncentral chi-square with lambda = n sum (b - p)^2 / p."""
    target, draft, samples = PAIRS[case]
    p = target[0]
    rng = np.random.default_rng(3)
    for variant in ("resample_from_q", "accept_all"):
        b = first_token_distribution(p, draft[0], variant)
        if np.any(b[p == 0] > 0):
            continue  # an impossible token: rejected outright once one appears
        lam = samples * np.sum((b - p)[p > 0] ** 2 / p[p > 0])
        df = int((p > 0).sum()) - 1
        power = np.mean(rng.noncentral_chisquare(df, lam, 200_000) > chi2_critical(SIGNIFICANCE, df))
        assert power > 0.999, (variant, lam, power)


@given(st.integers(0, 2**32 - 1), st.integers(2, 8), st.integers(1, 5), st.sampled_from([0.0, 0.5, 1.0, 2.0]))
@settings(max_examples=40, deadline=None)
def test_greedy_speculation_reproduces_greedy_target_output_exactly(seed, vocab, k, draft_temperature):
    rng = np.random.default_rng(seed)
    target = softmax(rng.normal(size=(vocab, vocab)), 0.0)
    draft = softmax(rng.normal(size=(vocab, vocab)), draft_temperature)
    out = generate(target, draft, k, 50, 12, seed=seed)
    assert (out == greedy_continuation(target, 12)).all()


def test_context_free_toy_matches_the_iid_theory():
    """Same rows everywhere: acceptance is i.i.d. with alpha = sum min(p, q), as the theory assumes."""
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    target, draft, k = np.tile(p, (6, 1)), np.tile(q, (6, 1)), 4
    alpha = float(acceptance_probability(p, q))
    step = speculative_step(target, draft, np.zeros(SAMPLES, dtype=int), k, rng)
    se = step.emitted.std() / math.sqrt(SAMPLES)
    assert abs(step.emitted.mean() - expected_tokens(alpha, k)) < 5 * se
    lengths = np.bincount(step.accepted, minlength=k + 1)
    assert not chi_square_gof(lengths, iid_length_probabilities(alpha, k)).rejects(SIGNIFICANCE)


def test_sampler_rejects_bad_models():
    with pytest.raises(ValueError, match="target must be a"):
        generate(np.ones((3, 3)), np.eye(3), 2, 10, 2, seed=0)
    with pytest.raises(ValueError, match="same vocabulary"):
        generate(np.eye(3), np.eye(2), 2, 10, 2, seed=0)
    with pytest.raises(ValueError, match="unknown variant"):
        speculative_step(np.eye(3), np.eye(3), np.zeros(2, dtype=int), 2, np.random.default_rng(0), "nope")

# ------------------------------------------------------------------------------- acceptance per position


def _per_position_counts(accepts: np.ndarray) -> tuple[np.ndarray, int]:
    """vLLM's counters from simulated drafts: A_i = drafts whose first i + 1 tokens were accepted."""
    n_accepted = np.where(accepts.all(axis=1), accepts.shape[1], np.argmin(accepts, axis=1))
    return np.array([(n_accepted > i).sum() for i in range(accepts.shape[1])], dtype=float), len(accepts)


def test_iid_drafts_give_back_their_alpha_and_pass_the_iid_test():
    rng = np.random.default_rng(5)
    per_pos, drafts = _per_position_counts(rng.random((20_000, 4)) < 0.7)
    alpha = iid_alpha(per_pos, drafts)
    assert abs(alpha - 0.7) < 0.01
    assert np.allclose(survival(per_pos, drafts), 0.7 ** np.arange(1, 5), atol=0.01)
    assert np.allclose(conditional_rates(per_pos, drafts), 0.7, atol=0.02)
    assert not iid_fit(per_pos, drafts).test.rejects(SIGNIFICANCE)


def test_iid_alpha_is_the_maximum_likelihood_estimate():
    per_pos, drafts = np.array([800.0, 500.0, 250.0]), 1000
    hist = accepted_length_histogram(per_pos, drafts)
    grid = np.linspace(0.001, 0.999, 9999)
    loglik = [np.sum(hist * np.log(iid_length_probabilities(a, 3))) for a in grid]
    assert iid_alpha(per_pos, drafts) == pytest.approx(grid[int(np.argmax(loglik))], abs=2e-4)
    assert hist.sum() == drafts


def test_acceptance_that_falls_with_depth_fails_the_iid_test():
    rng = np.random.default_rng(6)
    accepts = rng.random((20_000, 4)) < np.array([0.9, 0.6, 0.4, 0.2])
    per_pos, drafts = _per_position_counts(accepts)
    assert np.all(np.diff(conditional_rates(per_pos, drafts)) < 0)
    assert iid_fit(per_pos, drafts).test.log10_p < -6


def test_inconsistent_counters_are_one_clear_error():
    with pytest.raises(ValueError, match="non-increasing"):
        survival([10, 20], 30)
    with pytest.raises(ValueError, match="non-increasing"):
        iid_alpha([40, 20], 30)
