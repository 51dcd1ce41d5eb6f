"""Chapter 06's concurrency sweep priced and judged: batch costs, interleaved rounds and their paired
speedups, the verdict across the spread, the gap in plain steps, and the KV blocks a wave holds."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.measure.speculative import live, load


def test_batch_costs_price_a_verification_and_the_drafts_passes_at_b():
    def flat(n):  # every pass costs one step: the papers' case
        return 1.0

    def linear(n):  # a pass costs its tokens
        return float(n)

    assert load.batch_costs(4, 0.3, 16, flat) == pytest.approx((0.3, 1.0))
    # b = 8, k = 2: plain 8 tokens; verification 24; draft c (32 + 8) over k plain steps
    assert load.batch_costs(2, 0.5, 8, linear) == pytest.approx((0.5 * 40 / (2 * 8), 3.0))
    cost = {n: 1.0 + max(0, n - 8) / 8 for n in range(1, 200)}  # flat up to 8 tokens, then a climb
    gains = []
    for b in (1, 2, 4, 8, 16):  # 1000 verifications of 4 tokens each, one step per token without speculation
        c_b, v_b = load.batch_costs(4, 0.0, b, cost.__getitem__)
        gains.append(live.predicted_speedup(4001, 1000, 3000, 4, c_b, v_b))
    # 5 tokens still flat at b = 1; where both passes climb, a verification costs k + 1 = 5 plain steps
    assert gains == pytest.approx([4.0, 3.2, 1.6, 0.8, 0.8])
    dip = {1: 1.0, 4: 0.8, 5: 0.9, 6: 0.95}.__getitem__  # a pass over a few tokens faster than over one
    assert load.batch_costs(4, 1.0, 1, dip)[1] == pytest.approx(0.9)  # the raw curve: a verification below 1
    with pytest.raises(ValueError, match="c must be"):
        load.batch_costs(4, -0.1, 1, flat)
    with pytest.raises(ValueError, match="b"):
        load.batch_costs(4, 0.0, 0, flat)


def test_speedups_pair_each_round_with_the_baselines_same_round():
    rates = pd.DataFrame([
        # round 1 ran on a slower machine: both servers slowed, the ratio did not
        {"method": "plain", "round": 0, "b": 1, "rate": 10.0}, {"method": "fast", "round": 0, "b": 1, "rate": 15.0},
        {"method": "plain", "round": 1, "b": 1, "rate": 5.0}, {"method": "fast", "round": 1, "b": 1, "rate": 7.0},
        {"method": "plain", "round": 2, "b": 1, "rate": 10.0}, {"method": "fast", "round": 2, "b": 1, "rate": 16.0},
        {"method": "plain", "round": 0, "b": 2, "rate": 8.0}, {"method": "fast", "round": 0, "b": 2, "rate": 8.8},
        {"method": "plain", "round": 1, "b": 2, "rate": 8.0}, {"method": "fast", "round": 1, "b": 2, "rate": 7.2},
    ])
    got = load.paired_speedups(rates, ["b"], "rate").set_index("b")
    assert got.loc[1, ["speedup", "lowest", "highest", "rounds"]].tolist() == pytest.approx([1.5, 1.4, 1.6, 3])
    assert got.loc[2, ["lowest", "highest"]].tolist() == pytest.approx([0.9, 1.1])
    assert list(got.method.unique()) == ["fast"]
    with pytest.raises(ValueError, match="without a 'plain'"):
        load.paired_speedups(rates[~((rates.method == "plain") & (rates["round"] == 2))], ["b"], "rate")
    with pytest.raises(ValueError, match="no rows of the baseline"):
        load.paired_speedups(rates, ["b"], "rate", baseline="none")


def test_a_verdict_holds_only_across_the_spread():
    assert load.spread_verdict(1.05, 1.3, 3) == "faster" and load.spread_verdict(0.7, 0.95, 3) == "slower"
    assert load.spread_verdict(0.9, 1.1, 3) == "not resolved with 3 rounds" == load.not_resolved(3)
    assert load.spread_verdict(1.0, 1.2, 5) == "not resolved with 5 rounds"
    assert load.not_resolved(1) == "not resolved with 1 round"
    with pytest.raises(ValueError, match="above highest"):
        load.spread_verdict(1.2, 1.1, 3)
    with pytest.raises(ValueError, match="rounds"):
        load.not_resolved(0)


def test_first_slowdown_beyond_the_noise():
    # sustained: 0.9 at b = 4 is followed by 1.01 at b = 8, so the slowdown starts at 16
    assert load.first_slowdown({1: 1.5, 2: 1.1, 4: 0.9, 8: 1.01, 16: 0.7}) == 16
    assert load.first_slowdown({1: 1.5, 2: 1.1, 4: 0.9, 8: 0.8, 16: 0.7}) == 4
    assert load.first_slowdown({1: 1.5, 4: 0.9, 8: 1.01}) is None
    # within a 3% margin 0.98 at b = 8 is not a slowdown, so the one at b = 4 is not sustained
    assert load.first_slowdown({4: 0.9, 8: 0.98, 16: 0.8}, margin=0.03) == 16
    assert load.first_slowdown({16: 0.8, 4: 0.9, 8: 0.95}, margin=0.03) == 4  # order of the keys does not matter
    assert load.first_slowdown({1: 0.4, 16: 0.2}) == 1 and load.first_slowdown({1: 2.0, 16: 1.0}) is None
    # 0.97 at b = 1 is within a 6% margin: the first slowdown beyond it is at b = 4
    assert load.first_slowdown({1: 0.97, 2: 0.95, 4: 0.65}, margin=0.06) == 4
    assert load.first_slowdown({1: 0.97, 2: 0.99}, margin=0.06) is None
    assert load.first_slowdown({1: 0.97, 2: 0.99}) == 1
    with pytest.raises(ValueError, match="margin"):
        load.first_slowdown({1: 0.9}, margin=-0.1)


def test_the_trend_test_is_two_sided_and_leaves_no_prediction_untested():
    assert [load.trend_test(r) for r in (0.5, 0.85, 0.95, 1.05, 1.15, 1.3)] == [
        "falls", "leans down", "flat", "flat", "leans up", "rises"]
    assert load.trend_holds("falls", 0.6) and not load.trend_holds("falls", 0.95)
    assert load.trend_holds("flat", 0.85) and not load.trend_holds("flat", 0.7)  # a flat prediction can fail
    assert load.trend_holds("rises", 1.3) and not load.trend_holds("rises", 1.0)
    # a weak prediction tests only that the measurement does not move clearly the other way
    assert load.trend_holds("leans down", 1.05) and load.trend_holds("leans down", 0.5)
    assert not load.trend_holds("leans down", 1.15) and not load.trend_holds("leans up", 0.85)
    assert set(load.DECISIVE) == {"falls", "flat", "rises"}
    with pytest.raises(ValueError, match="unknown trend test 'up'"):
        load.trend_holds("up", 1.0)
    with pytest.raises(ValueError, match="positive ratio"):
        load.trend_test(float("nan"))


def _sweep(rows: dict[int, list[float]]) -> pd.DataFrame:
    """round -> speedups at b = 1, 2, 4, 8, 16, as round_speedups' rows of one method."""
    return pd.DataFrame([{"round": r, "concurrency": b, "speedup": s}
                         for r, values in rows.items() for b, s in zip((1, 2, 4, 8, 16), values, strict=True)])


