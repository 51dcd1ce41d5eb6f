import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.sim.chunked_prefill import (
    LONG,
    CostModel,
    Request,
    Scenario,
    SchedulerConfig,
    StepSample,
    fit_cost_model,
    plan_sglang,
    plan_vllm,
    run_scenario,
    simulate,
    stream_name,
    tradeoff,
)
from servelab.sim.chunked_prefill.policies import Queues, ReqState

COST = CostModel(step_s=0.01, prefill_token_s=0.0005, decode_s=0.001, context_token_s=1e-6)
FAST = settings(max_examples=60, deadline=None)


@st.composite
def configs(draw):
    engine = draw(st.sampled_from(["vllm", "sglang"]))
    chunking = draw(st.booleans())
    return SchedulerConfig(
        engine=engine, budget=draw(st.one_of(st.none(), st.integers(1, 300))), chunking=chunking,
        long_prefill_token_threshold=draw(st.integers(0, 100)) if engine == "vllm" and chunking else 0,
        mixed_chunk=draw(st.booleans()) if engine == "sglang" else False,
        max_running=draw(st.one_of(st.none(), st.integers(1, 6))))


requests_strategy = st.lists(
    st.tuples(st.integers(1, 400), st.integers(1, 12), st.floats(0, 0.5)), min_size=1, max_size=6,
).map(lambda rows: [Request(f"r{i}", p, o, a) for i, (p, o, a) in enumerate(rows)])


def _run(requests, cfg):
    """The simulation, or None where vLLM without chunking can never fit a prompt in its budget."""
    vllm_unchunked = cfg.engine == "vllm" and not cfg.chunking and cfg.budget is not None
    if vllm_unchunked and max(r.prompt_tokens for r in requests) > cfg.budget:
        with pytest.raises(ValueError, match="can never be scheduled"):
            simulate(requests, cfg, COST)
        return None
    return simulate(requests, cfg, COST)


@FAST
@given(requests_strategy, configs())
def test_every_prompt_token_is_prefilled_once_and_every_output_token_arrives(requests, cfg):
    result = _run(requests, cfg)
    if result is None:
        return
    prefilled = result.steps[result.steps.kind == "prefill"].groupby("request")["tokens"].sum()
    for r in requests:
        assert prefilled[r.name] == r.prompt_tokens
        times = result.token_times[r.name]
        assert len(times) == r.output_tokens
        assert (np.diff(times) > 0).all() and times[0] > r.arrival_s
    decodes = result.steps[result.steps.kind == "decode"].groupby("request").size()
    assert all(decodes.get(r.name, 0) == r.output_tokens - 1 for r in requests)


@FAST
@given(requests_strategy, configs())
def test_no_step_exceeds_its_budget(requests, cfg):
    result = _run(requests, cfg)
    if result is None or cfg.budget is None:
        return
    steps = result.steps
    if cfg.engine == "vllm":  # one budget for every token of the step
        assert steps.groupby("step")["tokens"].sum().max() <= cfg.budget
    elif cfg.chunking:  # SGLang: the chunk size bounds a prefill batch (and the decodes mixed into it)
        prefill_steps = steps[steps.kind == "prefill"]["step"].unique()
        in_prefill = steps[steps.step.isin(prefill_steps)]
        assert (in_prefill.groupby("step")["tokens"].sum() <= cfg.budget).all()


@FAST
@given(requests_strategy, st.sampled_from(["vllm", "sglang"]), st.integers(1, 300))
def test_without_chunking_every_prompt_is_prefilled_in_one_step(requests, engine, budget):
    cfg = SchedulerConfig(engine=engine, budget=budget, chunking=False)
    result = _run(requests, cfg)
    if result is None:
        return
    per_request = result.steps[result.steps.kind == "prefill"].groupby("request")["step"].nunique()
    assert (per_request == 1).all()


scenarios = st.builds(Scenario, streams=st.integers(1, 6), stream_prompt_tokens=st.integers(1, 64),
                      stream_output_tokens=st.just(400), long_prompt_tokens=st.integers(50, 1500),
                      warmup_tokens=st.integers(1, 5))


@FAST
@given(scenarios, st.integers(0, 200), st.sampled_from([("vllm", False), ("sglang", True)]))
def test_streams_are_never_starved_when_the_budget_covers_them(scenario, extra, engine_mixed):
    engine, mixed = engine_mixed
    cfg = SchedulerConfig(engine=engine, budget=scenario.streams + 1 + extra, mixed_chunk=mixed)
    result = run_scenario(scenario, cfg, COST)
    for i in range(scenario.streams):
        steps = result.steps[result.steps.request == stream_name(i)]["step"].to_numpy()
        assert (np.diff(steps) == 1).all(), "a decoding stream missed a step"


