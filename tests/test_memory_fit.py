"""Will a launch fit a GPU class? The GPU classes validate, vLLM's rule is arithmetic checked here, and SGLang's
memory share comes from its own resolution in its venv (engine_venv), with only the GPU's capacity faked."""

from __future__ import annotations

import pytest

from servelab.engines import launch, memory_fit
from servelab.engines.engine_side import script
from servelab.machine import engine_envs, models, profiles

CLASSES = {g.key: g for g in memory_fit.gpu_classes()}
L4, H100 = CLASSES["l4"], CLASSES["h100-80gb"]


def argv(engine: str, profile: str, model: str | None = None, **options) -> list[str]:
    """The launch command servelab builds for `profile`, with a hub model (default: Qwen2.5-7B, which the tests'
    sizes are written for, whatever model the profile serves)."""
    prof = profiles.load(profile)
    source = model or "Qwen/Qwen2.5-7B-Instruct"
    return launch.command(engine, prof, models.ModelRef(source=source, served_name=source, local=False), 8000,
                          options).argv


def test_the_gpu_classes_are_the_ones_the_profiles_name():
    assert {g.name for g in memory_fit.gpu_classes("gpu-24g")} == {
        "NVIDIA L4", "NVIDIA A10", "NVIDIA GeForce RTX 4090"}
    assert {g.name for g in memory_fit.gpu_classes("gpu-80g")} == {
        "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    assert memory_fit.gpu_classes("cpu") == []
    for name in profiles.names():  # each GPU class's memory meets its profile's floor
        for gpu in memory_fit.gpu_classes(name):
            assert gpu.memory_mib / 1024 >= profiles.load(name).min_gpu_gib
    with pytest.raises(ValueError, match="unknown profile 'gpu-7g'; accepted: cpu"):
        memory_fit.gpu_classes("gpu-7g")


@pytest.mark.parametrize(("table", "message"), [
    ('[l4]\nname = "NVIDIA L4"\nmemory_mib = "24GB"\nprofiles = ["gpu-24g"]\n',
     "gpu_classes.toml: [l4]: memory_mib is '24GB'; accepted: an integer number of MiB > 0"),
    ('[l4]\nname = "NVIDIA L4"\nmemory_mib = 23034\nprofiles = ["gpu-48g"]\n',
     "gpu_classes.toml: [l4]: profiles is ['gpu-48g']; accepted: a non-empty list of profile names (cpu, "),
    ('[l4]\nname = "NVIDIA L4"\nmemory_mib = 23034\nprofiles = ["gpu-24g"]\ncolour = "green"\n',
     "gpu_classes.toml: [l4]: unknown key 'colour'; accepted: name, memory_mib, profiles"),
    ('[l4]\nmemory_mib = 23034\nprofiles = ["gpu-24g"]\n', "gpu_classes.toml: [l4]: name is None; accepted:"),
])
def test_a_bad_gpu_class_is_one_clear_line(tmp_path, table, message):
    (tmp_path / "gpu_classes.toml").write_text(table)
    with pytest.raises(memory_fit.BadGpuClass) as err:
        memory_fit.gpu_classes(folder=tmp_path)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_vllm_7b_fits_an_80g_card_and_72b_does_not_fit_24g():
    small = memory_fit.judge("vllm", argv("vllm", "gpu-80g", "Qwen/Qwen2.5-7B-Instruct"), H100)
    assert small.fits and small.problem == "" and small.headroom_gib > 40
    assert small.weights_gib == pytest.approx(7.61e9 * 2 / 2**30)
    assert small.fraction == 0.9 and small.budget_gib == pytest.approx(0.9 * small.capacity_gib, rel=1e-6)
    big = memory_fit.judge("vllm", argv("vllm", "gpu-24g", "Qwen/Qwen2.5-72B-Instruct"), L4)
    assert not big.fits and big.problem.startswith("gpu-24g on NVIDIA L4: vLLM needs 135.4 GiB weights + ")
    assert "(0.90 x 21.5 GiB)" in big.problem and big.headroom_gib < -100
    assert big.reserve_source.startswith("our estimate") and big.reserve_gib == memory_fit.VLLM_RESERVE_GIB


def test_a_vllm_kv_budget_too_big_for_the_card_fails_naming_the_gpu():
    command = argv("vllm", "gpu-24g", kv_cache_tokens=200_000)  # 200k tokens x 56 KiB = 10.7 GiB of KV
    assert "--kv-cache-memory-bytes" in command and "--gpu-memory-utilization" not in command
    result = memory_fit.judge("vllm", command, L4)
    assert not result.fits and result.fraction is None and result.kv_gib == pytest.approx(200_000 * 57344 / 2**30)
    assert result.problem.startswith("gpu-24g on NVIDIA L4: vLLM needs 14.2 GiB weights + 10.7 GiB KV + ")
    assert "free at start" in result.problem and "--kv-cache-memory-bytes" in result.rule
    assert memory_fit.judge("vllm", argv("vllm", "gpu-24g", kv_cache_tokens=20_000), L4).fits


@pytest.mark.parametrize(("change", "message"), [
    (["--gpu-memory-utilization", "0.5"], "vLLM needs 14.2 GiB weights + 0.4 GiB KV + 2.5 GiB reserve > "),
    (["--gpu-memory-utilization", "0.99"], "vLLM refuses to start: 21.0 GiB free at start < gpu_memory_utilization"),
    (["--kv-cache-memory-bytes", str(4096 * 57344)], "cannot hold one 8192-token request"),
])
def test_controls_that_must_fail(change, message):
    """The checker can say no: a share too small for the weights, one larger than the free memory (vLLM's own
    request_memory refuses it), and a KV budget that cannot hold one full-length request."""
    result = memory_fit.judge("vllm", argv("vllm", "gpu-24g") + change, L4)
    assert not result.fits and message in result.problem, result.problem


def test_a_draft_model_adds_its_weights_and_kv():
    plain = memory_fit.judge("vllm", argv("vllm", "gpu-24g"), L4)
    spec = memory_fit.judge("vllm", argv("vllm", "gpu-24g", speculative_config={"model": "Qwen/Qwen2.5-0.5B-Instruct",
                                                                                  "num_speculative_tokens": 4}), L4)
    assert spec.weights_gib - plain.weights_gib == pytest.approx(0.49e9 * 2 / 2**30)
    assert spec.min_kv_gib > plain.min_kv_gib and spec.headroom_gib < plain.headroom_gib


def test_what_it_does_not_check_is_refused_not_guessed():
    with pytest.raises(ValueError, match="one model on one GPU; got model 'Qwen/Qwen2.5-7B-Instruct', tensor "):
        memory_fit.judge("vllm", argv("vllm", "gpu-24g") + ["--tensor-parallel-size", "4"], L4)
    with pytest.raises(ValueError, match="needs its resolution plan"):
        memory_fit.judge("sglang", argv("sglang", "gpu-24g"), L4)


def test_sglang_rule_given_a_resolution():
    """SGLang's arithmetic on a resolution record of the shape sgl_memory_plan.py answers (the numbers are SGLang's
    for gpu-24g's command on an L4, from the engine_venv test below)."""
    plan = {"ok": True, "error": "", "resolved": {"mem_fraction_static": 0.701, "context_length": 8192,
                                                  "max_total_tokens": None}, "own_mem_fraction_static": 0.701}
    result = memory_fit.judge("sglang", argv("sglang", "gpu-24g"), L4, plan=plan)
    assert result.fits and result.engine_fraction == 0.701 and result.reserve_gib == pytest.approx(0.299 * 23034 / 1024)
    assert result.kv_gib == pytest.approx(result.budget_gib - result.weights_gib)
    tokens = {**plan, "resolved": {**plan["resolved"], "max_total_tokens": 200_000}}
    over = memory_fit.judge("sglang", argv("sglang", "gpu-24g"), L4, plan=tokens)
    assert not over.fits and over.problem.startswith("gpu-24g on NVIDIA L4: SGLang needs 14.2 GiB weights + 10.7 GiB")
    assert "it would cap the pool at" in over.problem


@pytest.fixture(scope="module")
def sglang_fits(require_engine):
    require_engine("sglang")
    seven, big = argv("sglang", "gpu-24g"), argv("sglang", "gpu-24g", "Qwen/Qwen2.5-72B-Instruct")
    items = [("sglang", seven, L4), ("sglang", seven, H100), ("sglang", big, L4),
             ("sglang", seven + ["--mem-fraction-static", "0.9"], L4),
             ("sglang", argv("sglang", "gpu-24g", kv_cache_tokens=200_000), L4),
             ("sglang", seven + ["--no-such-flag"], L4)]
    return memory_fit.fit_many(items)


@pytest.mark.engine_venv
def test_sglang_picks_a_smaller_share_on_a_24g_card_than_on_80g(sglang_fits):
    on_l4, on_h100 = sglang_fits[:2]
    assert on_l4.fits and on_h100.fits
    assert on_l4.engine_fraction < 0.9 and on_l4.engine_fraction != on_h100.engine_fraction
    assert on_l4.fraction == on_l4.engine_fraction  # the command gives none: SGLang's own is the one used
    # handle_gpu_memory_settings keeps at least 10 GiB out of the static share on cards over 60 GiB.
    assert on_h100.engine_fraction <= round((H100.memory_mib - 10 * 1024) / H100.memory_mib, 3)
    assert on_l4.reserve_source.startswith("SGLang's own")


@pytest.mark.engine_venv
def test_sglang_72b_does_not_fit_24g_and_a_given_share_is_kept(sglang_fits):
    big, given = sglang_fits[2], sglang_fits[3]
    assert not big.fits and big.problem.startswith("gpu-24g on NVIDIA L4: SGLang needs 135.4 GiB weights")
    assert given.fraction == 0.9 and given.engine_fraction == sglang_fits[0].engine_fraction
    assert f"it would pick {given.engine_fraction}" in given.note


@pytest.mark.engine_venv
def test_sglang_kv_budget_too_big_and_a_refused_flag_both_fail(sglang_fits):
    budget, refused = sglang_fits[4], sglang_fits[5]
    assert not budget.fits and budget.problem.startswith("gpu-24g on NVIDIA L4: SGLang needs 14.2 GiB weights + ")
    assert not refused.fits and "SGLang refuses these arguments" in refused.problem
    assert "--no-such-flag" in refused.problem


@pytest.mark.engine_venv
def test_vllm_constants_are_the_installed_vllm_s(require_engine):
    require_engine("vllm")
    answer = engine_envs.run_script(engine_envs.parser_env("vllm").python, script("vllm_memory_defaults.py"))
    assert answer["fields"]["CacheConfig.gpu_memory_utilization"]["default"] == memory_fit.VLLM_DEFAULT_UTILIZATION
    assert answer["request_memory_is_total_times_fraction"]
