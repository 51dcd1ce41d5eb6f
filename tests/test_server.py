"""Engine lifecycle on the real engines: start, bad input, and teardown even after SIGKILL.

The same lifecycle with a fake engine, fast and without engine venvs: tests/test_server_lifecycle.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from servelab.engines import launch, server
from servelab.engines.guard import still_running
from servelab.machine import engine_envs, models


def test_unknown_engine_is_one_line():
    with pytest.raises(ValueError, match="unknown engine 'tgi'; accepted: vllm, sglang"):
        server.Server("tgi", "cpu")


def test_missing_engine_env_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path))
    with pytest.raises(engine_envs.EngineEnvMissing) as err:
        server.Server("vllm", "cpu")
    assert "'vllm-cpu'" in str(err.value) and "python -m servelab setup" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.engine_venv
def test_missing_model_is_one_line(require_engine, monkeypatch, tmp_path):
    require_engine("vllm")
    with pytest.raises(models.ModelMissing, match="unknown local model 'nope'"):
        server.Server("vllm", "cpu", model="local:nope")
    monkeypatch.setattr(models, "local_dir", lambda name: tmp_path / name)
    with pytest.raises(models.ModelMissing, match="is not prepared"):
        server.Server("vllm", "cpu")


@pytest.mark.engine_venv
def test_port_in_use_is_refused_before_starting(require_engine):
    require_engine("vllm")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(server.PortInUse, match=f"port {port} on 127.0.0.1 is in use"):
            server.Server("vllm", "cpu", port=port)


@pytest.mark.server
def test_server_that_dies_at_start_reports_its_log_and_leaves_nothing(cpu, require_engine):
    require_engine("vllm")
    srv = server.Server("vllm", cpu, max_model_len="not-a-number")
    with pytest.raises(server.EngineStartError) as err:
        srv.start(timeout=120)
    first_line = str(err.value).splitlines()[0]
    assert "vllm server exited with code" in first_line and str(srv.log_path) in first_line
    assert "max-model-len" in str(err.value) or "max_model_len" in str(err.value)  # the log tail
    assert srv.proc is None and srv not in server._LIVE


CLIENT = textwrap.dedent("""
    import json, sys, time
    from servelab.engines.server import Server
    srv = Server(sys.argv[1], "cpu").start()
    print(json.dumps({"pgid": srv.proc.pid, "pids": srv.pids()}), flush=True)
    time.sleep(600)
""")


@pytest.mark.server
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_engine_process_survives_a_sigkilled_client(engine, require_engine):
    require_engine(engine)
    client = subprocess.Popen([sys.executable, "-c", CLIENT, engine], stdout=subprocess.PIPE, text=True)
    try:
        line = client.stdout.readline()
        assert line, f"client exited with {client.wait()} before its {engine} server was up"
        started = json.loads(line)
        assert len(started["pids"]) >= 2  # the guard and the engine, at least
        os.kill(client.pid, signal.SIGKILL)
        client.wait()
        deadline = time.monotonic() + 30
        while still_running(started["pids"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert still_running(started["pids"]) == []
        assert server.group_members(started["pgid"]) == []
    finally:
        if client.poll() is None:
            client.kill()


def test_missing_sglang_env_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path))
    with pytest.raises(engine_envs.EngineEnvMissing, match="engine env 'sglang-cpu' is missing"):
        server.Server("sglang", "cpu")


@pytest.mark.engine_venv
def test_missing_sglang_stand_in_is_one_line(require_engine, monkeypatch, tmp_path):
    require_engine("sglang")
    monkeypatch.setattr(launch, "SGL_STAND_IN", tmp_path / "nowhere")
    with pytest.raises(launch.StandInMissing) as err:
        server.Server("sglang", "cpu")
    assert "stand-in for sgl_kernel is missing" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.server
def test_sglang_flag_the_version_does_not_know_reports_its_log(cpu, require_engine):
    require_engine("sglang")
    srv = server.Server("sglang", cpu, no_such_flag=1)
    with pytest.raises(server.EngineStartError) as err:
        srv.start(timeout=180)
    assert "sglang server exited with code" in str(err.value).splitlines()[0]
    assert "unrecognized arguments: --no-such-flag" in str(err.value)
    assert srv.proc is None