@FAST
@given(scenarios, st.integers(0, 200), st.sampled_from([("vllm", False), ("sglang", False), ("sglang", True)]))
def test_the_long_prompt_arrives_after_every_stream_got_its_warmup_tokens(scenario, extra, engine_mixed):
    engine, mixed = engine_mixed
    cfg = SchedulerConfig(engine=engine, budget=scenario.streams + 1 + extra, mixed_chunk=mixed)
    result = run_scenario(scenario, cfg, COST)
    arrival = result.request(LONG).arrival_s
    for i in range(scenario.streams):
        assert result.token_times[stream_name(i)][scenario.warmup_tokens - 1] <= arrival
    # so no stream's prompt is still being computed once the long prompt is there
    late = result.steps[(result.steps.start_s >= arrival) & (result.steps.request != LONG)]
    assert (late.kind == "decode").all()


def test_sglang_prefill_decode_interval_lets_the_streams_decode_between_chunks():
    scenario = Scenario(streams=3, stream_prompt_tokens=16, stream_output_tokens=200, long_prompt_tokens=1000)
    result = run_scenario(scenario, SchedulerConfig(engine="sglang", budget=100, prefill_decode_interval=2), COST)
    chunks = sorted(result.steps[(result.steps.request == LONG) & (result.steps.kind == "prefill")]["step"])
    assert len(chunks) == 10 and (np.diff(chunks) == 3).all()  # two decode steps after every chunk
    between = result.steps[result.steps.step.isin([c + 1 for c in chunks[:-1]])]
    assert set(between.request) == {stream_name(i) for i in range(3)} and (between.kind == "decode").all()
    with pytest.raises(ValueError, match="prefill_decode_interval"):
        SchedulerConfig(engine="vllm", prefill_decode_interval=1)


def test_sglang_without_mixed_chunk_stalls_the_streams_for_the_whole_prefill():
    scenario = Scenario(streams=3, stream_prompt_tokens=16, stream_output_tokens=200, long_prompt_tokens=1000)
    plain = run_scenario(scenario, SchedulerConfig(engine="sglang", budget=100), COST)
    long_steps = plain.steps[(plain.steps.request == LONG) & (plain.steps.kind == "prefill")]["step"]
    assert long_steps.nunique() == 10
    assert set(plain.steps[plain.steps.step.isin(long_steps)]["request"]) == {LONG}
    mixed = run_scenario(scenario, SchedulerConfig(engine="sglang", budget=100, mixed_chunk=True), COST)
    chunks = mixed.steps[(mixed.steps.request == LONG) & (mixed.steps.kind == "prefill")]
    assert (chunks["tokens"].iloc[:-1] == 100 - 3).all()  # the decodes' rows come off the chunk
    assert (mixed.steps[mixed.steps.step.isin(chunks.step)].groupby("step").size() == 4).all()


@FAST
@given(scenarios, st.sampled_from(["vllm", "sglang"]))
def test_with_an_unlimited_budget_the_long_prompt_takes_one_step(scenario, engine):
    cost = CostModel(0.01, 0.0005, 0.001, 1e-6)  # request_s = 0: the long prompt arrives at a step boundary
    result = run_scenario(scenario, SchedulerConfig(engine=engine, budget=None), cost)
    long_rows = result.steps[result.steps.request == LONG]
    first = long_rows.iloc[0]
    assert first.kind == "prefill" and first.tokens == scenario.long_prompt_tokens
    assert first.start_s == result.request(LONG).arrival_s
    assert result.ttft(LONG) == pytest.approx(first.end_s - first.start_s)


@FAST
@given(scenarios, st.floats(0, 2e-6))
def test_itl_during_the_long_prefill_grows_with_the_budget_and_ttft_shrinks(scenario, context_cost):
    cost = CostModel(0.01, 0.0005, 0.001, context_cost)
    # budgets that prefill the streams in one step, so the long prompt meets the same streams every time
    budgets = [scenario.streams * scenario.stream_prompt_tokens + b for b in (64, 256, 1024)]
    curve = tradeoff(scenario, budgets, cost)
    stall = curve["longest_stall_s"].to_numpy()
    assert (np.diff(curve["long_ttft_s"].to_numpy()) <= 1e-12).all()
    if context_cost == 0:  # with a context cost, smaller chunks run later, over longer contexts
        assert (np.diff(stall) >= -1e-12).all()
    if scenario.long_prompt_tokens > 1024:
        assert curve["itl_p90_s"].iloc[-1] > curve["itl_p90_s"].iloc[0]


def test_vllm_serves_running_requests_first_then_waiting_in_order():
    stream = ReqState("s", 10, 50, 0.0, computed=10, emitted=3)
    q = Queues(running=[stream], waiting=[ReqState("a", 30, 1, 0.0), ReqState("b", 30, 1, 0.0)])
    plan = plan_vllm(q, SchedulerConfig(budget=40))
    assert [(r.name, n) for r, n in plan] == [("s", 1), ("a", 30), ("b", 9)]
    assert [r.name for r in q.running] == ["s", "a", "b"] and q.waiting == []


def test_vllm_without_chunking_stops_admission_at_a_prompt_that_does_not_fit():
    q = Queues(waiting=[ReqState("a", 30, 1, 0.0), ReqState("b", 20, 1, 0.0), ReqState("c", 5, 1, 0.0)])
    plan = plan_vllm(q, SchedulerConfig(budget=40, chunking=False))
    assert [(r.name, n) for r, n in plan] == [("a", 30)]  # b waits although c would fit: FCFS, break
    assert [r.name for r in q.waiting] == ["b", "c"]


