"""Tests of the KV reservation simulator: accounting, the claims the chapter makes, argument checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.sim.paging import (
    COMPONENTS,
    DEFAULT_POLICIES,
    Policy,
    compare_policies,
    parse_policy,
    sample_requests,
    simulate,
)
from servelab.sim.paging.contiguous import FirstFitMemory
from servelab.sim.paging.requests import SHAREGPT_MEAN_OUTPUT, SHAREGPT_MEAN_PROMPT

CAPACITY = 8192


@pytest.fixture(scope="module")
def workload() -> pd.DataFrame:
    return sample_requests(300, seed=7, rate=1.0)


@pytest.fixture(scope="module")
def comparison(workload: pd.DataFrame):
    return compare_policies(workload, DEFAULT_POLICIES, CAPACITY)


def row(comparison, policy: str) -> pd.Series:
    return comparison.summary.set_index("policy").loc[policy]


# ---------------------------------------------------------------------------- the chapter's claims


def test_paging_wastes_less_than_max_length_reservation(comparison) -> None:
    max_len, exact = row(comparison, "max_len"), row(comparison, "exact")
    for bs in (1, 8, 16, 32):
        paged = row(comparison, f"paged:{bs}")
        assert paged["wasted"] < exact["wasted"] < max_len["wasted"]
        assert paged["mean_batch"] > exact["mean_batch"] > max_len["mean_batch"]
        assert paged["steps"] < max_len["steps"]


def test_block_size_one_has_no_internal_fragmentation(comparison) -> None:
    paged1 = row(comparison, "paged:1")
    assert paged1["internal_frag"] == paged1["reserved_for_future"] == paged1["never_used"] == 0
    per_request = comparison.requests[comparison.requests["policy"] == "paged:1"]
    assert (per_request["max_internal_frag"] == 0).all()


@pytest.mark.parametrize("bs", [1, 8, 16, 32, 128])
def test_paged_waste_per_request_is_below_one_block(comparison, bs: int) -> None:
    per_request = comparison.requests[comparison.requests["policy"] == f"paged:{bs}"]
    assert (per_request["max_internal_frag"] < bs).all()
    assert (per_request["mean_internal_frag"] < bs).all()
    assert row(comparison, f"paged:{bs}")["external_frag"] == 0  # any free block fits any request


def test_contiguous_exact_reservation_still_fragments(comparison) -> None:
    """Even knowing every output length, variable-size contiguous chunks leave unusable holes."""
    exact = row(comparison, "exact")
    assert exact["never_used"] == 0  # it reserves exactly what it will use...
    assert exact["external_frag"] > 0  # ...but the holes between chunks are real
    assert exact["reserved_for_future"] > 0  # and it holds space for tokens not generated yet


def test_max_len_batch_is_capacity_over_max_len(comparison) -> None:
    assert row(comparison, "max_len")["max_batch"] == CAPACITY // 2048
    assert row(comparison, "max_len")["external_frag"] == 0  # equal chunks never leave holes


def test_components_add_up_to_capacity(comparison) -> None:
    totals = comparison.summary[list(COMPONENTS)].sum(axis=1)
    np.testing.assert_allclose(totals, CAPACITY)
    np.testing.assert_allclose(comparison.timeline[list(COMPONENTS)].sum(axis=1), CAPACITY)
    pct = comparison.breakdown.groupby("policy", observed=True)["pct"].sum()
    np.testing.assert_allclose(pct, 100)


def test_every_request_runs_to_completion(comparison, workload: pd.DataFrame) -> None:
    for policy, per_request in comparison.requests.groupby("policy", observed=True):
        assert len(per_request) == len(workload)
        assert (per_request["admitted"] >= per_request["arrival"]).all()
        ran = per_request["finished"] - per_request["admitted"]
        if policy in ("max_len", "exact"):  # reserved up front: never preempted
            assert (ran == per_request["output_len"]).all()
        else:
            assert (ran >= per_request["output_len"]).all()
        steps = row(comparison, policy)["steps"]
        assert per_request["finished"].max() == steps


def test_preemption_keeps_the_allocator_consistent() -> None:
    """A tight pool forces preemptions; the allocator's invariants are checked after every event."""
    reqs = sample_requests(60, seed=3, rate=2.0, max_len=512, prompt_mean=60, output_mean=200)
    result = simulate(reqs, "paged:16", capacity_tokens=1024, max_len=512, check_invariants=True)
    assert result.summary["preemptions"] > 0
    assert (result.requests["finished"] - result.requests["admitted"] >= reqs["output_len"]).all()


def test_results_are_deterministic_for_a_seed() -> None:
    a, b = sample_requests(150, seed=11), sample_requests(150, seed=11)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(sample_requests(150, seed=12))
    policies = ("max_len", "exact", "paged:16")
    first, second = compare_policies(a, policies), compare_policies(b, policies)
    pd.testing.assert_frame_equal(first.summary, second.summary)
    pd.testing.assert_frame_equal(first.timeline, second.timeline)


def test_tables_are_tidy(comparison) -> None:
    assert list(comparison.summary["policy"]) == list(DEFAULT_POLICIES)
    assert set(comparison.breakdown.columns) == {"policy", "component", "tokens", "pct"}
    assert len(comparison.breakdown) == len(DEFAULT_POLICIES) * len(COMPONENTS)
    assert {"policy", "step", "running", *COMPONENTS} <= set(comparison.timeline.columns)
    assert comparison.summary["block_size"].isna().sum() == 2


