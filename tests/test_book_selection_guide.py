"""The selection guide: rows computed from saved results and the ledger; leanings follow the numbers."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.book import claims
from servelab.book import selection_guide as sg


def _head_to_head(folder, vllm_ttft=100.0, sglang_ttft=200.0, vllm_thr=50.0, sglang_thr=50.0):
    rows = []
    for engine, ttft, thr in (("vllm", vllm_ttft, vllm_thr), ("sglang", sglang_ttft, sglang_thr)):
        for run, workload, conc in (("random, concurrency 1", "random", 1), ("random, concurrency 8", "random", 8),
                                    ("random, 2 req/s", "random", None), ("multi-turn", "multi_turn", 2)):
            rows.append({"engine": engine, "run": run, "workload": workload, "concurrency": conc,
                         "p50_ttft_ms": ttft, "p50_itl_ms": 10.0, "p50_e2el_ms": ttft * 3,
                         "output_throughput": thr * (conc or 1)})
    pd.DataFrame(rows).to_csv(folder / "head_to_head.csv", index=False)


@pytest.mark.parametrize(("ratio", "lower", "expected"), [
    (0.5, True, "vLLM"), (2.0, True, "SGLang"), (1.05, True, "either (within 10%)"),
    (2.0, False, "vLLM"), (0.5, False, "SGLang"), (0.95, False, "either (within 10%)")])
def test_lean_follows_the_ratio(ratio, lower, expected):
    assert sg.lean(ratio, lower_is_better=lower) == expected


def test_guide_from_saved_results(tmp_path):
    _head_to_head(tmp_path)
    pd.DataFrame({"measure": ["multi-turn: hit rate", "loop that overflows the cache: second-round hit rate"],
                  "vLLM": ["47%", "58%"], "SGLang": ["61%", "3%"]}).to_csv(tmp_path / "prefix_verdict.csv", index=False)
    table = sg.guide(tmp_path, claims.load()).set_index("situation")
    assert list(table.columns) == ["measured", "leaning", "evidence"]
    assert table.loc["one request at a time, latency matters", "leaning"] == "vLLM"  # 100 ms vs 200 ms
    assert "0.50" in table.loc["one request at a time, latency matters", "measured"]
    assert table.loc["many concurrent requests, throughput matters", "leaning"] == "either (within 10%)"
    assert "concurrency 8" in table.loc["many concurrent requests, throughput matters", "measured"]
    assert table.loc["prompts share a prefix (chat, agents, RAG)", "leaning"] == "SGLang"
    assert table.loc["the reused prompts do not fit the KV cache", "leaning"] == "vLLM"
    assert table.loc["multi-turn chat re-sending the conversation", "leaning"] == "vLLM"
    assert all(table.evidence.str.len() > 0)


def test_missing_results_leave_their_rows_out_and_ledger_rows_stay(tmp_path):
    table = sg.guide(tmp_path, claims.load())
    assert set(table.evidence.str.split().str[0]) == {"ledger"}
    ids = {cid for cid, _ in sg.LEDGER_ROWS}
    assert {e.split()[1] for e in table.evidence} == ids
    verdicts = {c.id: c.verdict for c in claims.load().claims}
    for _, row in table.iterrows():
        assert verdicts[row.evidence.split()[1]] in row.measured
