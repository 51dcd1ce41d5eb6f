"""The GPU profiles' code paths, run on a machine set up as a GPU profile's would be (`gpu_machine` in conftest):
only the GPU is absent, faked at nvidia-smi; everything above it is servelab's and the engines' own code."""

from __future__ import annotations

import json

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


@pytest.mark.engine_venv
@pytest.mark.parametrize("name", GPU_PROFILES)
def test_every_declared_gpu_server_builds_on_a_gpu_machine(gpu_machine, name, monkeypatch):
    """Each server every chapter declares for a GPU profile constructs (venv, model, command) with only what the
    profile's setup leaves behind; none needs the cpu model, a cpu venv or the hub."""
    from servelab.book import launch_plan

    gpu_machine(mib=23034 if name == "gpu-24g" else 81559)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prof = profiles.load(name)
    for planned in launch_plan.plan_launches(prof):
        server = planned.launch.server(prof)
        assert server.env.name == prof.engine_env(planned.launch.engine)
        assert "/envs/" + prof.engine_env(planned.launch.engine) + "/" in server.spec.argv[0]
        assert not server.model.local and server.model.source == (planned.launch.model or prof.model)


@pytest.mark.engine_venv
def test_the_helpers_chapters_call_on_a_gpu_profile(gpu_machine):
    """The engine-reading helpers the chapters call, on gpu-24g's machine: chapter 00's launch table, 05's and
    07's engine defaults, 06's methods and SGLang's speculative resolution."""
    from servelab.measure.chunked_prefill import live as chunked_prefill_live
    from servelab.measure.deploying import recipes
    from servelab.measure.setup import check as setup_check
    from servelab.measure.speculative import setups

    gpu_machine()
    prof = profiles.load("gpu-24g")
    table = setup_check.launch_commands_table()
    assert not table.command.str.contains("profile cpu").any() and table[
        table.command.str.startswith("servelab")].accepted.all()
    assert setup_check.dtype_comparison(prof) == (prof.draft_model, "bfloat16", "float32")
    defaults = chunked_prefill_live.engine_defaults(prof)
    assert set(defaults) == {"vllm", "sglang"}
    assert set(recipes.memory_defaults(prof)) == {"vllm", "sglang"}
    names = [m.name for m in setups.methods(prof, 4, (2, 4), [])]
    assert names == ["n-gram", f"draft: {prof.draft_model}"]
    resolved = setups.sglang_defaults({prof.model: prof.model}, env_name=prof.sglang_env)
    assert (resolved.table.error == "").all()


@pytest.mark.engine_venv
def test_chapter_01s_knob_table_on_a_gpu_profile(gpu_machine):
    """Chapter 01 reads both engines' batch knobs on a GPU profile, SGLang's batch cap from the pool a running
    server reports (a GPU profile sets no KV budget of its own)."""
    from servelab.measure.batching import serving as serving_basics

    gpu_machine(mib=23034)
    prof = profiles.load("gpu-24g")
    assert prof.kv_cache_tokens is None
    table = serving_basics.batch_knobs(serving_basics.engine_batch_defaults(prof, kv_tokens=200_000))
    # SGLang's cap from the pool: min(clamp(pool / context x 512, 2048, 4096), pool // 2) (resolve_max_num_reqs)
    assert table.set_index("knob").loc["--max-running-requests", "default"] == 4096
    assert all(int(v) > 0 for v in table["default"]), table  # vLLM's on the platform its venv runs on (CPU here)


def test_gated_gpu_runs_are_skipped_with_their_reason_without_a_token(monkeypatch, tmp_path):
    from servelab.measure.speculative import gpu as speculative_gpu

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    prof = profiles.load("gpu-80g")
    gated = [r for r in speculative_gpu.gpu_runs(prof) if "meta-llama/Llama-3.1-8B-Instruct" in
             speculative_gpu.run_models(r)]
    assert gated
    frame, skipped = speculative_gpu.measure_gpu_runs(gated, {}, prof, 8, [1], 8)
    assert frame.empty and len(skipped) == len(gated)
    assert all("skipped" in line and "HF_TOKEN" in line and "\n" not in line for line in skipped)


