"""Where the KV capacity goes while requests wait (the saturated regime), and the expected paged waste."""

from __future__ import annotations

import inspect

import pytest

from servelab.sim.paging import COMPONENTS, compare_policies, expected_last_block_waste_pct, sample_requests, simulate


@pytest.fixture(scope="module")
def comparison():
    return compare_policies(sample_requests(300, seed=1), ["max_len", "exact", "paged:8", "paged:32", "paged:128"])


def test_saturated_components_add_up_to_the_capacity(comparison) -> None:
    for _, row in comparison.summary.iterrows():
        total = sum(row[f"{c}_pct_saturated"] for c in COMPONENTS)
        assert total == pytest.approx(100.0), row["policy"]
        assert row["idle_pct_saturated"] == 0.0  # saturated: somebody waits, so no slot is idle


def test_saturated_use_is_higher_than_the_whole_run_average(comparison) -> None:
    # The whole-run average includes the drain at the end, when memory sits idle.
    s = comparison.summary
    assert (s["used_pct_saturated"] > s["used_pct"]).all()


def test_expected_last_block_waste_tracks_the_simulated_waste(comparison) -> None:
    paged = comparison.summary[comparison.summary["policy"].astype(str).str.startswith("paged:")]
    for _, row in paged.iterrows():
        expected = expected_last_block_waste_pct(row["mean_batch"], int(row["block_size"]), row["capacity_tokens"])
        assert row["wasted_pct"] == pytest.approx(expected, rel=0.05), row["policy"]


def test_expected_waste_is_zero_for_one_token_blocks_and_grows_linearly() -> None:
    assert expected_last_block_waste_pct(10, 1, 1000) == 0.0
    assert expected_last_block_waste_pct(10, 33, 1000) == pytest.approx(2 * expected_last_block_waste_pct(10, 17, 1000))


def test_watermark_defaults_to_vllm_v1s_zero_and_a_watermark_cuts_preemptions() -> None:
    assert inspect.signature(simulate).parameters["watermark"].default == 0.0
    reqs = sample_requests(200, seed=2)
    none = simulate(reqs, "paged:16").summary["preemptions"]
    some = simulate(reqs, "paged:16", watermark=0.05).summary["preemptions"]
    assert some < none
