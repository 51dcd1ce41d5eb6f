"""`python -m servelab doctor`: each check passes on what it needs and fails, with what to do, on what it does not
(stand-ins for the machine: an empty SERVELAB_HOME, a small memory, an old driver; no engine starts)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from servelab import doctor
from servelab.machine import profiles

CPU, GPU = profiles.load("cpu"), profiles.load("gpu-24g")


def test_python_outside_both_engines_range_is_a_problem():
    assert doctor.python_version((3, 12)).ok
    bad = doctor.python_version((3, 10))
    assert not bad.ok and "3.10" in bad.message and "3.11-3.13" in bad.message


def test_one_core_is_a_problem():
    assert doctor.cores(2).ok and not doctor.cores(1).ok


def test_memory_below_what_the_side_by_side_chapters_hold_is_a_problem():
    assert doctor.memory(24.0).ok
    small = doctor.memory(15.5)  # a 16 GB laptop
    assert not small.ok and "18 GiB" in small.message


def test_an_empty_servelab_home_needs_the_venvs_and_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "home"))
    assert doctor._setup_needs_gib(CPU) == pytest.approx(2.5 + 11 + doctor.LOCAL_MODEL_GIB)
    assert not doctor.disk(CPU, free_gib=10.0).ok and doctor.disk(CPU, free_gib=20.0).ok
    venvs = doctor.engine_venvs(CPU)
    assert [r.check for r in venvs] == ["venv vllm-cpu", "venv sglang-cpu"] and not any(r.ok for r in venvs)
    assert "python -m servelab setup" in venvs[0].message
    missing = doctor.model(CPU)
    assert not missing.ok and "smollm2-135m-instruct" in missing.message


def test_a_cjk_language_needs_a_cjk_font():
    assert doctor.font("en").ok and doctor.font("ja", installed={"Noto Sans CJK JP"}).ok
    none = doctor.font("ko", installed={"DejaVu Sans"})
    assert not none.ok and "fonts-noto-cjk" in none.message


def test_no_loopback_port_is_a_problem():
    def refused() -> int:
        raise OSError("Operation not permitted")

    assert doctor.loopback().ok
    bad = doctor.loopback(refused)
    assert not bad.ok and "Operation not permitted" in bad.message


def test_a_gpu_profile_needs_a_driver_new_enough_for_the_locks_cuda(monkeypatch):
    assert doctor.gpu(CPU).ok
    monkeypatch.setattr(doctor.gpu_checks, "driver_version", lambda: None)
    assert not doctor.gpu(GPU).ok and "nvidia-smi" in doctor.gpu(GPU).message
    old = doctor.gpu(GPU, driver="535.104.05")  # enough for CUDA 12, not for the locks' CUDA 13
    assert not old.ok and "535.104.05" in old.message and "580.65.06" in old.message
    assert doctor.gpu(GPU, driver="580.95.05").ok


def test_a_gated_model_without_a_hub_token_is_a_problem(monkeypatch):
    llama = replace(GPU, model="meta-llama/Llama-3.1-8B-Instruct", draft_model="")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", "/nonexistent")
    assert doctor.hub_access(GPU).ok  # Qwen is not gated
    bad = doctor.hub_access(llama)
    assert not bad.ok and "meta-llama/Llama-3.1-8B-Instruct" in bad.message and "HF_TOKEN" in bad.message
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    assert doctor.hub_access(llama).ok


class _Failing:
    stopped = False

    def __init__(self, engine, profile):
        self.engine = engine

    def start(self):
        raise RuntimeError(f"{self.engine} exited at start\nsecond line")

    def stop(self):
        _Failing.stopped = True


def test_engines_that_do_not_start_are_problems_and_are_stopped(monkeypatch):
    from servelab.engines import server

    monkeypatch.setattr(server, "Server", _Failing)
    got = doctor.engine_starts(CPU)
    assert [r.ok for r in got] == [False, False] and _Failing.stopped
    assert "vllm exited at start" in got[0].message and "second line" not in got[0].message


def test_the_exit_status_and_json_follow_the_checks(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "run", lambda profile, lang, engines=False: [doctor.Result("cores", True, "fine"),
                                                                             doctor.Result("memory", False, "small")])
    assert doctor.main(["--profile", "cpu", "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["profile"] == "cpu" and [r["ok"] for r in answer["results"]] == [True, False]
    monkeypatch.setattr(doctor, "run", lambda profile, lang, engines=False: [doctor.Result("cores", True, "fine")])
    assert doctor.main(["--profile", "cpu"]) == 0 and "fine" in capsys.readouterr().out
    assert doctor.main(["--lang", "xx"]) == 2 and "unknown language(s) xx" in capsys.readouterr().err


@pytest.mark.parametrize("lang", ["ja", "ko", "de", "es"])
def test_the_lines_come_in_the_participants_language(monkeypatch, lang):
    monkeypatch.setenv("SERVELAB_LANG", "en")
    english = [doctor.cores(1).message, doctor.memory(4.0).message, doctor.font("ko", installed=set()).message]
    monkeypatch.setenv("SERVELAB_LANG", lang)
    translated = [doctor.cores(1).message, doctor.memory(4.0).message, doctor.font("ko", installed=set()).message]
    assert all(a != b for a, b in zip(english, translated, strict=True)), translated


def test_the_command_line_runs_the_doctor_and_answers_json():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "servelab", "doctor", "--profile", "cpu", "--json"],
                          capture_output=True, text=True, timeout=120)
    answer = json.loads(done.stdout)
    checks = [r["check"] for r in answer["results"]]
    assert checks[:4] == ["python", "cores", "memory", "disk"] and {"font", "ports", "gpu", "hub"} <= set(checks)
    assert done.returncode == (0 if all(r["ok"] for r in answer["results"]) else 1)
