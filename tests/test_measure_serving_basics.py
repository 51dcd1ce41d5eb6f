"""Chapter 01's sweeps (the benchmark's arguments of every run, their seeds), the rates placed around a
capacity, the aggregations on hand-made tables, the batch roofline by hand, and the engines' batch knobs
(a table from a hand-made answer; the engine-side scripts against the engines' own code: engine_venv)."""

from __future__ import annotations

import json
import math
import subprocess
from types import SimpleNamespace

import pandas as pd
import pytest

from servelab.machine import engine_envs
from servelab.measure.batching import serving as sb
from servelab.measure.deploying import head_to_head as h
from servelab.measure.kv_memory import capacity as kv_capacity
from servelab.measure.speculative.verification import Roofline

SERVER = SimpleNamespace(url="http://127.0.0.1:9", served_model="m", model=SimpleNamespace(source="/models/m"))


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_prefill_runs_send_one_request_at_a_time_with_prompts_of_exactly_each_length():
    runs = sb.prefill_runs([32, 512, 1536], requests=2, seed=0)
    assert [r.name for r in runs] == ["prefill 32 tokens", "prefill 512 tokens", "prefill 1536 tokens"]
    for run, tokens in zip(runs, (32, 512, 1536), strict=True):
        args = run.args(SERVER, 16)
        assert _arg(args, "--random-input-len") == str(tokens) and _arg(args, "--random-range-ratio") == "0"
        assert _arg(args, "--max-concurrency") == "1" and _arg(args, "--num-prompts") == "2"
        assert "--request-rate" not in args and _arg(args, "--dataset-name") == "random"


def test_batch_runs_keep_b_requests_in_flight_for_waves_rounds():
    runs = sb.batch_runs([1, 2, 4, 8], input_tokens=64, waves=2, seed=0)
    args = [r.args(SERVER, 32) for r in runs]
    assert [_arg(a, "--max-concurrency") for a in args] == ["1", "2", "4", "8"]
    assert [_arg(a, "--num-prompts") for a in args] == ["2", "4", "8", "16"]
    assert {_arg(a, "--random-input-len") for a in args} == {"64"} and not any("--request-rate" in a for a in args)
    assert [r.name for r in runs] == ["batch 1", "batch 2", "batch 4", "batch 8"]


def test_rate_runs_are_open_loop_at_each_rate():
    runs = sb.rate_runs([0.5, 2.0], prompts=12, input_tokens=64, seed=0)
    args = [r.args(SERVER, 32) for r in runs]
    assert [_arg(a, "--request-rate") for a in args] == ["0.5", "2.0"]
    assert not any("--max-concurrency" in a for a in args) and {_arg(a, "--num-prompts") for a in args} == {"12"}
    assert [r.name for r in runs] == ["rate 0.5 req/s", "rate 2 req/s"] and runs[0].concurrency is None


def test_no_two_runs_of_any_sweep_or_round_share_a_seed():
    # vLLM's random prompts are consecutive ids from a seeded offset: one seed for two runs is a shared prefix
    def seeds(seed: int) -> list[int]:
        runs = (sb.prefill_runs([32, 512], requests=2, seed=seed) + sb.batch_runs([1, 8], input_tokens=64, waves=2,
                seed=seed) + sb.rate_runs([1.0, 2.0], prompts=4, input_tokens=64, seed=seed))
        return [int(_arg(r.args(SERVER, 8), "--seed")) for r in runs] + [h.warm_up(runs).seed]

    every = [s for r in range(3) for s in seeds(r * h.ROUND_SEEDS)]
    assert len(set(every)) == len(every)
    assert seeds(0)[:2] == [0, 1] and seeds(0)[2] == sb.SWEEP_SEEDS["batch"]