@pytest.mark.engine_venv  # gpu_machine links the cpu venvs in under the GPU envs' names
def test_setup_of_a_gpu_profile_checks_the_driver_before_anything(gpu_machine, monkeypatch):
    from servelab.machine import gpu_checks, provision

    prof = profiles.load("gpu-24g")
    assert gpu_checks.driver_problem(prof, "580.65.06") is None
    old = gpu_checks.driver_problem(prof, "550.54.15")
    assert "550.54.15 is too old for CUDA 13" in old and "580.65.06" in old
    assert gpu_checks.python_problem((3, 10)) == "Python 3.10 cannot run both engines; use Python 3.11 to 3.13"
    assert gpu_checks.python_problem((3, 12)) is None
    assert "needs 1000000 GiB" in gpu_checks.disk_problem(engine_envs.get("vllm-gpu").path, 10**6 * 2**30)
    home = gpu_machine(driver="535.104.05")
    with pytest.raises(provision.SetupProblem, match="535.104.05 is too old for CUDA 13"):
        provision.setup("gpu-24g")
    assert not list(home.glob("logs/env-*.log"))  # stopped before building anything


def test_setup_and_lab_download_every_model_the_chapters_start(monkeypatch):
    """`./lab.sh` (the `lab` command) and `setup` both hand setup the plan's hub models, so chapter 06's 7B is on
    disk before its server starts, not fetched inside the engine's start window."""
    from servelab import cli
    from servelab.book import workspace
    from servelab.machine import provision

    calls = []
    monkeypatch.setattr(provision, "setup", lambda name, hub_models=(): calls.append((name, list(hub_models))))
    monkeypatch.setattr(workspace, "lab", lambda *a, **k: None)  # the chapters, the book, the translated notebooks
    assert cli.main(["setup", "--profile", "gpu-24g"]) == 0
    assert cli.main(["lab", "--profile", "gpu-24g"]) == 0
    assert [name for name, _ in calls] == ["gpu-24g", "gpu-24g"] and calls[0] == calls[1]
    assert {"Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"} == set(calls[0][1])


@pytest.mark.engine_venv
def test_the_disk_check_counts_only_what_is_still_missing(gpu_machine, monkeypatch):
    """A rerun of setup (after a broken download, say) needs room only for what is not there yet; the free space
    is the operating system's answer, faked here at shutil.disk_usage."""
    import collections

    from servelab.machine import gpu_checks, hub

    gpu_machine()
    prof, model = profiles.load("gpu-24g"), "Qwen/Qwen2.5-3B-Instruct"
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(gpu_checks.shutil, "disk_usage", lambda path: usage(0, 0, 2**30))
    (line,) = gpu_checks.missing_disk(prof, [model])  # the venvs are built; the 3B is not downloaded
    assert "has 1 GiB free; this profile needs 6 GiB" in line
    repo = models.hub_cache() / f"models--{model.replace('/', '--')}"
    (repo / "refs" / "main").write_text("config-only")
    (repo / hub.COMPLETE).write_text("config-only")
    assert hub.cached(repo) and gpu_checks.missing_disk(prof, [model]) == []


def test_setup_holds_the_known_shapes_to_the_downloaded_config(tmp_path):
    """The Qwen2.5-3B's and the EAGLE-3 heads' shapes were taken from model cards; the first GPU setup that
    downloads their config.json checks every one, one line per key that differs."""
    from servelab.machine import gpu_checks
    from servelab.machine.model_shapes import known_shapes

    model = "Qwen/Qwen2.5-3B-Instruct"
    snap = tmp_path / f"models--{model.replace('/', '--')}" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    shape = known_shapes()[model]
    config = {k: getattr(shape, k) for k in gpu_checks.SHAPE_KEYS}
    (snap / "config.json").write_text(json.dumps(config))
    assert gpu_checks.shape_problems([model, "org/not-known"], tmp_path) == []
    (snap / "config.json").write_text(json.dumps({**config, "vocab_size": 151646}))
    (line,) = gpu_checks.shape_problems([model], tmp_path)
    assert line.startswith(f"{model}: servelab/data/model_shapes.toml says vocab_size = 151936, its config.json "
                           "says 151646")
