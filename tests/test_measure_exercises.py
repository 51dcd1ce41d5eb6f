"""The exercises' expected answers (servelab/measure/exercises/), on small data whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from servelab.book import exercise_check
from servelab.measure.chunked_prefill.live import scenario_for
from servelab.measure.exercises import (
    choosing_and_deploying,
    chunked_prefill,
    kv_cache_memory,
    paged_attention,
    prefix_caching,
    serving_basics,
    speculative_decoding,
)
from servelab.sim import kv_memory
from servelab.sim.chunked_prefill import CostModel


def _all_right(answer, cases) -> bool:
    found = exercise_check.verdicts(answer, cases)
    return found is not None and all(v.right for v in found)


def test_serving_basics():
    cases = serving_basics.roofline_cases()
    assert cases["batch 1"][1] == pytest.approx(3.35e12 / 14e9)
    assert _all_right(lambda b, c: b * 3.35e12 / (14e9 + b * c * 131072), cases)
    prefill = pd.DataFrame({"engine": ["vllm", "vllm", "sglang"], "prompt_tokens": [10, 110, 10],
                            "ttft_ms": [20.0, 120.0, 5.0]})
    scaling = pd.DataFrame({"engine": ["vllm", "vllm"], "batch": [1, 5], "request_tok_s": [100.0, 50.0]})
    cost = serving_basics.fitted_cost(prefill, scaling)
    assert (cost.prefill_token_s, cost.decode_s, cost.step_s) == pytest.approx((0.001, 0.0025, 0.0075))
    slo = {"ttft_slo_s": 0.5, "tpot_slo_s": 0.05}
    point = serving_basics.cap_point(2.0, 4, cost, slo, seed=0)
    assert set(point) == {"ttft_p90_s", "tpot_p50_s"}
    assert len(serving_basics.cap_cases(cost, slo, 0)) == 9


def test_kv_cache_memory():
    shapes = kv_memory.known_shapes()
    cases = kv_cache_memory.gqa_cases(shapes)
    assert cases["Llama-3.1-70B-Instruct"][1] == pytest.approx(8.0)
    assert kv_cache_memory.fp8_gain(shapes["Qwen/Qwen2.5-7B-Instruct"], 24, 8192, 0.9) > 0
    kept = kv_cache_memory.kept_cases(2 * 4096 + 64, 128)
    assert kept["budget 8256, block 128"][1] == 8192 and _all_right(lambda b, s: b // s * s, kept)


def test_paged_attention():
    sim = pd.DataFrame({"block_size": [32, 16, 8, 4], "wasted_pct": [6.0, 3.0, 1.5, 0.7],
                        "mean_batch": [10.0, 12.0, 13.0, 12.9]},
                       index=["paged:32", "paged:16", "paged:8", "paged:4"])
    assert paged_attention.waste_answer(sim) == {"block sizes": [4, 8], "mean batch keeps growing": False}
    assert paged_attention.saving_pct(32, 0, 4, 16) == pytest.approx(75.0)  # only the prompt: 1 copy of 4
    assert paged_attention.never_preempts([16], [1], 16) == 2 * 16  # one full block and the null block
    assert len(paged_attention.saving_cases(60, 512, [1, 2, 4], [16, 128])) == 4


def test_prefix_caching():
    shared = list(range(40))
    turns = [shared, shared + list(range(100, 120))]
    cases = prefix_caching.extra_prefill_cases(turns, 16, capacity=1000)
    assert cases["SGLang"][1][0] == 0 and set(cases) == {"SGLang", "vLLM, block 16", "vLLM, block 128"}
    budget = prefix_caching.budget_cases([shared, list(range(50, 90)), shared], 2, 16, limit=1000)
    assert budget["SGLang"][1] is not None and budget["vLLM"][1] % 16 == 0
    rates = pd.DataFrame({"vLLM": [0.2], "SGLang": [0.4]}, index=["repeat"])
    gap = prefix_caching.gap_cases(rates, {"repeat": turns}, 16, capacity=1000)
    assert list(gap) == ["repeat, block 128"]


def test_chunked_prefill():
    cost = CostModel(step_s=0.01, prefill_token_s=0.0005, decode_s=0.001, context_token_s=0.0)
    scenario = scenario_for(512, 32, streams=2, stream_prompt_tokens=16, long_prompt_fraction=0.5)
    sizes = [32, 128]
    assert chunked_prefill.gap_ratio(scenario, sizes, cost, 30) == pytest.approx(1.0, rel=0.1)
    assert chunked_prefill.threshold_effect(lambda: ..., scenario, sizes, cost)() is None
    doubled = chunked_prefill.doubled_cases(512, sizes, cost, streams=2, stream_prompt_tokens=16,
                                            long_prompt_fraction=0.5)
    assert set(doubled["4 streams"][1]) == {"p90 gap ratio", "long TTFT ratio"}
    assert list(chunked_prefill.stall_cases(scenario, sizes, cost)) == ["chunk 32", "chunk 128"]


def test_speculative_decoding():
    assert speculative_decoding.break_even_alpha(1, 0.5, lambda n: 1.0) == pytest.approx(0.5)
    assert speculative_decoding.break_even_alpha(1, 2.0, lambda n: 1.0) is None
    sweep = pd.DataFrame({"draft layers": [2, 4, 6], "agreement": [0.2, 0.55, 0.8]})
    assert speculative_decoding.half_agreement_cases(sweep) == {"draft layers": ((), 4)}
    assert speculative_decoding.half_agreement_cases(None) == {}
    best = speculative_decoding.best_k(100.0, 60.0, np.array([0.9, 0.8, 0.7]), 3, 1, lambda n: 1.0)
    assert best == 3  # free drafts and a flat verification: the longest draft wins


def test_choosing_and_deploying():
    sweep = pd.DataFrame({"engine": ["vllm"] * 3, "concurrency": [1.0, 4.0, 8.0],
                          "output_throughput": [10.0, 20.0, 30.0]})
    cases = choosing_and_deploying.efficiency_cases(sweep)
    assert cases["vllm, 1 -> 4"][1] == pytest.approx(0.5) and cases["vllm, 4 -> 8"][1] == pytest.approx(0.75)
    ratio = pd.DataFrame({"p50_ttft_ms": [0.5, 2.0], "p50_itl_ms": [0.9, 0.8], "output_throughput": [1.5, 0.9]})
    assert {m: c[1] for m, c in choosing_and_deploying.wins_cases(ratio).items()} == {
        "TTFT p50": 1, "ITL p50": 2, "throughput": 1}
    assert choosing_and_deploying._option(["--tp-size", "8"], "--tp-size", 1) == 8
    assert choosing_and_deploying._option(["x"], "--pp-size", 1) == 1
    assert choosing_and_deploying.recipe_facts(lambda: ...)() is None  # no parser call for an unanswered stub
