"""Chapter 07's exercises: scaling efficiency, SGLang's two-node recipe over eight GPUs, who wins which run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from servelab.engines import flags

Cases = dict[str, tuple[tuple[Any, ...], Any]]
METRICS = {"TTFT p50": ("p50_ttft_ms", "lower"), "ITL p50": ("p50_itl_ms", "lower"),
           "throughput": ("output_throughput", "higher")}  # the ratio table's column, and which way favours vLLM


def efficiency_cases(sweep: pd.DataFrame) -> Cases:
    """Exercise 1: per engine and pair of neighbouring concurrencies, throughput ratio over concurrency ratio."""
    cases: Cases = {}
    for engine, rows in sweep.groupby("engine", sort=False):
        rows = rows.sort_values("concurrency")
        levels, tput = [int(c) for c in rows.concurrency], list(rows.output_throughput)
        for i in range(len(levels) - 1):
            cases[f"{engine}, {levels[i]} -> {levels[i + 1]}"] = (
                (engine, levels[i], levels[i + 1]), (tput[i + 1] / tput[i]) / (levels[i + 1] / levels[i]))
    return cases


def _option(argv: Sequence[str], flag: str, default: int) -> int | None:
    if flag not in argv:
        return default
    at = list(argv).index(flag)
    try:
        return int(argv[at + 1])
    except (IndexError, ValueError):
        return None


def recipe_facts(answer: Callable[[], Sequence[str] | None]) -> Callable[[], dict[str, Any] | None]:
    """Exercise 2, the check's view of a command: whether SGLang's own parser accepts it, and its tensor- and
    pipeline-parallel sizes (None while the answer gives no command)."""
    def facts() -> dict[str, Any] | None:
        argv = answer()
        if argv is None or argv is Ellipsis:
            return None
        argv = [str(a) for a in argv]
        return {"SGLang's parser accepts it": flags.check("sglang", argv).ok,
                "--tp-size": _option(argv, "--tp-size", 1), "--pp-size": _option(argv, "--pp-size", 1)}
    return facts


def recipe_cases() -> Cases:
    return {"": ((), {"SGLang's parser accepts it": True, "--tp-size": 8, "--pp-size": 1})}


def favours_vllm(ratio: pd.DataFrame) -> pd.DataFrame:
    """Per run and metric, whether the median round favours vLLM (`ratio`: vLLM over SGLang)."""
    return pd.DataFrame({m: (ratio[col] < 1) if way == "lower" else (ratio[col] > 1)
                         for m, (col, way) in METRICS.items()})


def wins_cases(ratio: pd.DataFrame) -> Cases:
    """Exercise 3: per metric, the runs whose median round favours vLLM."""
    return {metric: ((metric,), int(count)) for metric, count in favours_vllm(ratio).sum().items()}
