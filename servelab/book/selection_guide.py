"""Chapter 06's selection guide: a decision table computed from the book's saved measurements and the ledger.

Each row is one situation a reader may be in, what this book measured about it (read from
results/<profile>/*.csv of chapters 03-06, or a ledger verdict), the leaning that follows, and where
the evidence is. Nothing is typed: a row whose results are not saved on this profile says so, and a
leaning is chosen by comparing the measured numbers (within TIE of each other counts as no difference).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from servelab.book import claims

TIE = 0.10  # ratios within 10% of 1 lean to neither engine: single runs on a shared machine
NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def lean(ratio: float, lower_is_better: bool = True) -> str:
    """Which engine a vLLM/SGLang ratio favours, or 'either' within TIE."""
    if abs(ratio - 1) <= TIE:
        return "either (within 10%)"
    vllm_wins = ratio < 1 if lower_is_better else ratio > 1
    return "vLLM" if vllm_wins else "SGLang"


def _csv(folder: Path, name: str) -> pd.DataFrame | None:
    path = folder / f"{name}.csv"
    return pd.read_csv(path) if path.is_file() else None


def _percent(text: str) -> float:
    return float(str(text).split("%")[0]) / 100


def _head_to_head(folder: Path) -> list[dict]:
    table = _csv(folder, "head_to_head")
    if table is None:
        return []
    wide = table.set_index(["run", "engine"]).unstack("engine")
    runs = table[table.engine == "vllm"]
    light = runs[runs.workload == "random"].sort_values("concurrency").iloc[0].run
    heavy = runs[runs.workload == "random"].sort_values("concurrency").dropna(subset=["concurrency"]).iloc[-1].run
    ttft = wide.loc[light, ("p50_ttft_ms", "vllm")] / wide.loc[light, ("p50_ttft_ms", "sglang")]
    itl = wide.loc[light, ("p50_itl_ms", "vllm")] / wide.loc[light, ("p50_itl_ms", "sglang")]
    thr = wide.loc[heavy, ("output_throughput", "vllm")] / wide.loc[heavy, ("output_throughput", "sglang")]
    rows = [{"situation": "one request at a time, latency matters",
             "measured": f"{light}: median TTFT vLLM/SGLang {ttft:.2f}, median ITL {itl:.2f}",
             "leaning": lean(ttft), "evidence": "chapter 06 'Head-to-head'; ledger throughput-vs-latency-split"},
            {"situation": "many concurrent requests, throughput matters",
             "measured": f"{heavy}: output tokens/s vLLM/SGLang {thr:.2f}",
             "leaning": lean(thr, lower_is_better=False),
             "evidence": "chapter 06 'Head-to-head'; ledger throughput-vs-latency-split"}]
    for workload, situation in (("multi_turn", "multi-turn chat re-sending the conversation"),
                                ("long_prompt", "long prompts (a quarter of the context window)")):
        run = runs[runs.workload == workload]
        if not run.empty:
            r = run.iloc[0].run
            ratio = wide.loc[r, ("p50_e2el_ms", "vllm")] / wide.loc[r, ("p50_e2el_ms", "sglang")]
            rows.append({"situation": situation, "measured": f"{r}: median request latency vLLM/SGLang {ratio:.2f}",
                         "leaning": lean(ratio), "evidence": "chapter 06 'Head-to-head'"})
    return rows


def _prefix(folder: Path) -> list[dict]:
    verdict = _csv(folder, "prefix_verdict")
    if verdict is None:
        return []
    v = verdict.set_index("measure")
    out = []
    for measure, situation in (("multi-turn: hit rate", "prompts share a prefix (chat, agents, RAG)"),
                               ("loop that overflows the cache: second-round hit rate",
                                "the reused prompts do not fit the KV cache")):
        if measure in v.index:
            hv, hs = _percent(v.loc[measure, "vLLM"]), _percent(v.loc[measure, "SGLang"])
            out.append({"situation": situation, "measured": f"{measure}: vLLM {hv:.0%}, SGLang {hs:.0%}",
                        "leaning": lean(hv / hs, lower_is_better=False) if hs else "vLLM",
                        "evidence": "chapter 03 (results prefix_verdict.csv); ledger guide-vllm-for-rag"})
    return out


def _chunked(folder: Path) -> list[dict]:
    live = _csv(folder, "chunked_prefill_live")
    if live is None:
        return []
    sgl = live[live.engine == "sglang"]
    plain, mixed = sgl[~sgl.mixed_chunk.astype(bool)], sgl[sgl.mixed_chunk.astype(bool)]
    vllm = live[(live.engine == "vllm") & (live.threshold == 0)]
    if plain.empty or mixed.empty or vllm.empty:
        return []
    small = plain.budget.min()
    p, m = plain[plain.budget == small].iloc[0], mixed[mixed.budget == small].iloc[0]
    v = vllm[vllm.budget == vllm.budget.min()].iloc[0]
    return [{"situation": "long prompts arrive while other users stream",
             "measured": (f"streams' longest stall / long prompt's TTFT: vLLM {v.longest_stall_s / v.long_ttft_s:.2f}, "
                          f"SGLang {p.longest_stall_s / p.long_ttft_s:.2f} by default, "
                          f"{m.longest_stall_s / m.long_ttft_s:.2f} with --enable-mixed-chunk"),
             "leaning": "vLLM as it comes; SGLang with --enable-mixed-chunk",
             "evidence": "chapter 04 (results chunked_prefill_live.csv)"}]


def _speculative(folder: Path) -> list[dict]:
    summary = _csv(folder, "speculative_summary")
    if summary is None:
        return []
    one, many = "speedup, 1 request(s)", "speedup, 16 requests"
    if one not in summary or many not in summary:
        return []
    best = summary.loc[summary[one].idxmax()]
    return [{"situation": "speculative decoding to cut latency",
             "measured": f"best here: {best.method}, speedup {best[one]:.2f} at 1 request, {best[many]:.2f} at 16",
             "leaning": "either engine; measure at your own batch size",
             "evidence": "chapter 05 (results speculative_summary.csv)"}]


LEDGER_ROWS = (("guide-sglang-for-json", "structured (JSON) output"),
               ("guide003-vllm-under-memory-pressure", "little GPU memory"),
               ("sglang-no-multinode-docs", "the model needs more than one node"))


def _ledger(ledger: claims.Ledger) -> list[dict]:
    by_id = {c.id: c for c in ledger.claims}
    return [{"situation": situation, "measured": f"the articles' advice is {by_id[cid].verdict}: {by_id[cid].truth}",
             "leaning": "either", "evidence": f"ledger {cid}"} for cid, situation in LEDGER_ROWS if cid in by_id]


SOURCES: tuple[Callable[[Path], list[dict]], ...] = (_head_to_head, _prefix, _chunked, _speculative)


def guide(folder: Path, ledger: claims.Ledger | None = None) -> pd.DataFrame:
    """The decision table from the results saved in `folder` (results/<profile>) and the ledger."""
    rows = [row for source in SOURCES for row in source(folder)]
    rows += _ledger(ledger or claims.load())
    return pd.DataFrame(rows, columns=["situation", "measured", "leaning", "evidence"])