# ---------------------------------------------------------------------------- workload and memory


@settings(deadline=None, max_examples=40)
@given(
    n=st.integers(1, 200),
    seed=st.integers(0, 2**32 - 1),
    max_len=st.integers(2, 4096),
    rate=st.floats(0.01, 10),
)
def test_sampled_requests_fit_the_context(n: int, seed: int, max_len: int, rate: float) -> None:
    reqs = sample_requests(n, seed, rate=rate, max_len=max_len)
    assert len(reqs) == n and reqs["arrival"].iloc[0] == 0
    assert reqs["arrival"].is_monotonic_increasing
    assert (reqs["prompt_len"] >= 1).all() and (reqs["output_len"] >= 1).all()
    assert (reqs["prompt_len"] + reqs["output_len"] <= max_len).all()


def test_sampled_lengths_are_heavy_tailed_near_sharegpt_means() -> None:
    reqs = sample_requests(5000, seed=0)
    # The paper's ShareGPT means; tests/test_book_quoted_figures.py checks them against the quoted figure.
    for col, mean in (("prompt_len", SHAREGPT_MEAN_PROMPT), ("output_len", SHAREGPT_MEAN_OUTPUT)):
        assert 0.8 * mean < reqs[col].mean() < 1.05 * mean  # clipping trims the tail a little
        assert reqs[col].median() < 0.8 * reqs[col].mean()  # long right tail


def test_first_fit_memory_shows_external_fragmentation() -> None:
    m = FirstFitMemory(10)
    a, b, c = m.alloc(3), m.alloc(3), m.alloc(3)
    assert (a, b, c) == (0, 3, 6)
    m.free(b, 3)
    assert m.free_total == 4 and m.alloc(4) is None  # 4 tokens free, but as holes of 3 and 1
    m.free(a, 3)
    assert m.holes == [(0, 6), (9, 1)] and m.alloc(4) == 0


@settings(deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 12)), max_size=60))
def test_first_fit_holes_stay_sorted_disjoint_and_merged(program: list[tuple[bool, int]]) -> None:
    m, live = FirstFitMemory(40), []
    for is_alloc, size in program:
        if is_alloc or not live:
            start = m.alloc(size)
            if start is None:
                assert m.largest_hole() < size
            else:
                live.append((start, size))
        else:
            m.free(*live.pop(size % len(live)))
        assert m.free_total == 40 - sum(s for _, s in live) == sum(h for _, h in m.holes)
        for (s1, h1), (s2, _) in zip(m.holes, m.holes[1:], strict=False):
            assert s1 + h1 < s2  # sorted, disjoint, and adjacent holes merged
        taken = sorted(live + m.holes)
        assert all(s1 + h1 <= s2 for (s1, h1), (s2, _) in zip(taken, taken[1:], strict=False))


# ---------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("paged:0", r"block_size must be a positive integer \(tokens per KV block\), got 0"),
        ("paged:-8", r"got -8"),
        ("paged:x", r"bad block size 'x' in policy 'paged:x'; accepted: 'max_len', 'exact', or 'paged:"),
        ("fifo", r"unknown policy 'fifo'; accepted: 'max_len', 'exact', or 'paged:<block_size>'"),
        (Policy("paged", 0), r"got 0"),
        (Policy("lru"), r"unknown policy"),
    ],
)
def test_bad_policy_raises_value_error(workload: pd.DataFrame, policy, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_policy(policy)
    with pytest.raises(ValueError, match=message):
        simulate(workload, policy)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"capacity_tokens": -5},
            r"capacity_tokens must be an integer >= 1 \(KV cache size in tokens\), got -5$",
        ),
        ({"capacity_tokens": 0}, r"capacity_tokens must be an integer >= 1 .* got 0"),
        ({"capacity_tokens": 1000}, r"capacity_tokens=1000 is smaller than max_len=2048"),
        ({"watermark": 1.5}, r"watermark must be a fraction in \[0, 1\), got 1.5"),
        ({"max_len": 100}, r"a request needs \d+ tokens, more than max_len=100"),
    ],
)
def test_bad_simulation_arguments(workload: pd.DataFrame, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate(workload, "paged:16", **kwargs)


def test_block_size_too_large_for_the_pool() -> None:
    reqs = sample_requests(5, seed=0)
    with pytest.raises(ValueError, match=r"makes 2 blocks of 1000 tokens, fewer than one 2048-token request"):
        simulate(reqs, "paged:1000", capacity_tokens=2048)
    with pytest.raises(ValueError, match=r"needs \(16\) plus the watermark \(1\)"):
        simulate(reqs, "paged:128", capacity_tokens=2048, watermark=0.1)


def test_compare_rejects_a_bad_policy_before_running(workload: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="unknown policy 'oracle'"):
        compare_policies(workload, ["max_len", "oracle"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0, "seed": 0}, r"n must be an integer >= 1 \(number of requests\), got 0"),
        ({"n": 10, "seed": -1}, r"seed must be an integer >= 0 .* got -1"),
        ({"n": 10, "seed": 0, "rate": 0}, r"rate must be a finite number > 0, got 0"),
        ({"n": 10, "seed": 0, "max_len": 1}, r"max_len must be an integer >= 2 .* got 1"),
        ({"n": 10, "seed": 0, "output_sigma": -1.0}, r"output_sigma must be a finite number >= 0, got -1.0"),
    ],
)
def test_bad_workload_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sample_requests(**kwargs)
