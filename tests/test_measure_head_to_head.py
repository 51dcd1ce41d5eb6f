"""The head-to-head plan: runs, the benchmark's arguments, its answer as a table, and ratios; the arguments
are also parsed by vLLM's own `vllm bench serve` parser (engine_venv)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest

from servelab.engines.engine_side import script
from servelab.machine import engine_envs
from servelab.measure.deploying import head_to_head as h

SIZES = dict(input_tokens=64, concurrencies=[1, 4], rates=[2.0], rate_prompts=6, long_fraction=0.25, long_prompts=2,
             prefix_fraction=0.125, suffix_tokens=16, prefixes=2, prefix_prompts=6, conversations=2, turns=3)
SERVER = SimpleNamespace(url="http://127.0.0.1:9", served_model="m", model=SimpleNamespace(source="/models/m"))


def test_plan_covers_every_workload_and_sizes_from_the_context_window():
    runs = h.plan(2048, **SIZES)
    assert [r.workload for r in runs] == ["random", "random", "random", "shared_prefix", "long_prompt", "multi_turn"]
    assert [r.concurrency for r in runs[:2]] == [1, 4] and math.isinf(runs[0].rate)
    assert runs[2].rate == 2.0 and runs[2].concurrency is None
    assert "512" in runs[4].dataset and "256" in runs[3].dataset
    assert len(h.plan(4096, **SIZES)[4].dataset[h.plan(4096, **SIZES)[4].dataset.index("--random-input-len") + 1]) == 4
    assert runs[5].prompts == 6 and len(runs[5].chats) == 6
    assert [r.prompts for r in runs[:2]] == [4, 8] and h.plan(2048, **SIZES, waves=3)[1].prompts == 12


def test_multi_turn_chats_interleave_conversations_turn_by_turn():
    chats = h.multi_turn_chats(0, 2, 3)
    systems = [c[0]["content"].split(".")[0] for c in chats]
    assert systems == ["Run 0, conversation 0", "Run 0, conversation 1"] * 3
    assert [len(c) for c in chats] == [2, 2, 4, 4, 6, 6]  # each turn re-sends the conversation so far
    assert chats[2][:2] == chats[0]


def test_rounds_conversations_differ_from_the_first_word_after_the_template():
    """Each round has a seed of its own; its system prompts part from another round's at the seed."""
    first, second = (h.multi_turn_chats(seed, 2, 1) for seed in (0, h.ROUND_SEEDS))
    for a, b in zip(first, second, strict=True):
        assert a[0]["content"].startswith("Run 0,") and b[0]["content"].startswith(f"Run {h.ROUND_SEEDS},")


@pytest.mark.parametrize(("change", "word"), [
    ({"input_tokens": 0}, "input_tokens"), ({"concurrencies": [0]}, "concurrency"),
    ({"rates": [0]}, "request rates"), ({"long_fraction": 1.5}, "long_fraction")])
def test_bad_sizes_are_refused(change, word):
    with pytest.raises(ValueError, match=word):
        h.plan(2048, **{**SIZES, **change})


def test_args_carry_the_same_client_settings_for_every_run():
    runs = h.plan(2048, **SIZES, seed=3)
    args = [r.args(SERVER, 16, "/tmp/x.jsonl") for r in runs]
    for a in args:
        assert a[a.index("--backend") + 1] == "openai" and a[a.index("--tokenizer") + 1] == "/models/m"
        assert "--ignore-eos" in a and a[a.index("--temperature") + 1] == "0"
        assert "--save-detailed" in a  # else vLLM's main drops the per-request lists that are saved
        assert a[a.index("--metric-percentiles") + 1] == "50,90,99"
    assert "--max-concurrency" not in args[2] and args[2][args[2].index("--request-rate") + 1] == "2.0"
    assert "--request-rate" not in args[0]
    assert args[5][args[5].index("--dataset-path") + 1] == "/tmp/x.jsonl"
    with pytest.raises(ValueError, match="dataset_path"):
        runs[5].args(SERVER, 16)