def test_vllm_long_prefill_threshold_caps_chunks_only_when_others_are_queued():
    scenario = Scenario(streams=2, stream_prompt_tokens=8, stream_output_tokens=100, long_prompt_tokens=1000)
    result = run_scenario(scenario, SchedulerConfig(budget=2048, long_prefill_token_threshold=256), COST)
    chunks = result.steps[(result.steps.request == LONG) & (result.steps.kind == "prefill")]["tokens"]
    assert chunks.tolist() == [256, 256, 256, 232]
    alone = simulate([Request(LONG, 1000, 1)], SchedulerConfig(budget=2048, long_prefill_token_threshold=256), COST)
    assert alone.steps["tokens"].tolist() == [1000]


def test_sglang_continues_the_chunked_request_before_new_ones():
    q = Queues(waiting=[ReqState("a", 30, 1, 0.0), ReqState("b", 5, 1, 0.0)])
    first = plan_sglang(q, SchedulerConfig(engine="sglang", budget=20))
    assert [(r.name, n) for r, n in first] == [("a", 20)] and q.chunked is first[0][0]
    first[0][0].computed += 20  # what the step loop does with the plan
    second = plan_sglang(q, SchedulerConfig(engine="sglang", budget=20))
    assert [(r.name, n) for r, n in second] == [("a", 10), ("b", 5)] and q.chunked is None


def test_idle_clock_jumps_to_the_next_arrival_and_request_overhead_delays_admission():
    cost = CostModel(0.01, 0.001, 0.0, 0.0, request_s=0.5)
    result = simulate([Request("late", 10, 2, arrival_s=3.0)], SchedulerConfig(), cost)
    assert result.steps["start_s"].iloc[0] == pytest.approx(3.5)
    assert result.ttft("late") == pytest.approx(0.5 + 0.01 + 0.01)
    assert result.summary().loc[0, "steps"] == 2


def test_a_prompt_vllm_can_never_fit_is_one_clear_error():
    with pytest.raises(ValueError, match="'big'.*budget=100, chunking=False"):
        simulate([Request("big", 500, 1)], SchedulerConfig(budget=100, chunking=False), COST)


@pytest.mark.parametrize("kwargs, match", [
    ({"engine": "trt"}, "unknown engine 'trt'"), ({"budget": 0}, "budget must be"),
    ({"engine": "sglang", "long_prefill_token_threshold": 8}, "vLLM option"),
    ({"mixed_chunk": True}, "enable-mixed-chunk")])
def test_bad_config_is_one_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SchedulerConfig(**kwargs)


def test_streams_that_end_before_the_window_closes_are_an_error():
    scenario = Scenario(streams=4, stream_prompt_tokens=8, stream_output_tokens=10, long_prompt_tokens=2000)
    with pytest.raises(ValueError, match="raise stream_output_tokens"):
        tradeoff(scenario, [16], COST)


def _synthetic_samples(truth: CostModel, noise: float, seed: int = 0) -> list[StepSample]:
    rng = np.random.default_rng(seed)
    rows = [StepSample(0, prefill_tokens=p, requests=1) for p in (32, 128, 256, 512, 1024, 2048) for _ in range(3)]
    rows += [StepSample(0, decodes=b, decode_context_tokens=b * c) for b in (1, 2, 4, 8, 16) for c in (64, 512, 1536)]
    frame = pd.DataFrame([vars(s) for s in rows])
    exact = truth.predict(frame)
    return [StepSample(**{**vars(s), "seconds": float(t * (1 + noise * rng.standard_normal()))})
            for s, t in zip(rows, exact, strict=True)]


def test_fit_recovers_known_coefficients_from_noisy_samples():
    truth = CostModel(step_s=0.02, prefill_token_s=4e-4, decode_s=2e-3, context_token_s=3e-6, request_s=0.05)
    exact = fit_cost_model(_synthetic_samples(truth, 0.0))
    assert np.allclose(exact.coefficients(), truth.coefficients(), rtol=1e-6)
    assert exact.fit.max_abs_rel_error < 1e-9
    noisy = fit_cost_model(_synthetic_samples(truth, 0.02))
    assert np.allclose(noisy.coefficients(), truth.coefficients(), rtol=0.15)
    assert 0.005 < noisy.fit.mean_abs_rel_error < 0.04 and noisy.fit.samples == 33


def test_fit_without_decode_samples_names_what_is_missing():
    with pytest.raises(ValueError, match="decodes, decode_context_tokens"):
        fit_cost_model([StepSample(0.1, prefill_tokens=p) for p in (10, 20, 30)])


def test_fit_clamps_a_negative_cost_at_zero():
    truth = CostModel(0.02, 4e-4, 2e-3, 0.0)
    samples = _synthetic_samples(truth, 0.0)
    tilted = [StepSample(**{**vars(s), "seconds": s.seconds * (1 - 1e-5 * s.decode_context_tokens / max(1, s.decodes))})
              for s in samples]
    model = fit_cost_model(tilted)
    assert model.context_token_s == 0 and "decode_context_tokens" in model.fit.clamped
