"""Server lifecycle with a fake engine: start once, stop with the grace asked for, leave no process.

The fake engine is a few lines of stdlib Python that answers /health and forks a worker, so a
server's group has three processes (guard, engine, worker) like a real one, and starts in a
fraction of a second. The real engines run the same lifecycle in tests/test_server.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from servelab.engines import server
from servelab.engines.guard import group_members, requested_grace, still_running
from servelab.engines.launch import LaunchSpec
from servelab.machine.models import ModelRef
from servelab.machine.paths import REPO

# argv: PORT MODE. MODE "stubborn" ignores SIGTERM, in the engine and in its worker.
FAKE_ENGINE = textwrap.dedent("""
    import http.server, os, signal, sys, time
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        while True:
            time.sleep(60)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
""")


def install_fake_engine(setattr: Callable[[object, str, Any], None], mode: str = "polite") -> None:
    """Make `Server(<engine>, "cpu")` run FAKE_ENGINE: no engine venv, no model, no vLLM."""
    fake_env = SimpleNamespace(require=lambda: SimpleNamespace(path=Path(sys.prefix)))
    setattr(server, "engine_envs", SimpleNamespace(get=lambda name: fake_env, engine_version=lambda env: "fake"))
    setattr(server, "models", SimpleNamespace(resolve=lambda name: ModelRef("fake", "fake", local=False)))
    setattr(server, "command", lambda engine, profile, model, port, options:
            LaunchSpec(engine, [sys.executable, "-c", FAKE_ENGINE, str(port), mode]))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., server.Server]]:
    """A factory of fake-engine Servers logging under tmp_path; whatever is left is stopped at the end."""
    made: list[server.Server] = []

    def make(mode: str = "polite", **kwargs: Any) -> server.Server:
        install_fake_engine(monkeypatch.setattr, mode)
        made.append(server.Server("vllm", "cpu", log_dir=tmp_path, **kwargs))
        return made[-1]

    yield make
    for srv in made:
        srv.stop(grace=0)


def test_a_stopped_server_leaves_no_process_of_its_group(fake):
    srv = fake().start(timeout=20)
    pgid, pids = srv.proc.pid, srv.pids()
    assert len(pids) >= 3 and srv.running  # guard, engine, the engine's worker
    t0 = time.monotonic()
    assert srv.stop() == 0  # the guard ended a running engine itself
    assert time.monotonic() - t0 < 3  # a polite engine goes at SIGTERM, not at the grace's end
    assert group_members(pgid) == [] and still_running(pids) == []
    assert not srv.running and srv.proc is None and srv not in server._LIVE
    assert not srv.stop_file.exists()


def test_starting_a_running_server_is_refused_and_the_first_one_stays(fake):
    srv = fake().start(timeout=20)
    pids = sorted(srv.pids())
    with pytest.raises(server.ServerAlreadyRunning) as err:
        srv.start(timeout=20)
    message = str(err.value)
    assert f"vllm server on port {srv.port} is already running (guard pid {srv.proc.pid})" in message
    assert "\n" not in message
    assert sorted(still_running(pids)) == pids and sorted(srv.pids()) == pids  # no second guard, none lost
    with srv as same:  # entering a running server does not start it again
        assert same is srv and sorted(srv.pids()) == pids
    assert not srv.running and still_running(pids) == []


def test_stop_grace_reaches_the_guard(fake):
    grace = 1.5
    srv = fake("stubborn", grace=30).start(timeout=20)
    pgid, pids = srv.proc.pid, srv.pids()
    t0 = time.monotonic()
    code = srv.stop(grace=grace)
    took = time.monotonic() - t0
    # The guard, not the client's fallback (grace + 5 s, then the guard is killed too), ended it.
    assert code == 0
    assert grace * 0.8 <= took < grace + 2
    assert group_members(pgid) == [] and still_running(pids) == []


def test_stop_on_a_stopped_or_never_started_server_is_a_no_op(fake):
    srv = fake()
    assert srv.stop() is None and not srv.running
    srv.start(timeout=20)
    assert srv.stop() == 0
    t0 = time.monotonic()
    assert srv.stop() is None and srv.stop(grace=3) is None
    assert time.monotonic() - t0 < 0.5


def test_a_stopped_server_can_start_again(fake):
    srv = fake().start(timeout=20)
    first = srv.proc.pid
    srv.stop()
    srv.start(timeout=20)
    assert srv.running and srv.proc.pid != first
    srv.stop()


def test_running_is_a_server_that_always_stops(monkeypatch, tmp_path):
    install_fake_engine(monkeypatch.setattr)
    with pytest.raises(KeyError), server.running("vllm", "cpu", timeout=20, log_dir=tmp_path) as srv:
        pgid, pids = srv.proc.pid, srv.pids()
        assert len(pids) >= 3
        raise KeyError("the cell failed")
    assert group_members(pgid) == [] and not srv.running


def test_a_group_that_outlives_sigkill_is_reported_by_pid(fake, monkeypatch):
    srv = fake().start(timeout=20)
    pgid = srv.proc.pid
    monkeypatch.setattr(server, "KILL_WAIT_S", 0.3)
    monkeypatch.setattr(server, "group_members", lambda pgid: [4242424])
    with pytest.raises(server.ServerStopError, match=r"processes \[4242424\] of group \d+ still alive") as err:
        srv.stop(grace=0)
    assert "\n" not in str(err.value)
    monkeypatch.undo()
    assert group_members(pgid) == []  # the real group did go
    assert srv.stop() is not None and srv.proc is None  # and stop() can be called again


@pytest.mark.parametrize("grace", [-1, float("nan"), "5", True])
def test_a_bad_grace_is_one_line(fake, grace):
    with pytest.raises(ValueError, match=f"grace must be a number of seconds >= 0, got {grace!r}"):
        fake(grace=grace)
    with pytest.raises(ValueError, match=r"grace must be a number of seconds >= 0, got -2"):
        fake().stop(grace=-2)


def test_the_guard_reads_a_stop_grace_only_when_it_makes_sense(tmp_path):
    stop_file = tmp_path / "x.stop"
    assert requested_grace(str(stop_file), 7.0) == 7.0
    for text, expected in [("2.5\n", 2.5), ("0", 0.0), ("-1", 7.0), ("inf", 7.0), ("soon", 7.0)]:
        stop_file.write_text(text)
        assert requested_grace(str(stop_file), 7.0) == expected


CLIENT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from servelab.engines import server
    from tests.test_server_lifecycle import install_fake_engine
    install_fake_engine(setattr, "stubborn")
    srv = server.Server("vllm", "cpu", log_dir=Path(sys.argv[1]), grace=float(sys.argv[2])).start(timeout=20)
    print(json.dumps({"pgid": srv.proc.pid, "pids": srv.pids()}), flush=True)
    time.sleep(600)
""")


def test_a_sigkilled_client_takes_the_whole_group_down_after_its_grace(tmp_path):
    grace = 1.0
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(tmp_path), str(grace)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = client.stdout.readline()
        assert line, f"client exited with {client.wait()} before its fake server was up"
        started = json.loads(line)
        assert len(started["pids"]) >= 3
        os.kill(client.pid, signal.SIGKILL)
        client.wait()
        t0 = time.monotonic()
        while still_running(started["pids"]) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        took = time.monotonic() - t0
        assert still_running(started["pids"]) == [] and group_members(started["pgid"]) == []
        assert grace * 0.8 <= took < grace + 3  # the stubborn engine got the Server's grace, then SIGKILL
    finally:
        if client.poll() is None:
            client.kill()
