import pytest

from servelab.engines.metrics import Metrics, delta

EXPOSITION = """\
# HELP vllm:prefix_cache_queries Prefix cache queries, in tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 37.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.79e+09
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="182"} 1.0
"""


def test_counter_found_with_or_without_total_suffix():
    m = Metrics.parse(EXPOSITION)
    assert m.value("vllm:prefix_cache_queries") == 37.0
    assert m.value("vllm:prefix_cache_queries_total") == 37.0


def test_labels_filter_and_sum():
    m = Metrics.parse(EXPOSITION)
    assert m.value("vllm:kv_cache_usage_perc", engine="1") == 0.5
    assert m.value("vllm:kv_cache_usage_perc") == 0.75


def test_info_metric_labels():
    info = Metrics.parse(EXPOSITION).labels("vllm:cache_config_info")
    assert int(info["num_gpu_blocks"]) * int(info["block_size"]) == 23296


def test_missing_metric_is_a_clear_keyerror():
    with pytest.raises(KeyError, match="sglang:cache_hit_rate"):
        Metrics.parse(EXPOSITION).value("sglang:cache_hit_rate")


def test_delta_between_scrapes():
    before = Metrics.parse(EXPOSITION)
    after = Metrics.parse(EXPOSITION.replace("} 37.0", "} 50.0"))
    assert delta(before, after, "vllm:prefix_cache_queries") == 13.0
