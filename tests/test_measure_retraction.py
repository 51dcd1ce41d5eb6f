"""Chapter 02's forced SGLang retraction: the two-wave plan against SGLang's admission rule, its log, and live."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servelab.measure import retraction as rt


def _admitted(plan: rt.RetractionPlan, lag: int, ratio: float) -> bool:
    """SGLang's rule (PrefillAdder.add_one_req): the late request's new prompt tokens and its whole answer
    must fit, strictly, beside what the early ones hold after `lag` tokens and their remaining answers x ratio."""
    k = plan.first_requests
    held = k * plan.first_prompt - (k - 1) * plan.shared + k * lag
    remaining = k * (plan.first_answer - lag) * ratio
    return (plan.second_prompt - plan.shared) + plan.second_answer + 1 < plan.capacity - held - remaining


@pytest.mark.parametrize("capacity, shared", [(4096, 27), (16384, 40), (32768, 0)])
def test_the_late_request_is_admitted_only_because_answers_count_at_the_ratio(capacity: int, shared: int) -> None:
    plan = rt.plan(capacity, shared, 0.1)
    k = plan.first_requests
    assert k * (plan.first_prompt + plan.first_answer) <= capacity - plan.margin  # the first wave fits whole
    for lag in range(plan.lag + 1):
        assert _admitted(plan, lag, plan.ratio)
        assert not _admitted(plan, lag, 1.0)  # counted in full, the early answers leave it no room
        free = plan.free_after_second(lag)
        assert free < k * (plan.first_answer - lag) + plan.second_answer  # they need more than is free ...
        steps = plan.steps_to_retraction(lag)
        assert (k + 1) * steps > free and steps < min(plan.second_answer, plan.first_answer - lag)  # ... while all run


def test_plan_numbers_follow_sglang_defaults_and_lengths_are_consistent() -> None:
    plan = rt.plan(4096, 27, 0.1, answer=48, lag=16)
    assert math.isclose(plan.ratio, 0.07) and rt.new_token_ratio(2.0) == 1.0  # 0.7 x conservativeness, capped
    assert plan.prompt_tokens == [plan.first_prompt] * 6 + [plan.second_prompt]
    assert plan.answer_tokens == [48] * 6 + [plan.second_answer] and plan.waves == [0] * 6 + [1]
    assert plan.reserved_at_ratio == math.ceil(0.07 * 6 * 48) == 21


def test_plans_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="answers of 20 tokens end before"):
        rt.plan(4096, 27, 0.1, answer=20, lag=16)
    with pytest.raises(ValueError, match="no longer than the 700 shared"):
        rt.plan(4096, 700, 0.1)
    with pytest.raises(ValueError, match="conservativeness must be > 0"):
        rt.plan(4096, 27, 0.0)


def test_common_prefix() -> None:
    assert rt.common_prefix([1, 2, 3, 4], [1, 2, 5]) == 2
    assert rt.common_prefix([1, 2], [1, 2, 3]) == 2 and rt.common_prefix([], [1]) == 0


def test_retraction_events_are_read_from_sglangs_warnings_only(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_text(
        "[t] Decode batch, #running-req: 6, #token: 3765\n"
        "[t] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 338, "
        "#new_token_ratio: 0.0668 -> 0.8104\n"
        "[t] Testing retraction. #retracted_reqs: 2, #new_tokens_gained: 40\n"  # SGLANG_TEST_RETRACT, not pressure
        "[t] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 90, "
        "#new_token_ratio: 0.8104 -> 1.0000\n")
    events = rt.retraction_events(log)
    assert events.to_dict("records") == [
        {"retracted": 1, "tokens_gained": 338, "ratio_before": 0.0668, "ratio_after": 0.8104},
        {"retracted": 2, "tokens_gained": 90, "ratio_before": 0.8104, "ratio_after": 1.0}]
    assert rt.retraction_events(tmp_path / "missing.log").empty


@pytest.mark.server
def test_sglang_retracts_under_the_plan_and_still_finishes_every_answer() -> None:
    from servelab.engines.server import running
    from servelab.machine import profiles
    from servelab.measure.kv_pressure import pauses

    with running("sglang", profiles.load("cpu"), kv_cache_tokens=4096, schedule_conservativeness=0.1) as sg:
        forced = rt.force(sg, 0.1)
    reqs = forced.run.requests
    assert forced.counted >= 1 and forced.logged == forced.counted
    assert (reqs.completion_tokens == reqs.max_tokens).all()
    assert list(reqs.prompt_tokens) == forced.plan.prompt_tokens  # the prompts are as long as planned
    found = pauses(forced.run.tokens)
    assert len(found) <= forced.counted and set(found.req) <= {len(reqs) - 1}  # the late request, fewest tokens
