"""Launch commands: one KV budget in tokens becomes each engine's own flag, in one place."""

from __future__ import annotations

import pytest

from servelab.engines import launch
from servelab.machine import models, profiles
from servelab.machine.model_shapes import kv_bytes_per_token, served_model_shape

HUB = models.ModelRef("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", local=False)


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_one_budget_in_tokens_becomes_bytes_for_vllm_and_tokens_for_sglang():
    prof = profiles.load("gpu-24g")
    per_token = kv_bytes_per_token(served_model_shape(HUB.source), prof.dtype)
    vllm = launch.command("vllm", prof, HUB, 8000, {"kv_cache_tokens": 4096}).argv
    sglang = launch.command("sglang", prof, HUB, 8000, {"kv_cache_tokens": 4096}).argv
    assert _flag(vllm, "--kv-cache-memory-bytes") == str(4096 * per_token)
    assert _flag(sglang, "--max-total-tokens") == "4096"
    # a budget replaces the memory share the profile would otherwise claim
    assert "--gpu-memory-utilization" not in vllm and "--mem-fraction-static" not in sglang


def test_without_a_budget_vllm_claims_the_profiles_share_and_sglang_its_own():
    prof = profiles.load("gpu-80g")
    vllm = launch.command("vllm", prof, HUB, 8000, {}).argv
    sglang = launch.command("sglang", prof, HUB, 8000, {}).argv
    assert _flag(vllm, "--gpu-memory-utilization") == str(prof.gpu_memory_utilization)
    assert "--mem-fraction-static" not in sglang
    assert "--kv-cache-memory-bytes" not in vllm and "--max-total-tokens" not in sglang


def test_the_budget_follows_a_dtype_override():
    prof = profiles.load("gpu-24g")
    fp32 = launch.command("vllm", prof, HUB, 8000, {"kv_cache_tokens": 100, "dtype": "float32"}).argv
    per_token = kv_bytes_per_token(served_model_shape(HUB.source), "float32")
    assert _flag(fp32, "--dtype") == "float32" and _flag(fp32, "--kv-cache-memory-bytes") == str(100 * per_token)


@pytest.mark.parametrize(("engine", "options", "flag"), [
    ("vllm", {"max_num_seqs": 8}, "--max-num-seqs"), ("vllm", {"max_model_len": 512}, "--max-model-len"),
    ("sglang", {"max_running_requests": 8}, "--max-running-requests"),
    ("sglang", {"context_length": 512}, "--context-length")])
def test_an_option_replaces_the_profiles_own_flag(engine, options, flag):
    argv = launch.command(engine, profiles.load("gpu-24g"), HUB, 8000, options).argv
    assert argv.count(flag) == 1 and _flag(argv, flag) == str(next(iter(options.values())))


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "4096"])
def test_a_bad_budget_is_one_line(bad):
    expected = rf"kv_cache_tokens must be an integer >= 1 \(tokens of KV cache\), got {bad!r}"
    with pytest.raises(ValueError, match=expected):
        launch.kv_budget_flags("vllm", bad, HUB, "bfloat16")
