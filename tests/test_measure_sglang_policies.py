"""SGLang's scheduling policies run in-process: the report's layout (fast) and SGLang's own code (engine_venv)."""

from __future__ import annotations

import pytest

from servelab.measure.prefix_cache.policies import (
    ahead,
    order_table,
    policy_frame,
    policy_summary,
    sglang_policy_orders,
    start_policy_orders,
)

REPORT = {
    "sglang": "0.5.23", "tree": "UnifiedRadixCache (RustUnifiedTreeCore)", "constants": {"X": 128},
    "skipped": {"random": "why"}, "import_s": 1.0, "run_s": 0.1,
    "names": ["new", "reuse"], "matched": {"new": 3, "reuse": 600},
    "runs": [
        {"case": "burst", "policy": "fcfs", "active": "fcfs", "order": ["new", "reuse"], "deprioritized": [],
         "error": None, "cause": None},
        {"case": "burst", "policy": "lpm", "active": "lpm", "order": ["reuse", "new"], "deprioritized": ["new"],
         "error": None, "cause": None},
        {"case": "burst", "policy": "dfs-weight", "active": "dfs-weight", "order": ["reuse", "new"],
         "deprioritized": ["new"], "error": None, "cause": None},
        {"case": "radix off", "policy": "spf", "active": None, "order": [], "deprioritized": [],
         "error": "Unknown schedule_policy", "cause": "requires prefix caching"},
    ],
}


def test_policy_frame_has_one_row_per_position_and_one_per_refusal():
    frame = policy_frame(REPORT)
    assert len(frame) == 7
    lpm = frame[(frame.case == "burst") & (frame.policy == "lpm")]
    assert lpm.request.tolist() == ["reuse", "new"] and lpm.position.tolist() == [1, 2]
    assert lpm.matched.tolist() == [600, 3] and lpm.deprioritized.tolist() == [False, True]
    refused = frame[frame.error.notna()]
    assert len(refused) == 1 and refused.position.isna().all() and refused.cause.iloc[0] == "requires prefix caching"
    assert frame.attrs["tree"].startswith("UnifiedRadixCache") and frame.attrs["matched"]["reuse"] == 600
    assert "runs" not in frame.attrs


def test_order_table_lays_out_policies_by_position():
    table = order_table(policy_frame(REPORT), "burst")
    assert table.index.tolist() == ["fcfs", "lpm", "dfs-weight"]
    assert table.loc["lpm", 1] == "reuse" and table.loc["fcfs", 2] == "reuse"
    assert table.loc["lpm", "sorted_by"] == "lpm"
    off = order_table(policy_frame(REPORT), "radix off")
    assert off.loc["spf", "refused"] == "Unknown schedule_policy"
    with pytest.raises(ValueError, match="unknown case 'nope'"):
        order_table(policy_frame(REPORT), "nope")


def test_policy_summary_says_who_kept_the_order_and_who_put_the_group_first():
    summary = policy_summary(policy_frame(REPORT), ["reuse"], "reusers first")
    assert summary.loc[("burst", "fcfs")].tolist() == ["fcfs", True, False, "-", "-"]
    assert summary.loc[("burst", "lpm")].tolist() == ["lpm", False, True, "new", "-"]
    # dfs-weight computes the in-batch set but sorts without it: nobody is moved to the back
    assert summary.loc[("burst", "dfs-weight"), "moved to the back"] == "-"
    refused = summary.loc[("radix off", "spf")]
    assert refused["arrival order kept"] is None and refused["refused"] == (
        "Unknown schedule_policy (first raised: requires prefix caching)")


def test_ahead_means_the_whole_group_before_anyone_else():
    assert ahead(["r1", "r2", "n1"], ["r1", "r2"])
    assert not ahead(["r1", "n1", "r2"], ["r1", "r2"])
    assert not ahead(["n1", "r1", "r2"], ["r1", "r2"])
    with pytest.raises(ValueError, match="not all in the order"):
        ahead(["r1"], ["r1", "r9"])


def test_bad_input_is_refused_before_any_engine_runs(cpu):
    with pytest.raises(ValueError, match="one distinct name per prompt"):
        sglang_policy_orders(cpu, [1, 2], [[1], [2]], ["a", "a"])
    with pytest.raises(ValueError, match="page_size >= 1"):
        sglang_policy_orders(cpu, [1, 2], [[1]], ["a"], page_size=0)


@pytest.mark.engine_venv
def test_sglangs_policies_on_a_queue_with_a_cached_prefix(require_engine, cpu):
    require_engine("sglang")
    warm = list(range(1000, 1100))
    fresh = [[7, *range(5000 + 100 * i, 5040 + 100 * i)] for i in range(2)]
    twins = [[8, *range(9000, 9040), 1 + i] for i in range(2)]  # nothing cached, 41 tokens in common
    reuse = warm[:90] + [3, 4, 5]
    names = ["fresh-0", "fresh-1", "twin-0", "twin-1", "reuse"]
    # pages of 16 tokens, as a GPU backend may choose (chapter 04 runs page 1, the cpu profile's, under nbval);
    # through a script started ahead of its input, as chapter 04 runs it
    for page in (16,):
        frame = sglang_policy_orders(cpu, warm, [*fresh, *twins, reuse], names, page_size=page,
                                     started=start_policy_orders(cpu))
        burst = {p: rows.request.tolist() for p, rows in frame[frame.case == "burst"].groupby("policy")}
        assert burst["fcfs"] == names and burst["lof"] == names
        for policy in ("lpm", "dfs-weight", "shortest-prefill-first", "hrrn, waited"):
            assert burst[policy][0] == "reuse", (page, policy, burst[policy])
        assert frame.attrs["matched"]["reuse"] == 90 // page * page and frame.attrs["matched"]["fresh-0"] == 0
        lpm = frame[(frame.case == "burst") & (frame.policy == "lpm")].set_index("request")
        assert lpm.deprioritized.to_dict() == {"reuse": False, "fresh-0": False, "fresh-1": False, "twin-0": False,
                                               "twin-1": True}
        assert burst["lpm"][-1] == "twin-1"
        for case in ("padded", "radix off"):
            rows = frame[(frame.case == case) & (frame.policy == "lpm")]
            assert rows.active.eq("fcfs").all() and rows.request.tolist() == names
        spf = frame[(frame.case == "radix off") & (frame.policy == "shortest-prefill-first")]
        assert len(spf) == 1 and "requires prefix caching" in spf.cause.iloc[0]
        summary = policy_summary(frame, ["reuse"])
        assert summary.loc[("radix off", "lpm"), "arrival order kept"] and summary.loc[("burst", "lpm"), "group first"]
        dfs_padded = frame[(frame.case == "padded") & (frame.policy == "dfs-weight")]
        assert dfs_padded.active.eq("dfs-weight").all() and dfs_padded.request.iloc[0] == "reuse"