def test_sweep_change_reads_the_trend_off_every_point_of_every_round():
    falling = [0.9 * b ** -0.1 for b in (1, 2, 4, 8, 16)]
    assert load.sweep_change(_sweep({0: falling})) == pytest.approx(16 ** -0.1)
    # a round whose speedups all came out 30% higher (its plain turn ran slow throughout) moves no slope
    assert load.sweep_change(_sweep({0: falling, 1: [1.3 * s for s in falling], 2: falling})) == pytest.approx(
        16 ** -0.1)
    # a change at the largest b alone still shows: the prediction falls there, and a measurement that stays
    # flat fails it
    step = load.sweep_change(_sweep({0: [1.5, 1.5, 1.5, 1.5, 0.9]}))
    assert load.trend_test(step) == "falls" and step == pytest.approx((0.9 / 1.5) ** 0.8)
    flat = _sweep({0: [1.0, 0.95, 1.05, 0.98, 1.02], 1: [0.9, 0.93, 0.88, 0.92, 0.9], 2: [1.1, 1.0, 1.08, 1.1, 1.05]})
    assert not load.trend_holds("falls", load.sweep_change(flat))
    assert load.trend_holds("flat", load.sweep_change(flat))
    # a round measured at one b only adds nothing
    assert load.sweep_change(pd.concat([_sweep({0: falling}), pd.DataFrame(
        [{"round": 1, "concurrency": 4, "speedup": 3.0}])])) == pytest.approx(16 ** -0.1)