@pytest.mark.parametrize(("build", "word"), [
    (lambda: sb.prefill_runs([32, 32], requests=2, seed=0), "distinct"),
    (lambda: sb.prefill_runs([], requests=2, seed=0), "at least one"),
    (lambda: sb.prefill_runs([0], requests=2, seed=0), "each prompt length"),
    (lambda: sb.prefill_runs([32], requests=0, seed=0), "requests"),
    (lambda: sb.batch_runs([2, True], input_tokens=64, waves=2, seed=0), "each batch"),
    (lambda: sb.batch_runs([1], input_tokens=64, waves=0, seed=0), "waves"),
    (lambda: sb.rate_runs([1.0, math.inf], prompts=4, input_tokens=64, seed=0), "each rate"),
    (lambda: sb.rate_runs([1.0], prompts=4, input_tokens=64, seed=-1), "seed")])
def test_bad_sweeps_are_refused_naming_the_argument(build, word):
    with pytest.raises(ValueError, match=word):
        build()


def test_rates_from_capacity_round_to_two_digits_around_the_knee():
    assert sb.rates_from_capacity(3.71) == [0.93, 1.9, 3.7, 7.4]
    assert sb.rates_from_capacity(0.052) == [0.013, 0.026, 0.052, 0.1]
    assert sb.rates_from_capacity(480, (0.5, 1.0)) == [240.0, 480.0]


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "3"])
def test_rates_from_capacity_refuses_a_bad_capacity_in_one_line(bad):
    with pytest.raises(ValueError) as err:
        sb.rates_from_capacity(bad)
    message = str(err.value)
    assert "\n" not in message and repr(bad) in message and "finite number > 0" in message


@pytest.mark.parametrize(("fractions", "word"), [((), "increasing"), ((0.5, 0.25), "increasing"),
                                                 ((0.0, 1.0), "> 0"), ((0.25, 0.251), "equal rates")])
def test_rates_from_capacity_refuses_bad_fractions(fractions, word):
    with pytest.raises(ValueError, match=word):
        sb.rates_from_capacity(2.0, fractions)


def _request(engine: str, run: str, tokens: int, ttft: float, gaps: list[float]) -> dict:
    return {"engine": engine, "run": run, "request": 0, "ttft_ms": ttft, "e2el_ms": ttft + sum(gaps),
            "itls_ms": json.dumps(gaps), "input_tokens": tokens, "output_tokens": len(gaps) + 1}


def test_prefill_decode_takes_medians_per_prompt_length_and_compares_with_the_shortest():
    rows = [_request("vllm", "prefill 512 tokens", 512, 400.0, [10.0, 12.0]),
            _request("vllm", "prefill 512 tokens", 512, 600.0, [11.0]),
            _request("vllm", "prefill 32 tokens", 32, 50.0, [9.0, 11.0]),
            _request("vllm", "prefill 32 tokens", 32, 70.0, [10.0]),
            _request("sglang", "prefill 32 tokens", 32, 20.0, [5.0]),
            _request("sglang", "prefill 512 tokens", 512, 100.0, [6.0]),
            _request("vllm", "batch 4", 64, 999.0, [99.0])]  # another sweep's request: ignored
    out = sb.prefill_decode(pd.DataFrame(rows))
    assert list(out.engine) == ["vllm", "vllm", "sglang", "sglang"] and list(out.prompt_tokens) == [32, 512, 32, 512]
    vllm = out[out.engine == "vllm"].set_index("prompt_tokens")
    assert vllm.ttft_ms.tolist() == [60.0, 500.0] and vllm.itl_ms.tolist() == [10.0, 11.0]
    assert vllm.requests.tolist() == [2, 2]
    assert vllm.ttft_vs_shortest.tolist() == pytest.approx([1.0, 500 / 60])
    assert vllm.itl_vs_shortest.tolist() == pytest.approx([1.0, 1.1])
    assert out[out.engine == "sglang"].ttft_vs_shortest.tolist() == pytest.approx([1.0, 5.0])
    with pytest.raises(ValueError, match="no prefill run"):
        sb.prefill_decode(pd.DataFrame(rows[-1:]))


def _summary(engine: str, run: str, *, concurrency=None, rate=math.inf, round_=0, **measured) -> dict:
    return {"engine": engine, "run": run, "workload": "random", "concurrency": concurrency, "rate": rate,
            "round": round_, **measured}


