"""Chapter 03's forced SGLang retraction: the two-wave plan against SGLang's admission rule, its log, and live."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servelab.measure.paging import retraction as rt


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
        assert _admitted(plan, lag, plan.ratio) and plan.late_admitted(lag, plan.ratio)
        assert not _admitted(plan, lag, 1.0)  # counted in full, the early answers leave it no room
        assert not plan.late_admitted(lag, 1.0)
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


def test_late_admitted_is_sglangs_rule_at_its_edge() -> None:
    plan = rt.plan(4096, 27, 0.1)
    k = plan.first_requests
    free = plan.capacity - (k * plan.first_prompt - (k - 1) * plan.shared)  # lag 0, remaining answers x ratio
    need = plan.second_prompt - plan.shared + plan.second_answer + 1
    edge = (free - need) / (k * plan.first_answer)  # the ratio at which it no longer fits
    assert plan.late_admitted(0, edge - 1e-6) and not plan.late_admitted(0, edge + 1e-6)


@pytest.mark.parametrize("is_cpu", [True, False])
def test_profile_sizes_make_a_plan_on_that_profiles_pool(is_cpu: bool) -> None:
    sizes = rt.sizes(is_cpu)
    capacity = 4096 if is_cpu else 16384  # two full-length sequences of the cpu and the smallest GPU profile
    plan = rt.plan(capacity, 40, 0.1, **sizes)
    assert plan.lag == sizes["lag"] and plan.first_answer == sizes["answer"]
    assert rt.sizes(False)["lag"] > rt.sizes(True)["lag"]  # a GPU decodes far more steps while a prompt is sent


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


def test_readmissions_are_the_prefill_batches_after_each_warning(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    warning = ("[t] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 296, "
               "#new_token_ratio: 0.0677 -> 0.8927\n")
    prefill = "[t] Prefill batch, #new-seq: {}, #new-token: {}, #cached-token: {}, token usage: 0.08\n"
    log.write_text(prefill.format(5, 3025, 135) + warning + "[t] Decode batch, #running-req: 6\n"
                   + prefill.format(1, 296, 27) + prefill.format(1, 9, 300) + warning + prefill.format(2, 40, 54))
    assert rt.readmissions(log).to_dict("records") == [
        {"seqs": 1, "new_tokens": 296, "cached_tokens": 27}, {"seqs": 2, "new_tokens": 40, "cached_tokens": 54}]
    assert rt.readmissions(log, skip=1).to_dict("records") == [{"seqs": 2, "new_tokens": 40, "cached_tokens": 54}]
    assert rt.readmissions(tmp_path / "missing.log").empty


def test_held_by_prompts_stores_common_beginnings_once() -> None:
    assert rt.held_by_prompts([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 9]]) == 6  # 1 2 | 3 4, 5, 9
    assert rt.held_by_prompts([[7, 8], [9]]) == 3


def test_early_tokens_counts_what_the_early_requests_had_before_the_late_ones_first() -> None:
    import pandas as pd

    from servelab.measure.paging.pressure import PressureRun

    requests = pd.DataFrame({"req": [0, 1, 2], "first_token_s": [0.1, 0.2, 1.05]})
    tokens = pd.DataFrame({"req": [0] * 5 + [1] * 4 + [2] * 2, "t_s": [0.1, 0.3, 0.5, 0.7, 1.1,
                                                                       0.2, 0.4, 0.9, 1.2, 1.05, 1.3]})
    plan = rt.plan(4096, 27, 0.1, requests=2)
    forced = rt.ForcedRetraction(plan, PressureRun("sglang", requests, tokens, pd.DataFrame()),
                                 pd.DataFrame(), pd.DataFrame(), 0)
    assert forced.late == 2 and forced.early_tokens == 4  # request 0 had 4 tokens, request 1 had 3


def test_ratio_after_follows_sglangs_estimate_from_the_streams() -> None:
    import pandas as pd

    from servelab.measure.paging.pressure import PressureRun

    # the reviewed cpu run: 6 early requests of 48 tokens had 23 each when the late one paused
    early = [{"req": r, "t_s": 0.1 * i} for r in range(6) for i in range(1, 24)] + \
            [{"req": r, "t_s": 5.0 + 0.1 * i} for r in range(6) for i in range(25)]
    late = [{"req": 6, "t_s": 0.1 * i + 0.01} for i in range(3, 24)] + [{"req": 6, "t_s": 9.0}]
    requests = pd.DataFrame({"req": range(7), "max_tokens": [48] * 6 + [31], "first_token_s": [0.1] * 6 + [0.21]})
    events = pd.DataFrame([{"retracted": 1, "tokens_gained": 296, "ratio_before": 0.0677, "ratio_after": 0.8927}])
    forced = rt.ForcedRetraction(rt.plan(4096, 27, 0.1), PressureRun("sglang", requests, pd.DataFrame(early + late),
                                                                     pd.DataFrame()), events, pd.DataFrame(), 0)
    low, high = forced.ratio_after_range()
    assert low < 0.8927 < high and math.isclose(forced.ratio_after_range(0)[0], (6 * 23 + 120) / 289)
    two = rt.ForcedRetraction(forced.plan, forced.run, events.assign(retracted=2), pd.DataFrame(), 0)
    assert all(math.isnan(x) for x in two.ratio_after_range())  # another retraction than the late request's alone


@pytest.mark.server
def test_sglang_retracts_under_the_plan_and_still_finishes_every_answer() -> None:
    from servelab.engines.server import running
    from servelab.machine import profiles
    from servelab.measure.paging.pressure import pauses

    with running("sglang", profiles.load("cpu"), kv_cache_tokens=4096, schedule_conservativeness=0.1) as sg:
        forced = rt.force(sg, 0.1, **rt.sizes(True))
    reqs = forced.run.requests
    assert forced.early_tokens <= forced.plan.lag and len(forced.readmitted) == len(forced.events)
    assert forced.counted >= 1 and forced.logged == forced.counted
    assert (reqs.completion_tokens == reqs.max_tokens).all()
    assert list(reqs.prompt_tokens) == forced.plan.prompt_tokens  # the prompts are as long as planned
    found = pauses(forced.run.tokens)
    assert 1 <= len(found) <= forced.counted and set(found.req) == {forced.late}  # the late request, fewest tokens
