import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from servelab.measure.chunked_prefill import live
from servelab.measure.chunked_prefill.streams import (
    CHUNK_COLUMNS,
    VOCAB_RANGE,
    StreamRun,
    StreamSpec,
    budget_options,
    calibrate,
    decode_sample,
    prefill_samples,
    prompt_ids,
    scenario_specs,
    stream_tokens,
    token_times,
    window_stats,
)
from servelab.sim.chunked_prefill import LONG, CostModel, Scenario, fit_cost_model, run_scenario
from servelab.sim.chunked_prefill import window_stats as sim_window_stats


def _run(streams: dict[str, list[float]], sent: dict[str, float], prompts: dict[str, int]) -> StreamRun:
    """A run with one chunk per token and the running token count reported on every chunk."""
    chunks = [(n, t, i + 1, "x") for n, times in streams.items() for i, t in enumerate(times)]
    requests = pd.DataFrame([{"request": n, "sent_s": sent[n], "prompt_tokens": prompts[n],
                              "completion_tokens": len(streams[n])} for n in streams])
    return StreamRun(requests, pd.DataFrame(chunks, columns=CHUNK_COLUMNS))


def test_token_times_count_tokens_by_the_running_count_else_by_text():
    chunks = pd.DataFrame([
        ("a", 0.3, 2, "lo"), ("a", 0.1, 1, "hel"), ("a", 0.4, 2, ""),  # last: finish chunk, no new token
        ("b", 0.2, np.nan, ""), ("b", 0.5, np.nan, "hi"), ("b", 0.6, np.nan, "!"),
    ], columns=CHUNK_COLUMNS)
    times = token_times(chunks)
    assert times["a"].tolist() == [0.1, 0.3]
    assert times["b"].tolist() == [0.5, 0.6]


def test_window_stats_measure_ttft_from_the_send_and_the_streams_gaps_in_between():
    # two streams at 10 ms a token, stalled by a 200 ms prefill from 0.505 s; the long prompt sent at 0.5 s
    steady = list(np.round(np.arange(0.01, 0.51, 0.01), 3))
    after = list(np.round(0.705 + np.arange(0, 0.2, 0.01), 3))
    streams = {"stream 0": steady + after, "stream 1": steady + after, LONG: [0.705, 0.715]}
    run = _run(streams, {"stream 0": 0, "stream 1": 0, LONG: 0.5}, {"stream 0": 8, "stream 1": 8, LONG: 900})
    stats = window_stats(run)
    assert stats["long_ttft_s"] == pytest.approx(0.205)
    assert stats["longest_stall_s"] == pytest.approx(0.205)  # 0.50 -> 0.705, overlapping the window
    assert stats["gaps"] == 2 and stats["itl_p50_s"] == pytest.approx(0.205)


def test_window_stats_name_a_missing_long_prompt():
    run = _run({"stream 0": [0.1, 0.2]}, {"stream 0": 0}, {"stream 0": 4})
    with pytest.raises(ValueError, match="no token of request 'long'"):
        window_stats(run)


def test_calibration_samples_from_synthetic_timings_fit_the_model_that_made_them():
    step, per_token, per_decode, per_context, overhead = 0.02, 4e-4, 2e-3, 3e-6, 0.05
    samples = []
    for i, length in enumerate((64, 256, 1024)):
        first = 1.0 + overhead + step + per_token * length
        run = _run({"p": [first]}, {"p": 1.0}, {"p": length})
        samples += prefill_samples(run)
        assert samples[-1].prefill_tokens == length and samples[-1].requests == 1 and i + 1 == len(samples)
    for batch in (1, 4, 8):
        for context in (64, 512):
            # 22 tokens each, slightly staggered: 11 generated before the middle of the window
            gap = step + per_decode * batch + per_context * batch * (context + 11)
            streams = {f"d{k}": list(0.5 + 0.0001 * k + gap * np.arange(22)) for k in range(batch)}
            sample = decode_sample(_run(streams, dict.fromkeys(streams, 0.0), dict.fromkeys(streams, context)))
            assert sample.decodes == batch and sample.seconds == pytest.approx(gap)
            assert sample.decode_context_tokens == batch * (context + 11)
            samples.append(sample)
    model = fit_cost_model(samples)
    assert np.allclose(model.coefficients(), [step, per_token, per_decode, per_context, overhead], rtol=1e-6)