def test_decode_scaling_compares_server_and_request_speed_with_batch_1():
    rows = [_summary("vllm", "batch 1", concurrency=1, output_throughput=40.0, p50_itl_ms=25.0),
            _summary("vllm", "batch 4", concurrency=4, output_throughput=120.0, p50_itl_ms=30.0),
            _summary("vllm", "batch 4", concurrency=4, output_throughput=140.0, p50_itl_ms=34.0, round_=1),
            _summary("vllm", "prefill 32 tokens", concurrency=1, output_throughput=1.0, p50_itl_ms=1.0),
            _summary("sglang", "batch 1", concurrency=1, output_throughput=50.0, p50_itl_ms=20.0)]
    out = sb.decode_scaling(pd.DataFrame(rows))
    assert list(zip(out.engine, out.batch, strict=True)) == [("vllm", 1), ("vllm", 4), ("sglang", 1)]
    four = out.iloc[1]
    assert four.server_tok_s == 130.0 and four.request_tok_s == pytest.approx(1000 / 32)
    assert four.server_gain_vs_batch_1 == pytest.approx(130 / 40)
    assert four.request_speed_vs_batch_1 == pytest.approx(25 / 32)
    assert out.iloc[2].server_gain_vs_batch_1 == 1.0
    with pytest.raises(ValueError, match="sglang"):
        sb.decode_scaling(pd.DataFrame(rows[:2] + [_summary("sglang", "batch 2", concurrency=2, output_throughput=1.0,
                                                            p50_itl_ms=1.0)]))


def test_load_curve_reports_achieved_rate_and_latency_per_offered_rate():
    def row(engine, rate, achieved, ttft, e2el, round_=0):
        return _summary(engine, f"rate {rate:g} req/s", rate=rate, round_=round_, request_throughput=achieved,
                        output_throughput=32 * achieved, p50_ttft_ms=ttft, p90_ttft_ms=2 * ttft, p50_e2el_ms=e2el,
                        p90_e2el_ms=2 * e2el)

    rows = [row("vllm", 4.0, 2.5, 3000.0, 9000.0), row("vllm", 1.0, 1.0, 100.0, 1000.0),
            row("vllm", 1.0, 0.9, 120.0, 1200.0, round_=1), row("sglang", 1.0, 1.0, 80.0, 900.0),
            _summary("vllm", "batch 8", concurrency=8, request_throughput=9.0)]
    out = sb.load_curve(pd.DataFrame(rows))
    assert list(out.columns) == ["engine", "offered_req_s", "achieved_req_s", "output_tok_s", "p50_ttft_ms",
                                 "p90_ttft_ms", "p50_e2el_ms", "p90_e2el_ms"]
    assert list(zip(out.engine, out.offered_req_s, strict=True)) == [("vllm", 1.0), ("vllm", 4.0), ("sglang", 1.0)]
    first = out.iloc[0]
    assert first.achieved_req_s == pytest.approx(0.95) and first.p50_ttft_ms == 110.0 and first.p90_e2el_ms == 2200.0
    assert out.iloc[1].output_tok_s == 80.0


def test_batch_roofline_reads_the_weights_once_per_step_and_the_kv_per_request():
    roof = Roofline(weight_bytes=10**9, kv_bytes_per_context_token=10**5, bandwidth_gb_s=100.0)
    # batch 1, 1000 tokens of context: 1e9 + 1e8 bytes per token at 100 GB/s
    assert sb.batch_roofline(roof, 1, 1000) == pytest.approx(100e9 / 1.1e9) == pytest.approx(roof.tokens_per_s(1000))
    # batch 4: one step reads 1e9 + 4 x 1e8 bytes and makes 4 tokens
    assert sb.batch_roofline(roof, 4, 1000) == pytest.approx(4 * 100e9 / 1.4e9)
    assert sb.batch_roofline(roof, 8, 0) == pytest.approx(800.0)  # no KV: 8 tokens per read of the weights
    with pytest.raises(ValueError, match="batch"):
        sb.batch_roofline(roof, 0, 1000)
    with pytest.raises(ValueError, match="context_tokens"):
        sb.batch_roofline(roof, 1, -1)


def _knob(default, field="x.py, A", resolved="x.py, A.f"):
    return {"field default": None, "default": default, "field": field, "resolved by": resolved}