def test_sweep_change_refuses_what_has_no_trend():
    with pytest.raises(ValueError, match="missing: round"):
        load.sweep_change(pd.DataFrame({"concurrency": [1, 2], "speedup": [1.0, 0.9]}))
    with pytest.raises(ValueError, match="two values of concurrency in one round"):
        load.sweep_change(pd.DataFrame({"round": [0, 1], "concurrency": [1, 2], "speedup": [1.0, 0.9]}))
    with pytest.raises(ValueError, match="must be positive"):
        load.sweep_change(_sweep({0: [1.0, 0.9, 0.0, 0.8, 0.7]}))
    with pytest.raises(ValueError, match="one method's rows, got a, b"):
        load.sweep_change(_sweep({0: [1.0, 0.9, 0.8, 0.8, 0.7]}).assign(method=["a", "a", "b", "b", "b"]))


def test_a_trend_is_judged_only_where_every_round_agrees():
    assert load.trend_verdict("falls", [0.6, 0.7, 0.85]) == "as predicted"
    assert load.trend_verdict("falls", [0.95, 1.0, 1.2]) == "contradicted"  # the check's failure
    assert load.trend_verdict("falls", [0.6, 0.7, 1.1]) == "not resolved with 3 rounds"
    assert load.trend_verdict("flat", [1.3, 1.25]) == "contradicted" and load.trend_verdict("rises", [1.2]) == (
        "as predicted")
    # each round's change read from that round alone: one round's slow b = 1 does not move the others
    rounds = _sweep({0: [1.0, 0.9, 0.8, 0.7, 0.6], 1: [1.5, 0.9, 0.8, 0.7, 0.6], 2: [1.0, 0.9, 0.8, 0.7, 0.6]})
    changes = [load.sweep_change(r) for _, r in rounds.groupby("round")]
    assert changes[0] == changes[2] and changes[1] < changes[0]
    with pytest.raises(ValueError, match="at least one round"):
        load.trend_verdict("falls", [])
    with pytest.raises(ValueError, match="unknown trend test"):
        load.trend_verdict("down", [0.5])


def test_steps_gap_per_verification():
    # 25 decode steps, 5 verifications: predicted 1.25x (20 steps), measured 1.0x (25 steps): 1 step each
    assert load.steps_gap(26, 5, 1.0, 1.25) == pytest.approx(1.0)
    assert load.steps_gap(26, 5, 1.25, 1.0) == pytest.approx(-1.0)
    assert load.steps_gap(26, 5, 0.8, 0.8) == 0
    with pytest.raises(ValueError, match="positive drafts"):
        load.steps_gap(26, 0, 1.0, 1.0)


def test_logits_the_proxy_leaves_out():
    assert load.logits_gap(1, 4, 1.0, 1.0, 0.0) == 0  # no cost per row: nothing left out
    # b = 1, k = 4: the verification gains 4 rows, the plain step none: 4 rows of 0.01 in a 1-second step
    assert load.logits_gap(1, 4, 1.0, 1.0, 0.01) == pytest.approx(0.04)
    # b = 16: 79 rows on a 3-second verification, 15 on a 1-second step
    assert load.logits_gap(16, 4, 3.0, 1.0, 0.01) == pytest.approx(3.79 / 1.15 - 3.0)
    with pytest.raises(ValueError, match="positive pass times"):
        load.logits_gap(16, 4, 0.0, 1.0, 0.01)


def test_reserved_slots_and_the_blocks_a_wave_holds():
    assert load.reserved_slots(None, 4) == 0 and load.reserved_slots({}, 4) == 0
    assert load.reserved_slots({"method": "ngram", "num_speculative_tokens": 4}, 4) == 4
    assert load.reserved_slots({"method": "draft_model", "model": "m"}, 4) == 8  # k drafted + k lookahead
    with pytest.raises(ValueError, match="unknown speculative method 'medusa'"):
        load.reserved_slots({"method": "medusa"}, 4)
    assert load.sweep_blocks(112, 32, 4, 128, 16) == 32  # 148 tokens: two blocks each
    assert load.sweep_blocks(90, 34, 4, 128, 3) == 3  # 128 tokens: exactly one block
    assert load.sweep_blocks(90, 34, 8, 128, 3) == 6  # the draft model's lookahead: 132 tokens, two blocks
    assert load.sweep_blocks(90, 34, 0, 128, 1) == 1 and load.sweep_blocks(91, 34, 4, 128, 1) == 2
    with pytest.raises(ValueError, match="requests"):
        load.sweep_blocks(90, 34, 4, 128, 0)
