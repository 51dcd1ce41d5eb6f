"""Chapter 04's calculations on token ids (servelab/measure/prefix_cache/analysis.py): fast, no engine."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.measure.prefix_cache.analysis import (
    block_size_sweep,
    concurrent_fit,
    eviction_sweep,
    extra_prefill,
    gap_table,
    hit_rate,
    on_off_ttft,
    other_block_size,
    smallest_budget,
    verdict_table,
    vllm_budget_for,
)
from servelab.measure.prefix_cache.live import predict_hits

SHARED = list(range(1000, 1100))  # 100 shared tokens
TURNS = [SHARED[:40], SHARED[:40] + [1] * 30, SHARED[:40] + [1] * 30 + [2] * 25]


def test_block_size_sweep_finds_less_with_bigger_blocks_and_most_at_one_token():
    prompts = [SHARED + [1], SHARED + [2]]
    sweep = block_size_sweep({"pair": prompts}, [1, 16, 64], capacity=4096).set_index("block size")["hit rate"]
    assert sweep[1] == pytest.approx(100 / 202) and sweep[16] == pytest.approx(96 / 202)
    assert sweep[64] == pytest.approx(64 / 202)


def test_eviction_sweep_loses_the_second_round_once_the_loop_overflows():
    docs = [[d * 1000 + i for i in range(100)] for d in range(4)]
    loop = docs + [d + [7] for d in docs]
    sweep = eviction_sweep(loop, {"tree": ("radix", 250, 1)})
    rate = sweep.set_index("documents")["second-round hit rate"]
    assert rate[1] > 0.9 and rate[2] > 0.9 and rate[3] == 0 and rate[4] == 0
    assert sweep["working set / capacity"].is_monotonic_increasing
    with pytest.raises(ValueError, match="every document twice"):
        eviction_sweep(loop[:-1], {"tree": ("radix", 250, 1)})


def test_smallest_budget_is_the_least_capacity_that_finds_everything():
    docs = [[d * 1000 + i for i in range(100)] for d in range(3)]
    loop = docs + [d + [7] for d in docs]
    need = smallest_budget("radix", loop, 3, limit=10_000)
    full = sum(predict_hits("radix", loop, capacity=10_000)[3:])
    assert sum(predict_hits("radix", loop, capacity=need)[3:]) == full
    assert sum(predict_hits("radix", loop, capacity=need - 1)[3:]) < full
    blocks = smallest_budget("block", loop, 3, block_size=16, limit=10_000)
    assert blocks % 16 == 0 and vllm_budget_for(blocks, 16) == blocks + 16


@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_the_exercises_keep_one_column_per_block_size_even_at_16(block_size):
    """On a GPU vLLM's block is 16: the comparison must then use another size, not the same one twice."""
    workloads = {"multi_turn": TURNS, "pair": [SHARED + [1], SHARED + [2]]}
    rates = pd.DataFrame({"vLLM": [hit_rate("block", w, block_size=block_size, capacity=4096)
                                   for w in workloads.values()],
                          "SGLang": [hit_rate("radix", w, capacity=4096) for w in workloads.values()]},
                         index=list(workloads))
    gaps = gap_table(rates, workloads, block_size, capacity=4096)
    assert list(gaps.columns) == ["measured", "simulated"] and gaps.attrs["other"] != block_size
    assert gaps.attrs["other"] == other_block_size(block_size) and (gaps >= 0).all().all()
    other = other_block_size(block_size)
    extra = extra_prefill(TURNS, {"SGLang": ("radix", 1), f"vLLM, block {other}": ("block", other),
                                  f"vLLM, block {block_size}": ("block", block_size)}, capacity=4096)
    assert extra.shape == (3, 3) and (extra["SGLang"] == 0).all()
    assert (extra.iloc[1:, 1:] > 0).any().any()


@pytest.mark.parametrize(("cache", "size"), [("radix", 1), ("block", 16)])
def test_sharing_a_prefix_fits_more_requests_at_once(cache, size):
    shared = SHARED * 4  # 400 tokens
    with_sharing = concurrent_fit(shared, 20, 12, cache=cache, capacity=1024, block_size=size)
    without = concurrent_fit(shared, 20, 12, cache=cache, capacity=1024, block_size=size, sharing=False)
    assert without == 2  # 420 tokens each: two fit in 1024
    # 400 shared + 20 per request: (1024 - 400) // 20 = 31 would fit, so all 12 do; blocks:
    # 25 shared blocks of 16 + 2 per request (the question and the shared prefix's tail share none)
    assert with_sharing == 12
    assert concurrent_fit(shared, 20, 40, cache=cache, capacity=1024, block_size=size) == (31 if cache == "radix"
                                                                                         else (64 - 25) // 2)
    with pytest.raises(ValueError, match="unknown cache 'lru'"):
        concurrent_fit(shared, 20, 2, cache="lru", capacity=1024)


def test_on_off_ttft_gives_one_ratio_per_round_and_their_range():
    pairs = pd.DataFrame({"round": [0, 0, 0, 0, 1, 1, 1, 1], "cache": ["off", "on"] * 4,
                          "ttft_s": [2.0, 0.5, 2.2, 0.5, 1.8, 0.6, 1.8, 0.6],
                          "cached_tokens": [0, 700] * 4, "prompt_tokens": [800] * 8})
    got = on_off_ttft(pairs)
    assert got["rounds"] == 2 and got["pairs per round"] == 2
    assert got["lowest round"] == pytest.approx(3.0) and got["highest round"] == pytest.approx(4.2)
    assert got["TTFT ratio off/on"] == pytest.approx(3.6) and got["on ahead in every round"] is True
    assert got["share of tokens prefilled"] == pytest.approx(100 / 800)
    slow = pairs.assign(ttft_s=[2.0, 0.5, 2.2, 0.5, 0.6, 1.8, 0.6, 1.8])  # round 1: the cached requests slower
    assert on_off_ttft(slow)["on ahead in every round"] is False
    with pytest.raises(ValueError, match="need requests with the cache on and off, got 4 and 0"):
        on_off_ttft(pairs[pairs.cache == "on"])


def test_verdict_table_lays_out_every_measure_per_engine():
    rates = pd.DataFrame({"vLLM": [0.6, 0.5, 0.65], "SGLang": [0.7, 0.6, 0.72]},
                         index=["agent_tree", "multi_turn", "few_shot"])
    table = verdict_table(rates, {"vLLM": 0.58, "SGLang": 0.03},
                          {"vLLM, fcfs": 0.8, "SGLang, fcfs": 0.25, "SGLang, lpm": 0.97},
                          {e: {"TTFT ratio off/on": r, "lowest round": r - 0.5, "highest round": r + 0.25}
                           for e, r in (("vLLM", 6.8), ("SGLang", 3.8))})
    assert list(table.columns) == ["vLLM", "SGLang"] and len(table) == 6
    assert table.loc["agent tree: hit rate", "SGLang"] == "70%"
    assert table.loc["burst, small cache: reusers' prompt tokens cached", "SGLang"] == "25% (fcfs), 97% (lpm)"