def test_a_prompt_longer_than_the_budget_is_several_prefill_steps():
    run = _run({"p": [1.0], "q": [2.0]}, {"p": 0.0, "q": 1.5}, {"p": 1000, "q": 512})
    assert [s.steps for s in prefill_samples(run, budget=512)] == [2, 1]
    assert [s.steps for s in prefill_samples(run)] == [1, 1]
    with pytest.raises(ValueError, match="budget must be >= 1"):
        prefill_samples(run, budget=0)


def test_decode_sample_needs_overlapping_streams():
    run = _run({"a": [0.1, 0.2], "b": [0.3, 0.4]}, {"a": 0, "b": 0}, {"a": 4, "b": 4})
    with pytest.raises(ValueError, match="while all streams decode"):
        decode_sample(run)


def test_prompt_ids_are_exact_seeded_and_ordinary():
    ids = prompt_ids(300, seed=3)
    assert len(ids) == 300 and ids == prompt_ids(300, seed=3) and ids != prompt_ids(300, seed=4)
    assert VOCAB_RANGE[0] <= min(ids) and max(ids) < VOCAB_RANGE[1]
    with pytest.raises(ValueError, match="at least one token"):
        prompt_ids(0, seed=0)


def test_scenario_specs_send_the_long_prompt_after_the_last_streams_warm_up():
    specs = scenario_specs(Scenario(streams=3, stream_prompt_tokens=16, stream_output_tokens=40,
                                    long_prompt_tokens=500, warmup_tokens=5))
    assert [s.name for s in specs] == ["stream 0", "stream 1", "stream 2", LONG]
    assert specs[-1].after == ("stream 2", 5) and len(specs[-1].prompt) == 500
    assert len({tuple(s.prompt[:8]) for s in specs}) == 4  # no shared prefix


def test_no_round_of_the_scenario_reuses_a_calibration_prompt(fake_server, monkeypatch):
    """A round's prompts (seed + 1 + round) and the calibration's come from disjoint seeds, for any round."""
    from servelab.measure.chunked_prefill import streams as chunked_prefill

    used = []
    monkeypatch.setattr(chunked_prefill, "prompt_ids",
                        lambda tokens, seed: used.append(seed) or prompt_ids(tokens, seed))
    calibrate(fake_server, prompt_lengths=[8, 16], batch_sizes=[2, 3], contexts=[8], budget=32,
              decode_tokens=DECODE_TOKENS, repeats=1, progress=False)
    scenario = Scenario(streams=3, stream_prompt_tokens=8, stream_output_tokens=4, long_prompt_tokens=8,
                        warmup_tokens=1)
    last = chunked_prefill.CALIBRATION_SEEDS // 1000 - 1
    calibration, used[:] = set(used), []
    for seed in (0, 5, 9, 901, last):  # round 4 of seed 0 was seed 5, once a calibration prompt's
        scenario_specs(scenario, seed)
    assert used and not calibration & set(used)
    with pytest.raises(ValueError, match=f"scenario seed must be in 0..{last}, got {last + 1}"):
        scenario_specs(scenario, last + 1)


@pytest.mark.parametrize("engine, budget, kwargs, expected", [
    ("vllm", 512, {}, {"max_num_batched_tokens": 512}),
    ("vllm", 2048, {"chunking": False}, {"max_num_batched_tokens": 2048, "no_enable_chunked_prefill": True}),
    ("vllm", 2048, {"long_prefill_token_threshold": 256},
     {"max_num_batched_tokens": 2048, "long_prefill_token_threshold": 256}),
    ("vllm", None, {}, {}),
    ("sglang", 512, {"mixed_chunk": True}, {"chunked_prefill_size": 512, "enable_mixed_chunk": True}),
    ("sglang", 512, {"chunking": False}, {"chunked_prefill_size": -1}),
])
def test_budget_options_become_each_engines_flags(engine, budget, kwargs, expected):
    assert budget_options(engine, budget, **kwargs) == expected


def test_budget_options_refuse_the_other_engines_flags():
    with pytest.raises(ValueError, match="enable-mixed-chunk"):
        budget_options("vllm", 512, mixed_chunk=True)
    with pytest.raises(ValueError, match="vLLM option"):
        budget_options("sglang", 512, long_prefill_token_threshold=64)
    with pytest.raises(ValueError, match="unknown engine 'trt'"):
        budget_options("trt", 512)


TOKEN_GAP_S = 0.02
# Tokens per stream in the fake calibrations: the streams of a batch must overlap by two tokens, and on a busy
# 2-core machine (./test.sh runs this beside the engine servers) a stream can start 100 ms after the others.
DECODE_TOKENS = 24