def test_every_run_and_the_warm_up_send_their_own_seed():
    # one seed for all made the benchmark send the same random prompts in every run (prefix-cache hits)
    runs = h.plan(2048, **SIZES, seed=3)
    seeds = [int(r.args(SERVER, 16, "/tmp/x.jsonl")[r.args(SERVER, 16, "/tmp/x.jsonl").index("--seed") + 1])
             for r in runs]
    warm = h.warm_up(runs)
    assert seeds == list(range(3, 3 + len(runs))) and warm.seed not in seeds
    assert warm.workload == "warm_up" and warm.dataset == runs[0].dataset and warm.prompts == 4
    with pytest.raises(ValueError, match="random"):
        h.warm_up([r for r in runs if r.workload != "random"])


def _answer(runs, scale):
    return {"version": "0.32.0", "runs": [{"name": r.name, "args": [], "result": {
        "completed": r.prompts, "failed": 0, "duration": 1.0, "output_throughput": 100.0 / scale,
        **{f"p{p}_{m}_ms": scale * p for p in h.PERCENTILES for m in h.METRICS},
        **{f"mean_{m}_ms": scale for m in h.METRICS}},
        "requests": {"ttfts": [0.01 * scale, 0.03 * scale], "latencies": [0.1, 0.2], "itls": [[0.005, 0.02], []],
                     "input_lens": [64, 64], "output_lens": [16, 16]},
        "counter": {"name": "c", "before": 10.0, "after": 10.0 + i}} for i, r in enumerate(runs)]}


def test_frame_and_ratios():
    runs = h.plan(2048, **SIZES)
    table = pd.concat([h.frame("vllm", runs, _answer(runs, 1.0)), h.frame("sglang", runs, _answer(runs, 2.0))])
    assert list(table.columns[:8]) == ["engine", "run", "workload", "concurrency", "rate", "prompts", "seed", "client"]
    assert table.p90_itl_ms.tolist() == [90.0] * len(runs) + [180.0] * len(runs)
    r = h.ratios(table)
    assert list(r.index) == [run.name for run in runs]
    assert (r.p50_ttft_ms == 0.5).all() and (r.output_throughput == 2.0).all()
    with pytest.raises(ValueError, match="both"):
        h.ratios(table[table.engine == "vllm"])
    with pytest.raises(ValueError, match="answered"):
        h.frame("vllm", runs, _answer(runs[:2], 1.0))
    assert table.cached_tokens.tolist() == list(range(len(runs))) * 2  # the counter's growth over each run
    assert "max_concurrent_requests" not in table  # vLLM's per-second bucket count, not the concurrency
    assert (table.seed.iloc[:len(runs)] == [r.seed for r in runs]).all()


def test_per_request_lists_and_their_maxima():
    runs = h.plan(2048, **SIZES)
    sent = pd.concat([h.requests("vllm", runs, _answer(runs, 1.0)), h.requests("sglang", runs, _answer(runs, 2.0))])
    assert len(sent) == 2 * 2 * len(runs)
    first = sent.iloc[0]
    assert first.ttft_ms == pytest.approx(10.0) and first.e2el_ms == pytest.approx(100.0)
    assert json.loads(first.itls_ms) == [5.0, 20.0] and first.input_tokens == 64
    peaks = h.maxima(sent).set_index(["engine", "run"])
    assert peaks.loc[("sglang", runs[0].name), "max_ttft_ms"] == pytest.approx(60.0)
    assert peaks.loc[("vllm", runs[0].name), "max_itl_ms"] == pytest.approx(20.0)  # an empty list counts nothing
    with pytest.raises(ValueError, match="at least one"):
        h.maxima(sent.iloc[:0])


def test_rounds_use_seeds_and_conversations_of_their_own():
    rounds = h.plans(3, seed=5, max_model_len=2048, **SIZES)
    seeds = [r.seed for runs in rounds for r in runs]
    assert len(rounds) == 3 and len(set(seeds)) == len(seeds) and rounds[1][0].seed == 5 + h.ROUND_SEEDS
    assert rounds[0][-1].chats != rounds[1][-1].chats  # a round's conversations are not cached by the one before
    assert h.warm_up([r for runs in rounds for r in runs]).seed not in seeds
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        h.plans(0, max_model_len=2048, **SIZES)


class _Stand:
    def __init__(self, name):
        self.name, self.running = name, False

    def start(self):
        self.running = True
        return self

    def stop(self):
        self.running = False


