"""The selection guide: rows computed from saved results and the ledger; leanings follow the numbers, except
engine timings on the cpu profile and ledger-only rows, which lean to no engine."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from servelab.book import claims
from servelab.book import selection_guide as sg
from servelab.book import selection_guide_exercises as sgx
from servelab.machine import profiles

CPU, GPU = profiles.load("cpu"), profiles.load("gpu-24g")


def _head_to_head(folder, vllm_ttft=100.0, sglang_ttft=200.0, vllm_thr=50.0, sglang_thr=50.0, shared_e2el=(90, 30)):
    rows = []
    for engine, ttft, thr in (("vllm", vllm_ttft, vllm_thr), ("sglang", sglang_ttft, sglang_thr)):
        for run, workload, conc in (("random, concurrency 1", "random", 1), ("random, concurrency 8", "random", 8),
                                    ("random, 2 req/s", "random", None), ("shared prefix", "shared_prefix", 2),
                                    ("multi-turn", "multi_turn", 2)):
            e2el = ttft * 3 if workload != "shared_prefix" else shared_e2el[engine == "sglang"]
            rows.append({"engine": engine, "run": run, "workload": workload, "concurrency": conc,
                         "p50_ttft_ms": ttft, "p50_itl_ms": 10.0, "p50_e2el_ms": e2el,
                         "output_throughput": thr * (conc or 1)})
    pd.DataFrame(rows).to_csv(folder / "head_to_head.csv", index=False)


def _prefix(folder, multi_turn="multi-turn: hit rate"):
    pd.DataFrame({"measure": [multi_turn, "loop that overflows the cache: second-round hit rate"],
                  "vLLM": ["47%", "58%"], "SGLang": ["61%", "3%"]}).to_csv(folder / "prefix_verdict.csv", index=False)


@pytest.mark.parametrize(("ratio", "lower", "expected"), [
    (0.5, True, "vLLM"), (2.0, True, "SGLang"), (1.05, True, "either (within 10%)"),
    (2.0, False, "vLLM"), (0.5, False, "SGLang"), (0.95, False, "either (within 10%)")])
def test_lean_follows_the_ratio(ratio, lower, expected):
    assert sg.lean(ratio, lower_is_better=lower) == expected


def test_guide_from_saved_results_on_a_gpu_profile(tmp_path):
    _head_to_head(tmp_path)
    _prefix(tmp_path)
    table = sg.guide(tmp_path, GPU, claims.load()).set_index("situation")
    assert list(table.columns) == ["measured", "leaning", "evidence"]
    one = table.loc["one request at a time, latency matters"]
    assert one.leaning == "vLLM" and "median request latency vLLM/SGLang 0.50" in one.measured  # e2el 300 vs 600
    assert table.loc["many concurrent requests, throughput matters", "leaning"] == "either (within 10%)"
    assert "concurrency 8" in table.loc["many concurrent requests, throughput matters", "measured"]
    # the shared-prefix row follows this chapter's shared-prefix run (SGLang 3x faster here), not the hit rates
    shared = table.loc["prompts share a prefix (chat, agents, RAG)"]
    assert shared.leaning == "SGLang" and "3.00" in shared.measured and "61%" in shared.measured
    assert table.loc["the reused prompts do not fit the KV cache", "leaning"] == "vLLM"
    assert table.loc["multi-turn chat re-sending the conversation", "leaning"] == "vLLM"
    assert all(table.evidence.str.len() > 0)


def test_on_cpu_engine_timings_lean_to_no_engine_but_hit_rates_do(tmp_path):
    _head_to_head(tmp_path)
    _prefix(tmp_path, multi_turn="multi turn: hit rate")  # chapter 04's label without its hyphen
    table = sg.guide(tmp_path, CPU, claims.load()).set_index("situation")
    assert "vLLM 47%, SGLang 61%" in table.loc["prompts share a prefix (chat, agents, RAG)", "measured"]
    assert table.loc["one request at a time, latency matters", "leaning"] == sg.NOT_INDICATIVE
    assert table.loc["prompts share a prefix (chat, agents, RAG)", "leaning"] == sg.NOT_INDICATIVE
    assert table.loc["the reused prompts do not fit the KV cache", "leaning"] == "vLLM"


def test_engine_timings_lean_only_where_every_round_favours_the_same_engine(tmp_path):
    _head_to_head(tmp_path)
    one = pd.read_csv(tmp_path / "head_to_head.csv")
    flipped = one.assign(p50_e2el_ms=one.p50_e2el_ms.where(one.engine == "sglang", 900.0))  # vLLM slower
    pd.concat([one.assign(round=0), one.assign(round=1), flipped.assign(round=2)]).to_csv(
        tmp_path / "head_to_head.csv", index=False)
    table = sg.guide(tmp_path, GPU, claims.load()).set_index("situation")
    light = table.loc["one request at a time, latency matters"]
    assert light.leaning == "either (the rounds disagree)"  # the median round (0.50) alone would say vLLM
    assert "0.50 (rounds 0.50-1.50)" in light.measured


def test_chunked_row_reports_stall_and_ttft_apart(tmp_path):
    rows = [("v", "vllm", 32, False, 0, 2.07, 0.14), ("p", "sglang", 32, False, 0, 1.0, 0.90),
            ("m", "sglang", 32, True, 0, 5.87, 0.44)]
    pd.DataFrame(rows, columns=["config", "engine", "budget", "mixed_chunk", "threshold", "long_ttft_s",
                                "longest_stall_s"]).to_csv(tmp_path / "chunked_prefill_live.csv", index=False)

    def row():
        return sg.guide(tmp_path, GPU, claims.load()).set_index("situation").loc[
            "long prompts arrive while other users stream"]

    assert "longest stall 0.14 s, long prompt's TTFT 2.07 s" in row().measured and "TTFT 5.87 s" in row().measured
    assert row().leaning == "vLLM"  # 0.14 s against SGLang's best 0.44 s
    rounds = pd.DataFrame({"config": ["v", "v", "m", "m"], "round": [0, 1, 0, 1],
                           "longest_stall_s": [0.1, 0.2, 0.4, 0.5]})
    rounds.to_csv(tmp_path / "chunked_prefill_rounds.csv", index=False)
    assert row().leaning == "vLLM" and "(median rounds)" in row().measured
    rounds.assign(longest_stall_s=[0.1, 0.45, 0.4, 0.5]).to_csv(tmp_path / "chunked_prefill_rounds.csv", index=False)
    assert row().leaning == "either (the rounds overlap)"


def _summary(folder, rounds=3, **speedups):
    """A chapter 06 summary: per load words, a list of (median, lowest round, highest round) per method, and
    beside it the meta.json that says how many rounds (None: a meta.json without them)."""
    table = {"method": ["n-gram", "draft"][:len(next(iter(speedups.values())))]}
    for at, rows in speedups.items():
        at = at.replace("_", " ")
        for i, what in enumerate(("speedup", "lowest round", "highest round")):
            table[f"{what}, {at}"] = [r[i] for r in rows]
    pd.DataFrame(table).to_csv(folder / "speculative_summary.csv", index=False)
    meta = {"name": "speculative_summary"} | ({"rounds": rounds} if rounds is not None else {})
    (folder / "speculative_summary.meta.json").write_text(json.dumps(meta))


def test_speculative_row_reads_the_speedup_columns_whatever_their_task_words(tmp_path):
    _summary(tmp_path, **{"sweep task (48 tokens, all copied), 1 request": [(2.4, 2.2, 2.5), (1.1, 1.0, 1.2)],
                          "sweep task, 16 requests": [(1.2, 1.1, 1.3), (0.5, 0.4, 0.6)]})
    row = sg.guide(tmp_path, CPU, claims.load()).set_index("situation").loc["speculative decoding to cut latency"]
    assert row.measured.startswith("vLLM, best method at 1 request(s): n-gram, speedup 2.40 (rounds 2.20-2.50); "
                                   "at 16 requests 1.20 (rounds 1.10-1.30)")
    assert row.leaning == "not an engine comparison: helps at 1 request(s), helps at 16"


def test_a_speedup_whose_rounds_straddle_one_is_not_resolved(tmp_path):
    _summary(tmp_path, **{"sweep task, 1 request": [(1.3, 1.1, 1.5)], "sweep task, 16 requests": [(0.9, 0.8, 1.05)]})
    row = sg.guide(tmp_path, CPU, claims.load()).set_index("situation").loc["speculative decoding to cut latency"]
    assert row.leaning == "not an engine comparison: helps at 1 request(s), not resolved with 3 rounds at 16"
    _summary(tmp_path, rounds=5, **{"sweep task, 1 request": [(1.3, 1.1, 1.5)],
                                    "sweep task, 16 requests": [(0.9, 0.8, 1.05)]})
    row = sg.guide(tmp_path, CPU, claims.load()).set_index("situation").loc["speculative decoding to cut latency"]
    assert row.leaning.endswith("not resolved with 5 rounds at 16")  # the words name the saved number of rounds
    _summary(tmp_path, **{"sweep task, 1 request": [(1.3, 1.1, 1.5)], "sweep task, 16 requests": [(0.7, 0.6, 0.8)]})
    row = sg.guide(tmp_path, CPU, claims.load()).set_index("situation").loc["speculative decoding to cut latency"]
    assert row.leaning.endswith("hurts at 16")


def test_a_summary_without_its_number_of_rounds_is_an_error(tmp_path):
    _summary(tmp_path, rounds=None, **{"sweep task, 1 request": [(1.3, 1.1, 1.5)],
                                       "sweep task, 16 requests": [(0.9, 0.8, 1.05)]})
    with pytest.raises(sg.MissingColumn, match="how many rounds"):
        sg.guide(tmp_path, CPU, claims.load())


def test_a_speedup_without_its_rounds_is_an_error(tmp_path):
    pd.DataFrame({"method": ["n-gram"], "speedup, sweep task, 1 request": [1.5],
                  "speedup, sweep task, 16 requests": [0.9]}).to_csv(tmp_path / "speculative_summary.csv", index=False)
    with pytest.raises(sg.MissingColumn, match="'lowest round, sweep task, 1 request'.*lowest and highest"):
        sg.guide(tmp_path, CPU, claims.load())


def test_a_saved_table_without_a_needed_column_is_an_error_not_a_missing_row(tmp_path):
    pd.DataFrame({"method": ["n-gram"], "acceptance rate": [0.5]}).to_csv(tmp_path / "speculative_summary.csv",
                                                                          index=False)
    with pytest.raises(sg.MissingColumn, match="speedup, ... N request"):
        sg.guide(tmp_path, CPU, claims.load())
    (tmp_path / "speculative_summary.csv").unlink()
    pd.DataFrame({"engine": ["vllm"], "run": ["x"]}).to_csv(tmp_path / "head_to_head.csv", index=False)
    with pytest.raises(sg.MissingColumn, match="'workload'"):
        sg.guide(tmp_path, CPU, claims.load())


def test_missing_results_leave_their_rows_out_and_ledger_rows_stay_editorial(tmp_path):
    table = sg.guide(tmp_path, CPU, claims.load())
    assert set(table.evidence.str.split().str[0]) == {"ledger"}
    assert set(table.leaning) == {sg.EDITORIAL}
    ids = {cid for cid, _ in sg.LEDGER_ROWS}
    assert {e.split()[1] for e in table.evidence} == ids
    verdicts = {c.id: c.verdict for c in claims.load().claims}
    for _, row in table.iterrows():
        assert verdicts[row.evidence.split()[1]] in row.measured


def test_the_speculative_row_names_the_engine_that_ran_the_methods(tmp_path):
    """Chapter 06's methods run on vLLM on every profile; a GPU profile naming SGLang speculation too must not
    credit SGLang with them."""
    from servelab.machine import profiles

    _summary(tmp_path, **{"sweep task, 1 request": [(1.5, 1.4, 1.6)], "sweep task, 16 requests": [(0.9, 0.8, 1.0)]})
    for name in ("cpu", "gpu-80g"):
        row = sg.guide(tmp_path, profiles.load(name), claims.load()).set_index("situation").loc[
            "speculative decoding to cut latency"]
        assert row.measured.startswith("vLLM, best method") and "SGLang" not in row.measured


def test_the_tie_is_a_parameter_and_a_bad_one_is_refused():
    assert sg.lean(1.07) == "either (within 10%)" and sg.lean(1.07, tie=0.05) == "SGLang"
    assert sg.lean(0.93, lower_is_better=False, tie=0.05) == "SGLang"
    with pytest.raises(ValueError, match="tie must be at least 0 and below 1, got 1.5"):
        sg.lean(1.0, tie=1.5)


def test_a_smaller_tie_lets_a_closer_ratio_lean_in_the_guide(tmp_path):
    _head_to_head(tmp_path, vllm_thr=53.0)  # throughput 6% apart: within 10%, beyond 5%
    heavy = "many concurrent requests, throughput matters"
    assert sg.guide(tmp_path, GPU, claims.load()).set_index("situation").leaning[heavy] == "either (within 10%)"
    assert sg.guide(tmp_path, GPU, claims.load(), tie=0.05).set_index("situation").leaning[heavy] == "vLLM"


def test_timing_ratios_are_the_runs_and_metrics_the_guide_leans_on(tmp_path):
    assert sg.timing_ratios(tmp_path).empty  # chapter 07 not run: no rows, the columns all the same
    _head_to_head(tmp_path)
    ratios = sg.timing_ratios(tmp_path).set_index("situation")
    assert list(ratios.run) == ["random, concurrency 1", "random, concurrency 8", "shared prefix", "multi-turn"]
    assert list(ratios.metric) == ["p50_e2el_ms", "output_throughput", "p50_e2el_ms", "p50_e2el_ms"]
    assert ratios.loc["one request at a time, latency matters", "median"] == pytest.approx(0.5)  # 300 ms / 600 ms
    assert ratios.loc["prompts share a prefix (chat, agents, RAG)", "median"] == pytest.approx(3.0)  # 90 / 30
    assert not ratios.loc["many concurrent requests, throughput matters", "lower is better"]


def test_exercise_cases_cover_every_answer_a_rule_can_give(tmp_path):
    _head_to_head(tmp_path)
    cases = sgx.lean_cases(sg.timing_ratios(tmp_path))
    assert {expected for _, expected in cases.values()} == {"vLLM", "SGLang", "either"}
    # a stub that ignores the tie, or measures it on the other ratio, gets a fixed case wrong
    assert cases["ratio 0.93, lower is better, tie 5%"][1] == "vLLM"
    assert cases["ratio 0.93, lower is better, tie 10%"][1] == "either"
    assert all(sg.lean(*args).split(" ")[0] == expected for args, expected in cases.values())
    assert cases["one request at a time, latency matters, inverted"] == ((2.0, True, 0.1), "SGLang")
    _summary(tmp_path, **{"sweep task, 1 request": [(1.3, 1.1, 1.5), (0.9, 0.8, 0.95)],
                          "sweep task, 16 requests": [(0.9, 0.8, 1.05), (0.5, 0.4, 0.6)]})
    cases = sgx.speculation_cases(tmp_path)
    assert cases["n-gram, sweep task, 1 request"] == ((1.1, 1.5), "helps")
    assert cases["draft, sweep task, 16 requests"] == ((0.4, 0.6), "hurts")
    assert cases["n-gram, sweep task, 16 requests"] == ((0.8, 1.05), "not resolved")
    assert cases["rounds from 1.0 to 1.2"] == ((1.0, 1.2), "not resolved")  # a round at exactly 1: not faster
    assert {expected for _, expected in cases.values()} == {"helps", "hurts", "not resolved"}


def test_exercise_three_cases_include_rounds_that_disagree_and_follow_lean_over_rounds(tmp_path):
    _head_to_head(tmp_path)
    ratios = sg.timing_ratios(tmp_path)
    cases = sgx.favoured_cases(ratios)
    assert {expected for _, expected in cases.values()} == {"vLLM", "SGLang", "either"}
    assert cases["made-up row 0.8, 0.7, 1.05, True, 0.1"][1] == "either"  # a median beyond the tie, rounds disagree
    assert cases["made-up row 0.93, 0.91, 0.95, True, 0.05"][1] == "vLLM"  # only a 5% tie lets it lean
    assert cases["made-up row 0.95, 0.93, 0.97, True, 0.1"][1] == "either"
    assert sgx.speculation_cases(tmp_path / "nothing saved")  # the made-up speedups need no chapter 06
    for _, row in ratios.iterrows():  # the row's own rounds give what the guide says on a GPU profile
        args, expected = cases[f"{row.situation}, tie 10%"]
        assert expected == sg.lean_over_rounds(row, row["lower is better"]).split(" ")[0]
        assert cases[f"{row.situation}, inverted"][1] == {"vLLM": "SGLang", "SGLang": "vLLM"}.get(expected, expected)


def test_advantage_reads_every_row_as_vllm_better_above_one():
    ratios = pd.DataFrame({"situation": ["latency", "throughput"], "metric": ["p50_e2el_ms", "output_throughput"],
                           "lower is better": [True, False], "median": [0.5, 2.0], "lowest round": [0.4, 1.5],
                           "highest round": [0.8, 2.5]})
    got = sg.advantage(ratios, tie=0.1).set_index("situation")
    assert got.loc["latency", ["median", "lowest", "highest"]].tolist() == pytest.approx([2.0, 1.25, 2.5])
    assert got.loc["throughput", ["median", "lowest", "highest"]].tolist() == pytest.approx([2.0, 1.5, 2.5])
    assert got.loc["latency", ["band low", "band high"]].tolist() == pytest.approx([1 / 1.1, 1 / 0.9])
    assert got.loc["throughput", ["band low", "band high"]].tolist() == pytest.approx([0.9, 1.1])
