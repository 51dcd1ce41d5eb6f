"""Chapter 04's caching on/off burst: salts, per-request options, and the run's totals and ratios (no server)."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.engines.client import run_load
from servelab.measure.prefix_cache import salt as ps


def test_salts_are_unique_and_refused_where_vllm_would_refuse_them() -> None:
    salts = ps.unique_salts(5, "off")
    assert len(set(salts)) == 5
    with pytest.raises(ValueError, match="tag 'a/b'"):
        ps.unique_salts(2, "a/b")
    with pytest.raises(ValueError, match="at most 128"):
        ps.unique_salts(1, "x" * 130)
    with pytest.raises(ValueError, match="count must be >= 1"):
        ps.unique_salts(0, "off")


def test_each_request_generates_exactly_its_tokens_and_carries_its_own_salt() -> None:
    on = ps.request_options(2, 4, None)
    assert on == [{"extra_body": {"min_tokens": 4}}] * 2
    off = ps.request_options(2, 4, ["a", "b"])
    assert [o["extra_body"]["cache_salt"] for o in off] == ["a", "b"]
    with pytest.raises(ValueError, match="need 2 different salts"):
        ps.request_options(2, 4, ["a", "a"])
    with pytest.raises(ValueError, match="output_tokens must be >= 1"):
        ps.request_options(2, 0, None)


def test_a_run_is_timed_from_its_first_request_sent_to_its_last_answer() -> None:
    frame = pd.DataFrame({"start_s": [0.5, 0.6], "latency_s": [1.0, 2.9], "completion_tokens": [4, 4],
                          "prompt_tokens": [100, 100], "cached_tokens": [90, 90]})
    totals = ps.summarize(frame, {"queries": 200.0, "hits": 180.0})
    assert totals["seconds"] == pytest.approx(3.0)
    assert totals["requests/s"] == pytest.approx(2 / 3) and totals["output tokens/s"] == pytest.approx(8 / 3)
    assert totals["cached tokens (requests)"] == 180 and totals["cached tokens (counter)"] == 180


def test_the_salted_burst_needs_one_copy_of_its_prompt_per_request_in_whole_blocks() -> None:
    table = pd.DataFrame({"requests": [2, 2, 2, 2], "largest prompt": [890, 880, 890, 890]},
                         index=pd.MultiIndex.from_tuples([(0, "on"), (0, "off"), (1, "off"), (1, "on")],
                                                         names=["round", "cache"]))
    assert ps.kv_needed(table, 4, 128) == 2 * 7 * 128  # 894 tokens: seven blocks of 128 each
    assert ps.kv_needed(table, 4, 1) == 2 * 894
    with pytest.raises(ValueError, match="need unit >= 1 and output_tokens >= 1; got 0 and 4"):
        ps.kv_needed(table, 4, 0)


def test_the_salted_run_sends_the_same_unsalted_warm_up_as_the_cached_one(monkeypatch) -> None:
    sent = []

    def load(server, prompts, **kw):
        sent.append((prompts, kw.get("per_request")))
        return pd.DataFrame({"start_s": [0.0] * len(prompts), "latency_s": [1.0] * len(prompts),
                             "completion_tokens": [kw["max_tokens"]] * len(prompts),
                             "prompt_tokens": [10] * len(prompts), "cached_tokens": [0] * len(prompts)})

    monkeypatch.setattr(ps, "run_load", load)
    monkeypatch.setattr(ps, "flush", lambda server: None)
    monkeypatch.setattr(ps, "counters", lambda server: {"queries": 0.0, "hits": 0.0})
    table = ps.on_off(object(), [{"role": "user", "content": "warm"}], [[{"role": "user", "content": "q"}]] * 2,
                      output_tokens=3, rounds=2)
    warm_ups = [s for s in sent if s[0] == [[{"role": "user", "content": "warm"}]]]
    assert len(warm_ups) == 4 and all(options is None for _, options in warm_ups)  # one per run, unsalted
    salted = ["cache_salt" in options[0]["extra_body"] for prompts, options in sent if len(prompts) == 2]
    assert salted == [False, True, True, False]  # on, off; then off, on: neither always first
    assert table.index.tolist() == [(0, "on"), (0, "off"), (1, "off"), (1, "on")]
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        ps.on_off(object(), [], [], output_tokens=3, rounds=0)


def test_ratios_compare_on_with_off_per_engine_round_by_round() -> None:
    def run(pairs: list[tuple[float, float]], cached_on: int) -> pd.DataFrame:
        rows = {}
        for r, (on_s, off_s) in enumerate(pairs):
            rows[(r, "on")] = {"requests/s": 3 / on_s, "cached tokens (requests)": cached_on,
                               "cached tokens (counter)": cached_on}
            rows[(r, "off")] = {"requests/s": 3 / off_s, "cached tokens (requests)": 0, "cached tokens (counter)": 0}
        table = pd.DataFrame.from_dict(rows, orient="index")
        table.index = pd.MultiIndex.from_tuples(table.index, names=["round", "cache"])
        return table

    table = ps.ratios({"vLLM": run([(1.0, 4.0), (1.0, 3.0), (1.0, 5.0)], 300),
                       "SGLang": run([(2.0, 3.0), (2.0, 1.8)], 320)})
    assert table.loc["vLLM", "requests/s on/off"] == pytest.approx(4.0)
    assert (table.loc["vLLM", "lowest round"], table.loc["vLLM", "highest round"]) == pytest.approx((3.0, 5.0))
    assert bool(table.loc["vLLM", "on ahead in every round"]) is True
    assert bool(table.loc["SGLang", "on ahead in every round"]) is False  # one round has off ahead
    assert table.loc["SGLang", "requests/s on/off"] == pytest.approx((1.5 + 0.9) / 2)
    assert table.loc["SGLang", "cached tokens on"] == 640 and table.loc["vLLM", "cached tokens off"] == 0


def test_per_request_options_need_one_dict_per_prompt() -> None:
    class Nowhere:
        api_url, served_model = "http://127.0.0.1:9/v1", "none"

    with pytest.raises(ValueError, match="per_request needs one dict per prompt: 1 for 2 prompts"):
        run_load(Nowhere(), ["a", "b"], per_request=[{}])


@pytest.mark.parametrize("name", ["gpu-24g", "gpu-80g"])
def test_on_a_gpu_the_salted_burst_is_many_prefills_that_still_fit_the_chapter_kv_budget(name) -> None:
    from servelab.machine import profiles
    from servelab.measure.chapter_servers import c04

    prof = profiles.load(name)
    kv = c04.servers(prof, kv_tokens=None)["vllm"].options["kv_cache_tokens"]
    request = 800  # a few-shot prompt of the chapter's 560 system words and its output, generously tokenized
    size = ps.burst_size(prof, kv, request)
    assert 4 <= size <= 16 and size * -(-request // 16) * 16 <= kv  # vLLM's GPU block: 16 tokens


def test_the_salted_burst_is_two_requests_on_the_cpu_and_bounded_by_its_arguments() -> None:
    from servelab.machine import profiles

    assert ps.burst_size(profiles.load("cpu"), 2304, 700) == 2
    gpu = profiles.load("gpu-80g")
    assert ps.burst_size(gpu, 100_000, 100) == 16 and ps.burst_size(gpu, 1000, 900) == 2
    with pytest.raises(ValueError, match="got 0 and 5"):
        ps.burst_size(gpu, 0, 5)