def test_measure_rounds_turns_the_order_round_by_round(monkeypatch):
    called = []

    def measure(server, runs, *, output_tokens, warm=None):
        called.append((server.name, warm is not None))
        frame = pd.DataFrame({"engine": [server.name], "run": [runs[0].name]})
        return frame, frame.assign(request=0)

    monkeypatch.setattr(h, "measure", measure)
    runs = h.plan(2048, **SIZES)
    up = []
    table, sent = h.measure_rounds({"vllm": _Stand("vllm"), "sglang": _Stand("sglang")}, [runs] * 3, together=True,
                                   output_tokens=4, warm=h.warm_up(runs), started=lambda e, s: up.append(e))
    assert up == ["vllm", "sglang"]
    assert called == [("vllm", True), ("sglang", True), ("sglang", False), ("vllm", False), ("vllm", False),
                      ("sglang", False)]
    assert table["round"].tolist() == [0, 0, 1, 1, 2, 2] and sent["round"].tolist() == [0, 0, 1, 1, 2, 2]
    called.clear()
    h.measure_rounds({"vllm": _Stand("vllm"), "sglang": _Stand("sglang")}, [runs] * 2, together=False,
                     output_tokens=4, warm=h.warm_up(runs))
    # one at a time (a GPU): the same turns, each round a fresh start with its own warm-up
    assert called == [("vllm", True), ("sglang", True), ("sglang", True), ("vllm", True)]
    with pytest.raises(ValueError, match="at least one server and one round, got 2 and 0"):
        h.measure_rounds({"vllm": _Stand("a"), "sglang": _Stand("b")}, [], together=True, output_tokens=4)


def test_ratios_over_rounds_give_the_median_round_its_range_and_a_winner_only_when_rounds_agree():
    runs = h.plan(2048, **SIZES)[:2]
    rounds = []
    for r, (fast, slow) in enumerate([(1.0, 2.0), (1.0, 4.0), (1.0, 0.5)]):
        rounds += [h.frame("vllm", runs, _answer(runs, fast)).assign(round=r),
                   h.frame("sglang", runs, _answer(runs, slow)).assign(round=r)]
    table = pd.concat(rounds, ignore_index=True)
    assert h.round_ratios(table).p50_ttft_ms.tolist() == [0.5, 0.25, 2.0] * 2
    assert h.ratios(table).p50_ttft_ms.tolist() == [0.5, 0.5]
    spread = h.ratio_spread(table, "p50_ttft_ms")
    assert spread.loc[runs[0].name, "lowest round"] == 0.25 and spread.loc[runs[0].name, "highest round"] == 2.0
    assert spread["favoured in every round"].tolist() == ["", ""]  # round 2 favours SGLang
    agreed = h.ratio_spread(table[table["round"] < 2], "output_throughput", lower_is_better=False)
    assert agreed["favoured in every round"].tolist() == ["vllm", "vllm"]
    mid = h.medians(table).set_index(["engine", "run"])
    assert mid.loc[("sglang", runs[0].name), "p50_ttft_ms"] == 100.0 and "round" not in mid
    with pytest.raises(ValueError, match="unknown metric 'p42'; accepted: p50_ttft_ms"):
        h.ratio_spread(table, "p42")


@pytest.mark.engine_venv
def test_vllm_bench_parser_accepts_every_run(require_engine, cpu):
    require_engine("vllm")
    runs = h.plan(cpu.max_model_len, **SIZES)
    request = {"parse_only": True, "runs": [{"name": r.name, "args": r.args(SERVER, 16, "/tmp/x.jsonl")}
                                            for r in runs]}
    python = engine_envs.get(cpu.engine_env("vllm")).require().python
    answer = engine_envs.run_script(python, script("vllm_bench_runs.py"), stdin=json.dumps(request), timeout=300)
    parsed = {r["name"]: r["parsed"] for r in answer["runs"]}
    assert parsed["random, concurrency 4"]["max_concurrency"] == 4
    assert parsed["random, 2 req/s"]["request_rate"] == 2.0
    assert parsed["shared prefix"]["dataset_name"] == "prefix_repetition"
    assert parsed["multi-turn"]["dataset_name"] == "custom" and parsed["multi-turn"]["skip_chat_template"] is True
    assert all(p["percentile_metrics"] == "ttft,itl,e2el" and p["ignore_eos"] is True for p in parsed.values())
    assert all(p["save_detailed"] is True and not p.get("save_result") for p in parsed.values())