DEFAULTS = {"vllm": {"knobs": {"max_num_seqs": _knob(128), "max_num_batched_tokens": _knob(2048)}},
            "sglang": {"knobs": {"max_running_requests": _knob(4096), "max_prefill_tokens": _knob(16384, resolved=None),
                                 "chunked_prefill_size": _knob(4096)}}}


def test_batch_knobs_tabulate_flags_defaults_and_where_each_was_read():
    table = sb.batch_knobs(DEFAULTS)
    assert list(table.columns) == ["engine", "knob", "default", "bounds", "where read"]
    assert list(table.knob) == ["--max-num-seqs", "--max-num-batched-tokens", "--max-running-requests",
                                "--max-prefill-tokens", "--chunked-prefill-size"]
    assert list(table.default) == [128, 2048, 4096, 16384, 4096]
    assert table["where read"].tolist()[:2] == ["x.py, A; x.py, A.f"] * 2 and table["where read"][3] == "x.py, A"
    running = sb.batch_knobs(DEFAULTS, {"vllm": {"max_num_seqs": 32, "max_num_batched_tokens": None},
                                        "sglang": {"max_running_requests": 32}})
    assert list(running["running server"]) == [32, 2048, 32, 16384, 4096]


def test_running_batch_knobs_read_vllms_launch_flags_and_sglangs_server_info(monkeypatch):
    argv = ["vllm", "serve", "m", "--max-num-seqs", "32", "--enforce-eager", "--max-num-seqs", "8"]
    vllm = SimpleNamespace(engine="vllm", spec=SimpleNamespace(argv=argv))  # the profile's 32, then an option's 8
    assert sb.running_batch_knobs(vllm) == {"max_num_seqs": 8, "max_num_batched_tokens": None}
    info = {"max_running_requests": 32, "max_prefill_tokens": 16384, "chunked_prefill_size": 4096,
            "internal_states": [{"effective_max_running_requests_per_dp": 31, "max_total_num_tokens": 23296}]}
    monkeypatch.setattr(kv_capacity.httpx, "get", lambda url, timeout: SimpleNamespace(json=lambda: info))
    sglang = SimpleNamespace(engine="sglang", url="http://127.0.0.1:9")
    assert sb.running_batch_knobs(sglang) == {"max_running_requests": 31, "max_prefill_tokens": 16384,
                                              "chunked_prefill_size": 4096, "max_total_num_tokens": 23296}


@pytest.mark.engine_venv
def test_batch_knob_defaults_come_from_the_engines_own_code(require_engine, cpu):
    require_engine("vllm")
    require_engine("sglang")
    defaults = sb.engine_batch_defaults(cpu)
    table = sb.batch_knobs(defaults)
    assert all(isinstance(v, int) and v > 0 for v in table.default), table
    assert table["where read"].str.contains(r"\.py, ").all()
    # vLLM's own get_batch_defaults, called here without the script: what `vllm serve` gets on this platform
    python = engine_envs.get(cpu.vllm_env).require().python
    direct = subprocess.run([str(python), "-c", (
        "import json; from vllm.engine.arg_utils import EngineArgs; from vllm.usage.usage_lib import UsageContext; "
        "t, s = EngineArgs.get_batch_defaults(world_size=1); "
        "print(json.dumps([s[UsageContext.OPENAI_API_SERVER], t[UsageContext.OPENAI_API_SERVER]]))")],
        capture_output=True, text=True, timeout=300, env=engine_envs.cpu_only_env(), check=True)
    seqs, tokens = json.loads(direct.stdout.strip().splitlines()[-1])
    vllm = table[table.engine == "vllm"].set_index("knob").default
    assert (vllm["--max-num-seqs"], vllm["--max-num-batched-tokens"]) == (seqs, tokens)
    assert defaults["vllm"]["platform"] == "CpuPlatform"
    assert defaults["vllm"]["EngineArgs.performance_mode"] != "throughput"  # which would double both
    sglang = defaults["sglang"]["knobs"]
    assert sglang["max_running_requests"]["field default"] is None and sglang["chunked_prefill_size"]["default"] > 0
