"""What participants should see in each chapter, read from the results the chapters saved (results/<profile>/).

Each `Observation` names one saved result and computes the values a run produced for one thing to look for
(one value per engine, per round or per workload); the page shows their range on every profile that has the
result, and says "no run yet" where a profile has none. Nothing here is typed from a run: a value that is not in
the saved files cannot appear.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from servelab.machine.paths import REPO

RESULTS = REPO / "results"  # the committed results, whatever SERVELAB_RESULTS says


@dataclass(frozen=True)
class Observation:
    label: str  # what to look for, with its unit (English; the page's catalog translates it)
    file: str  # the result, under results/<profile>/
    values: Callable[[Path], list[float]]
    digits: int = 1

    def seen(self, profile: str, results: Path = RESULTS) -> str | None:
        """The range of values the saved run of `profile` shows ("1.2–3.4", or one value), None if it has none."""
        path = results / profile / self.file
        if not path.is_file():
            return None
        values = self.values(path)
        if not values:
            return None
        low, high = (f"{v:.{self.digits}f}" for v in (min(values), max(values)))
        return low if low == high else f"{low}–{high}"


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path)


def _column(name: str, where: Callable[[pd.DataFrame], pd.Series] | None = None) -> Callable[[Path], list[float]]:
    def values(path: Path) -> list[float]:
        table = _csv(path)
        return table.loc[where(table) if where else slice(None), name].dropna().astype(float).tolist()
    return values


def _at_largest(by: str, name: str) -> Callable[[Path], list[float]]:
    """Per engine, `name` in the row where `by` is largest."""
    def values(path: Path) -> list[float]:
        table = _csv(path)
        return [float(rows.loc[rows[by].idxmax(), name]) for _, rows in table.groupby("engine")]
    return values


def _share_true(name: str) -> Callable[[Path], list[float]]:
    return lambda path: [100 * float(_csv(path)[name].astype(str).eq("True").mean())]


def _load_p90(path: Path) -> list[float]:
    """Per engine, p90 TTFT at the highest offered load over p90 TTFT at the lowest."""
    out = []
    for _, rows in _csv(path).groupby("engine"):
        rows = rows.sort_values("offered_req_s")
        out.append(float(rows.p90_ttft_ms.iloc[-1] / rows.p90_ttft_ms.iloc[0]))
    return out


def _pool_against_plan(path: Path) -> list[float]:
    data = json.loads(path.read_text())
    planned = next(v for k, v in data.items() if k.startswith("planned_tokens"))
    return [data["engine_tokens"] / planned]


def _both(first: Callable[[Path], list[float]], other: str) -> Callable[[Path], list[float]]:
    """`first` applied to `path` and to its sibling result `other` (the other engine's file)."""
    return lambda path: first(path) + (first(path.with_name(other)) if path.with_name(other).is_file() else [])


def _ttft_off_on(engine: str) -> Callable[[Path], list[float]]:
    """Per round, the median TTFT with the cache off over the median with it on."""
    def values(path: Path) -> list[float]:
        rows = _csv(path)
        rows = rows[rows.engine == engine]
        medians = rows.groupby(["round", "cache"]).ttft_s.median().unstack("cache")
        return (medians["off"] / medians["on"]).tolist()
    return values


def _chunk(engine: str, measure: str, pick: str, mixed: bool = False) -> Callable[[Path], list[float]]:
    """Per round, `measure` of `engine`'s configuration with the largest or smallest budget (no threshold)."""
    def values(path: Path) -> list[float]:
        rows = _csv(path)
        rows = rows[(rows.engine == engine) & (rows.threshold == 0) & (rows.mixed_chunk == mixed)]
        budget = rows.budget.max() if pick == "largest" else rows.budget.min()
        return rows.loc[rows.budget == budget, measure].astype(float).tolist()
    return values


def _speedup(method: Callable[[str], bool]) -> Callable[[Path], list[float]]:
    """The lowest and highest round's speedup, tasks one at a time, of the first method `method` accepts."""
    def values(path: Path) -> list[float]:
        rows = _csv(path)
        row = rows[rows.method.map(method)]
        if row.empty:
            raise ValueError(f"{path.name}: no method of {', '.join(rows.method)} matches the workshop page's")
        return [float(row.iloc[0][f"{end} round, tasks one at a time"]) for end in ("lowest", "highest")]
    return values


def _ratio_rounds(metric: str) -> Callable[[Path], list[float]]:
    def values(path: Path) -> list[float]:
        rows = _csv(path)
        rows = rows[rows.metric == metric]
        return rows["lowest round"].astype(float).tolist() + rows["highest round"].astype(float).tolist()
    return values


def _leaning_to_an_engine(path: Path) -> list[float]:
    """How many of the selection guide's rows favour an engine (their leaning is "vLLM" or "SGLang")."""
    return [float(_csv(path).leaning.isin(["vLLM", "SGLang"]).sum())]


def _favoured(path: Path) -> list[float]:
    rows = _csv(path)
    rows = rows[rows.metric == "p50_ttft_ms"]
    return [100 * float(rows["favoured in every round"].fillna("").ne("").mean())]


OBSERVATIONS: dict[str, tuple[Observation, ...]] = {
    "00_setup_check": (
        Observation("engine start (s)", "setup_check_engines.csv", _column("start (s)"), 0),
        Observation("one request's decode speed (tokens/s)", "setup_check_engines.csv",
                    _column("decode (tokens/s)")),
        Observation("questions answered with the same greedy tokens (%)", "greedy_agreement.csv",
                    _share_true("same tokens"), 0),
    ),
    "01_serving_basics": (
        Observation("server tokens/s, largest batch against batch 1 (×)", "serving_basics_decode_scaling.csv",
                    _at_largest("batch", "server_gain_vs_batch_1")),
        Observation("one request's speed, largest batch against batch 1 (×)", "serving_basics_decode_scaling.csv",
                    _at_largest("batch", "request_speed_vs_batch_1")),
        Observation("TTFT, longest prompt against shortest (×)", "serving_basics_prefill_decode.csv",
                    _at_largest("prompt_tokens", "ttft_vs_shortest")),
        Observation("ITL, longest prompt against shortest (×)", "serving_basics_prefill_decode.csv",
                    _at_largest("prompt_tokens", "itl_vs_shortest")),
        Observation("p90 TTFT, highest offered load against lowest (×)", "serving_basics_load_curve.csv", _load_p90),
    ),
    "02_kv_cache_memory": (
        Observation("KV tokens the engine built against the formula's (×)", "kv_capacity_check.json",
                    _both(_pool_against_plan, "kv_capacity_check_sglang.json"), 3),
        Observation("KV cache per token of the tables' models in bf16 (KiB)", "kv_bytes_per_token.csv",
                    _column("KV KiB/token (bf16)"), 0),
    ),
    "03_paged_attention": (
        Observation("KV capacity wasted, one slab of the longest length per request (%)", "paging_simulation.csv",
                    _column("wasted_pct", lambda t: t.policy == "max_len"), 0),
        Observation("KV capacity wasted, paged blocks of every size simulated (%)", "paging_simulation.csv",
                    _column("wasted_pct", lambda t: t.policy.str.startswith("paged"))),
        Observation("vLLM preemptions under the small KV budget", "kv_pressure_vllm_timeline.csv",
                    lambda p: [float(_csv(p).evictions.max())], 0),
        Observation("SGLang retractions in the retraction run", "kv_retraction_sglang_timeline.csv",
                    lambda p: [float(_csv(p).evictions.max())], 0),
        Observation("KV memory parallel sampling saves by sharing the prompt (%)", "parallel_sampling_blocks.csv",
                    _column("memory saved by sharing (%)", lambda t: t.n > 1), 0),
    ),
    "04_prefix_caching": (
        Observation("vLLM prefix-cache hit rate, workloads that share a prefix (%)", "prefix_hit_rates_vllm.csv",
                    lambda p: [100 * v for v in _column("hit_rate", lambda t: t.workload != "no_sharing")(p)], 0),
        Observation("SGLang prefix-cache hit rate, workloads that share a prefix (%)", "prefix_hit_rates_sglang.csv",
                    lambda p: [100 * v for v in _column("hit_rate", lambda t: t.workload != "no_sharing")(p)], 0),
        Observation("vLLM few-shot TTFT, cache off against on, per round (×)", "prefix_on_off.csv",
                    _ttft_off_on("vLLM")),
        Observation("SGLang few-shot TTFT, cache off against on, per round (×)", "prefix_on_off.csv",
                    _ttft_off_on("SGLang")),
    ),
    "05_chunked_prefill": (
        Observation("streams' longest stall, vLLM, largest budget, per round (s)", "chunked_prefill_rounds.csv",
                    _chunk("vllm", "longest_stall_s", "largest"), 2),
        Observation("streams' longest stall, vLLM, smallest budget, per round (s)", "chunked_prefill_rounds.csv",
                    _chunk("vllm", "longest_stall_s", "smallest"), 2),
        Observation("long prompt's TTFT, vLLM, largest budget, per round (s)", "chunked_prefill_rounds.csv",
                    _chunk("vllm", "long_ttft_s", "largest")),
        Observation("long prompt's TTFT, vLLM, smallest budget, per round (s)", "chunked_prefill_rounds.csv",
                    _chunk("vllm", "long_ttft_s", "smallest")),
        Observation("streams' longest stall, SGLang without mixed chunk, per round (s)", "chunked_prefill_rounds.csv",
                    _chunk("sglang", "longest_stall_s", "smallest")),
    ),
    "06_speculative_decoding": (
        Observation("prompt lookup (n-gram): decode speedup, one request at a time, rounds (×)",
                    "speculative_summary.csv", _speedup(lambda m: m == "n-gram"), 2),
        Observation("the model as its own draft: decode speedup, rounds (×)", "speculative_summary.csv",
                    _speedup(lambda m: m == "draft: the model itself"), 2),
        Observation("the cheapest draft cut from the model: decode speedup, rounds (×)", "speculative_summary.csv",
                    _speedup(lambda m: m.startswith("draft: first")), 2),
        Observation("answers with the same greedy tokens as without speculation (%)",
                    "speculative_greedy_equality.csv", _share_true("same tokens"), 0),
    ),
    "07_choosing_and_deploying": (
        Observation("vLLM / SGLang p50 TTFT, every run and round (×)", "head_to_head_ratio_rounds.csv",
                    _ratio_rounds("p50_ttft_ms"), 2),
        Observation("vLLM / SGLang output throughput, every run and round (×)", "head_to_head_ratio_rounds.csv",
                    _ratio_rounds("output_throughput"), 2),
        Observation("runs whose p50 TTFT favours the same engine in every round (%)", "head_to_head_ratio_rounds.csv",
                    _favoured, 0),
    ),
    "08_selection_guide": (
        Observation("rows of the selection guide that favour an engine", "selection_guide.csv",
                    _leaning_to_an_engine, 0),
        Observation("rows of the selection guide", "selection_guide.csv", lambda path: [float(len(_csv(path)))], 0),
    ),
}


def observations(chapter: str) -> tuple[Observation, ...]:
    if chapter not in OBSERVATIONS:
        raise ValueError(f"chapter {chapter} has no observations in servelab.book.workshop_results.OBSERVATIONS")
    return OBSERVATIONS[chapter]
