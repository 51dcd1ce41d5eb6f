"""The GPU profiles' code paths, run on a machine set up as a GPU profile's would be (`gpu_machine` in conftest):
only the GPU is absent, faked at nvidia-smi; everything above it is servelab's and the engines' own code."""

from __future__ import annotations

import pytest

from servelab.engines import flags
from servelab.machine import engine_envs, hardware, models, profiles

GPU_PROFILES = [n for n in profiles.names() if profiles.load(n).device == "cuda"]


@pytest.mark.engine_venv
def test_the_fake_gpu_is_what_the_hardware_probe_sees(gpu_machine):
    gpu_machine(gpu="NVIDIA H100 80GB HBM3", mib=81559)
    assert [g.name for g in hardware.gpus()] == ["NVIDIA H100 80GB HBM3"]
    assert profiles.detect() == "gpu-80g"


@pytest.mark.engine_venv
def test_flag_checks_use_the_gpu_venvs_where_only_they_are_set_up(gpu_machine):
    gpu_machine()
    assert not engine_envs.get("vllm-cpu").is_ready() and engine_envs.get("vllm-gpu").is_ready()
    for engine in ("vllm", "sglang"):
        assert engine_envs.parser_env(engine).name == f"{engine}-gpu"
    (verdict,) = flags.check_many("vllm", [["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "8"]])
    assert verdict.ok, verdict.error


@pytest.mark.engine_venv
def test_no_gpu_profile_command_needs_the_cpu_model(gpu_machine):
    """Chapter 00 checks every profile's commands; on a GPU machine the cpu profile's local model was never
    converted (models.resolve would raise ModelMissing), so those are left out and named, not crashed on."""
    gpu_machine()
    with pytest.raises(models.ModelMissing):
        models.resolve(profiles.load("cpu").model)
    commands = flags.profile_commands()
    assert {name for name, _, _ in commands} == set(GPU_PROFILES)
    assert list(flags.unchecked_profiles()) == ["cpu"]


def test_a_missing_engine_venv_names_the_release_and_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "empty"))
    with pytest.raises(engine_envs.EngineEnvMissing) as err:
        engine_envs.parser_env("vllm", "vllm-gpu")
    assert "vllm 0.32.0" in str(err.value) and "setup --env vllm-gpu" in str(err.value)


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_sglang_chooses_its_own_memory_share_on_a_gpu_profile(name):
    from servelab.engines import launch

    prof = profiles.load(name)
    model = models.ModelRef(source=prof.model, served_name=prof.model, local=False)
    sglang = launch.command("sglang", prof, model, 8000, {}).argv
    vllm = launch.command("vllm", prof, model, 8000, {}).argv
    assert "--mem-fraction-static" not in sglang
    assert vllm[vllm.index("--gpu-memory-utilization") + 1] == str(prof.gpu_memory_utilization)