class _FakeCompletions(BaseHTTPRequestHandler):
    """Streams `max_tokens` one-token chunks, TOKEN_GAP_S apart, with continuous usage, as the engines do."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["stream"] and body["stream_options"]["continuous_usage_stats"]
        assert body["min_tokens"] == body["max_tokens"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(body["max_tokens"]):
            time.sleep(TOKEN_GAP_S)
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": i + 1,
                     "total_tokens": len(body["prompt"]) + i + 1}
            chunk = {"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "text": f"t{i}", "finish_reason": None}], "usage": usage}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FakeCompletions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield SimpleNamespace(api_url=f"http://127.0.0.1:{httpd.server_port}/v1", served_model="fake")
    httpd.shutdown()
    httpd.server_close()


def test_stream_tokens_records_every_chunk_and_starts_a_follower_after_its_leaders_kth_chunk(fake_server):
    run = stream_tokens(fake_server, [StreamSpec("lead", [11, 12, 13], 8),
                                      StreamSpec("follow", [14] * 5, 3, after=("lead", 4))])
    times = token_times(run.chunks)
    assert len(times["lead"]) == 8 and len(times["follow"]) == 3
    requests = run.requests.set_index("request")
    assert requests.loc["follow", "prompt_tokens"] == 5 and requests.loc["lead", "completion_tokens"] == 8
    assert times["lead"][3] <= requests.loc["follow", "sent_s"] < times["lead"][4]
    assert (np.diff(times["lead"]) > TOKEN_GAP_S / 2).all()


def test_stream_tokens_refuses_bad_specs_before_sending_anything():
    endpoint = SimpleNamespace(api_url="http://127.0.0.1:9/v1", served_model="none")
    with pytest.raises(ValueError, match="distinct names"):
        stream_tokens(endpoint, [StreamSpec("a", [1], 1), StreamSpec("a", [1], 1)])
    with pytest.raises(ValueError, match="after=\\('b', 2\\) must name another spec"):
        stream_tokens(endpoint, [StreamSpec("a", [1], 1, after=("b", 2))])


def test_calibrate_turns_live_timings_into_prefill_and_decode_samples(fake_server):
    samples = calibrate(fake_server, prompt_lengths=[40], batch_sizes=[2], contexts=[8], budget=32,
                        decode_tokens=DECODE_TOKENS, repeats=2, progress=False)
    assert samples["source"].tolist() == ["prefill", "prefill", "decode"]
    prefill, decode = samples.iloc[0], samples.iloc[2]
    assert prefill.prefill_tokens == 40 and prefill.steps == 2 and prefill.requests == 1
    assert decode.decodes == 2 and decode.seconds == pytest.approx(TOKEN_GAP_S, rel=0.5)
    assert 2 * 8 < decode.decode_context_tokens < 2 * (8 + DECODE_TOKENS)


# ---- chunked_prefill_live: configs, scenario sizing, prediction against measurement, the budget rule ----

COST = CostModel(step_s=0.03, prefill_token_s=0.002, decode_s=0.002, context_token_s=1e-6, request_s=0.01)


def test_live_configs_become_each_engines_flags_and_the_same_scheduler():
    thr = live.LiveConfig("vllm", 256, long_prefill_token_threshold=32)
    assert thr.options() == {"max_num_batched_tokens": 256, "long_prefill_token_threshold": 32}
    assert thr.scheduler().long_prefill_token_threshold == 32 and thr.scheduler().budget == 256
    mixed = live.LiveConfig("sglang", 32, mixed_chunk=True)
    assert mixed.options() == {"chunked_prefill_size": 32, "enable_mixed_chunk": True}
    assert mixed.scheduler().engine == "sglang" and mixed.scheduler().mixed_chunk
    assert len({thr.label, mixed.label, live.LiveConfig("vllm", 256).label, live.LiveConfig("sglang", 32).label}) == 4


def test_scenario_for_keeps_the_streams_decoding_through_the_slowest_prefill():
    sc = live.scenario_for(2048, 32, streams=4, stream_prompt_tokens=32, long_prompt_fraction=0.5)
    assert sc.long_prompt_tokens == 1024
    # at the smallest budget the simulator's window ends before any stream does (window_stats would raise)
    stats = sim_window_stats(run_scenario(sc, live.LiveConfig("vllm", 32).scheduler(), COST))
    assert stats["long_prefill_steps"] == -(-1024 // (32 - 4))
    with pytest.raises(ValueError, match="must exceed the streams"):
        live.scenario_for(2048, 4, streams=4, stream_prompt_tokens=32, long_prompt_fraction=0.5)
    with pytest.raises(ValueError, match="long_prompt_fraction"):
        live.scenario_for(2048, 32, streams=4, stream_prompt_tokens=32, long_prompt_fraction=1.5)


def test_predict_and_errors_compare_the_simulator_with_a_measurement_row_by_row():
    sc = live.scenario_for(1024, 32, streams=2, stream_prompt_tokens=16, long_prompt_fraction=0.25)
    configs = [live.LiveConfig("vllm", 32), live.LiveConfig("vllm", 128)]
    predicted = live.predict(configs, sc, {"vllm": COST})
    measured = predicted[["config", *live.METRICS]].copy()
    measured[list(live.METRICS)] *= 2.0  # a measurement twice as slow as predicted
    table = live.errors(measured, predicted)
    assert len(table) == len(configs) * len(live.METRICS)
    assert np.allclose(table.rel_error, -0.5)
    # the larger budget: longer gaps for the streams, shorter TTFT for the long prompt
    small, large = predicted.set_index("config").loc[[c.label for c in configs]].itertuples()
    assert large.itl_p90_s > small.itl_p90_s and large.long_ttft_s < small.long_ttft_s
    with pytest.raises(ValueError, match="no cost model for sglang"):
        live.predict([live.LiveConfig("sglang", 32)], sc, {"vllm": COST})


def test_budget_for_itl_is_the_largest_budget_whose_step_fits_the_target():
    context = 4 * 64
    target = COST.step_seconds(100, 4, context) + 1e-9
    budget = live.budget_for_itl(COST, target, decodes=4, decode_context_tokens=context)
    assert budget == 104
    assert COST.step_seconds(budget - 4, 4, context) <= target < COST.step_seconds(budget + 1 - 4, 4, context)
    with pytest.raises(ValueError, match="no room"):
        live.budget_for_itl(COST, COST.step_seconds(0, 4, context), decodes=4, decode_context_tokens=context)


@pytest.mark.engine_venv
def test_engine_defaults_come_from_both_engines_own_code(require_engine, cpu):
    require_engine("vllm")
    require_engine("sglang")
    defaults = live.engine_defaults(cpu)
    assert defaults["vllm"]["partial_prefill_fields"] == []
    assert defaults["vllm"]["EngineArgs.long_prefill_token_threshold"] == 0
    serve, llm = (defaults["vllm"]["default_max_num_batched_tokens"]["1"][k] for k in ("serve", "LLM class"))
    assert 0 < serve <= llm
    assert defaults["sglang"]["field default chunked_prefill_size"] is None
    assert defaults["sglang"]["resolved chunked_prefill_size"] > 0
    assert defaults["sglang"]["resolved enable_mixed_chunk"] is False


def test_late_vs_early_compares_the_streams_gaps_at_the_two_ends_of_the_window():
    # the long prompt is sent at 1.0 s and answers at 3.0 s; the streams' gaps grow from 0.1 s to 0.3 s meanwhile
    gaps = np.concatenate([np.full(10, 0.1), np.linspace(0.1, 0.3, 10), np.full(10, 0.3)])
    stream = np.cumsum(gaps)
    run = _run({"stream 0": list(stream), "stream 1": list(stream + 0.01), LONG: [3.0]},
               {"stream 0": 0.0, "stream 1": 0.0, LONG: 1.0}, {"stream 0": 8, "stream 1": 8, LONG: 100})
    chunks = run.chunks.merge(run.requests[["request", "sent_s"]], on="request")
    ttft = 2.0
    ratio = live.late_vs_early(chunks, ttft)
    t = stream - 1.0
    early = np.median(np.diff(stream)[(t[1:] > 0) & (t[1:] <= ttft / 4)])
    late = np.median(np.diff(stream)[(t[1:] > 3 * ttft / 4) & (t[1:] <= ttft)])
    assert ratio == pytest.approx(late / early, rel=0.05) and ratio > 1.5
    steady = _run({"stream 0": list(np.cumsum(np.full(30, 0.1))), LONG: [3.0]}, {"stream 0": 0.0, LONG: 1.0},
                  {"stream 0": 8, LONG: 100})
    rounds = live.LiveRuns(pd.DataFrame({"config": ["c", "c"], "round": [0, 1], "long_ttft_s": [ttft, ttft]}),
                           pd.concat([chunks.assign(config="c", round=0), steady.chunks.merge(
                               steady.requests[["request", "sent_s"]], on="request").assign(config="c", round=1)]),
                           pd.DataFrame())
    growth = live.growth_over_rounds(rounds, ["c"]).loc["c"]
    assert growth["lowest round"] == pytest.approx(1.0) and growth["highest round"] == pytest.approx(ratio)
    assert growth["late gap / early gap"] == pytest.approx((1.0 + ratio) / 2)
    stalled = _run({"stream 0": [0.5, 3.1], LONG: [3.0]}, {"stream 0": 0.0, LONG: 1.0}, {"stream 0": 8, LONG: 100})
    with pytest.raises(ValueError, match="stalled"):
        live.late_vs_early(stalled.chunks.merge(stalled.requests[["request", "sent_s"]], on="request"), ttft)


def test_server_info_reads_vllms_budget_from_its_log(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("(APIServer pid=1) INFO [scheduler.py:307] "
                   "Chunked prefill is enabled with max_num_batched_tokens=64.\n")
    assert live.server_info(SimpleNamespace(engine="vllm", log_path=log)) == {"max_num_batched_tokens": 64}
    log.write_text("(APIServer pid=1) INFO started\n")
    assert live.server_info(SimpleNamespace(engine="vllm", log_path=log)) == {"max_num_batched_tokens": None}


class _Running:
    """A stand-in server of an engine, on the fake completions endpoint, that records its starts."""

    def __init__(self, endpoint, engine, log_path, started):
        self.api_url, self.served_model = endpoint.api_url, endpoint.served_model
        self.engine, self.log_path, self.running, self.started = engine, log_path, False, started

    def start(self):
        self.running = True
        self.started.append(self)
        return self

    def stop(self):
        self.running = False


def test_measure_rounds_calibrates_warms_up_and_runs_every_config_once_per_round(fake_server, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("Chunked prefill is enabled with max_num_batched_tokens=32.\n")
    sc = Scenario(streams=2, stream_prompt_tokens=8, stream_output_tokens=6, long_prompt_tokens=40, warmup_tokens=2)
    calibration = {"prompt_lengths": [40], "batch_sizes": [2], "contexts": [8], "decode_tokens": 4, "repeats": 1}
    configs = [live.LiveConfig("vllm", 32, calibrate=True), live.LiveConfig("vllm", 64)]
    started = []
    servers = {c.label: _Running(fake_server, "vllm", log, started) for c in configs}
    runs = live.measure_rounds(configs, servers, sc, rounds=2, together=True, calibration=calibration)
    assert runs.stats[["round", "config"]].values.tolist() == [[0, "vllm budget 32"], [0, "vllm budget 64"],
                                                                [1, "vllm budget 64"], [1, "vllm budget 32"]]
    assert runs.stats["reported max_num_batched_tokens"].eq(32).all() and len(started) == 2
    assert set(runs.calibration.source) == {"prefill", "decode"} and set(runs.calibration.config) == {"vllm budget 32"}
    assert set(runs.chunks.request) == {"stream 0", "stream 1", LONG} and {"sent_s", "round"} <= set(runs.chunks)
    middle = live.medians(runs.stats)
    assert middle.config.tolist() == ["vllm budget 32", "vllm budget 64"] and middle.rounds.tolist() == [2, 2]
    ratio = live.round_ratios(runs.stats, "vllm budget 64", "vllm budget 32", "long_ttft_s")
    assert ratio.index.tolist() == [0, 1] and (ratio > 0).all()
    with pytest.raises(ValueError, match="no rounds of vllm budget 99"):
        live.round_ratios(runs.stats, "vllm budget 99", "vllm budget 32", "long_ttft_s")
    with pytest.raises(ValueError, match="measured twice in one round"):
        live.collect([live.LiveRuns(runs.stats.iloc[:1], runs.chunks, runs.calibration)] * 2)
    with pytest.raises(ValueError, match="each have a server"):
        live.measure_rounds(configs, {}, sc, rounds=1, together=True)
    started.clear()  # one at a time (a GPU): every round starts each server again, calibrating only the first time
    apart = live.measure_rounds(configs, servers, sc, rounds=2, together=False, calibration=calibration)
    assert apart.stats[["round", "config"]].values.tolist() == runs.stats[["round", "config"]].values.tolist()
    assert len(started) == 4 and not any(s.running for s in servers.values())
    assert len(apart.calibration) == len(runs.calibration)
    server = _Running(fake_server, "vllm", log, [])
    with pytest.raises(ValueError, match="is for sglang"):
        live.measure_round(server, live.LiveConfig("sglang", 32), sc, round=0)
    with pytest.raises(ValueError, match="asks for calibration"):
        live.prepare(server, live.LiveConfig("vllm", 32, calibrate=True), sc)
