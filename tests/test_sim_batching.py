"""Static against continuous batching on hand-checked timelines (every step costs one second), and the
summary a reader compares them by."""

from __future__ import annotations

import pytest

from servelab.sim.batching import Request, continuous, poisson_arrivals, static, summarize
from servelab.sim.chunked_prefill.cost import CostModel

ONE_SECOND = CostModel(step_s=1.0, prefill_token_s=0.0, decode_s=0.0, context_token_s=0.0)
REQUESTS = [Request("a", 0.0, 8, 4), Request("b", 0.0, 8, 1), Request("c", 0.5, 8, 2)]


def _times(served):
    return {s.request.name: (s.admitted_s, s.first_token_s, s.finished_s) for s in served}


def test_static_batching_runs_each_batch_to_its_longest_request():
    # a and b prefill together (ends at 1, b is done), a decodes alone until 4 while b's slot idles;
    # c arrived at 0.5 but waits for the whole batch
    assert _times(static(REQUESTS, ONE_SECOND, max_batch=2)) == {"a": (0.0, 1.0, 4.0), "b": (0.0, 1.0, 1.0),
                                                                 "c": (4.0, 5.0, 6.0)}


def test_continuous_batching_lets_a_request_join_at_the_next_step():
    # b leaves after step 1, c joins at once: its prefill shares step 2 with a's decode
    assert _times(continuous(REQUESTS, ONE_SECOND, max_batch=2)) == {"a": (0.0, 1.0, 4.0), "b": (0.0, 1.0, 1.0),
                                                                     "c": (1.0, 2.0, 3.0)}


def test_the_batch_limit_and_the_prefill_budget_hold_requests_back():
    three = [Request(n, 0.0, 8, 2) for n in "xyz"]
    assert _times(continuous(three, ONE_SECOND, max_batch=2))["z"] == (2.0, 3.0, 4.0)  # a free slot at 2
    budget = _times(continuous(three, ONE_SECOND, max_batch=3, max_prefill_tokens=10))
    assert [budget[n][0] for n in "xyz"] == [0.0, 1.0, 2.0]  # one 8-token prompt per step fits 10 tokens
    assert _times(continuous([Request("big", 0.0, 50, 1)], ONE_SECOND, max_batch=1,
                             max_prefill_tokens=10)) == {"big": (0.0, 1.0, 1.0)}  # too large: the only newcomer


def test_a_step_costs_what_the_cost_model_says_for_its_work():
    cost = CostModel(step_s=0.01, prefill_token_s=0.001, decode_s=0.002, context_token_s=0.0001)
    got = _times(continuous([Request("a", 0.0, 100, 2), Request("b", 0.0, 50, 1)], cost, max_batch=2))
    prefill = 0.01 + 0.001 * 150
    assert got["a"] == pytest.approx((0.0, prefill, prefill + 0.01 + 0.002 + 0.0001 * 101))
    assert got["b"][2] == pytest.approx(prefill)


def test_summary_counts_throughput_and_goodput_over_the_run():
    slow, fast = static(REQUESTS, ONE_SECOND, max_batch=2), continuous(REQUESTS, ONE_SECOND, max_batch=2)
    s, c = (summarize(x, ttft_slo_s=2.0, tpot_slo_s=1.0) for x in (slow, fast))
    assert s["output_tokens_per_s"] == pytest.approx(7 / 6) and c["output_tokens_per_s"] == pytest.approx(7 / 4)
    assert s["met_slo"] == pytest.approx(2 / 3) and c["met_slo"] == 1.0  # c's TTFT: 4.5 s static, 1.5 s continuous
    assert c["goodput_requests_per_s"] == pytest.approx(3 / 4) and s["ttft_p50_s"] == 1.0
    tpot = {x.request.name: x.tpot_s for x in fast}
    assert tpot == {"a": 1.0, "b": 0.0, "c": 1.0}
    with pytest.raises(ValueError, match="latency objectives must be > 0 s, got 0 and 1"):
        summarize(fast, ttft_slo_s=0, tpot_slo_s=1)


def test_poisson_arrivals_are_seeded_increasing_and_within_the_lengths_asked():
    first = poisson_arrivals(4.0, 200, prompt_tokens=16, output_tokens=(2, 9), seed=3)
    assert first == poisson_arrivals(4.0, 200, prompt_tokens=16, output_tokens=(2, 9), seed=3)
    times = [r.arrival_s for r in first]
    assert times == sorted(times) and 200 / times[-1] == pytest.approx(4.0, rel=0.25)
    assert {r.output_tokens for r in first} <= set(range(2, 10)) and len({r.output_tokens for r in first}) > 4


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Request("x", 0.0, 0, 1), "prompt_tokens must be an integer >= 1, got 0"),
    (lambda: Request("x", -1.0, 1, 1), "arrival_s must be >= 0 s, got -1.0"),
    (lambda: static([], ONE_SECOND, max_batch=1), "nothing to schedule"),
    (lambda: continuous(REQUESTS, ONE_SECOND, max_batch=0), "max_batch must be an integer >= 1, got 0"),
    (lambda: static([REQUESTS[0], REQUESTS[0]], ONE_SECOND, max_batch=1), "names must be distinct"),
    (lambda: poisson_arrivals(0.0, 3, prompt_tokens=1, output_tokens=(1, 2)), "need rate > 0"),
])
def test_bad_input_is_refused_with_the_value_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()
