"""Engine-venv scripts without their engine's import each time: one fork server per venv, environment and folder.

`engine_envs.run_script` starts a fresh interpreter per script, which then spends most of its time importing
vLLM or SGLang (about 7 s each on a quiet 2-core machine; the tests run some sixty such scripts). A fork
server (`venv_scripts/fork_server.py`) imports the engine once, started with exactly the environment and
working directory the script asks for (from the second script that asks for both: a one-off call runs cold),
and forks a child per script; the child runs the script as a fresh interpreter would, with the same answer,
exit code and error message. A server that cannot import its engine, or dies, leaves the call to the cold path.

Only the tests use it (`install`, from tests/conftest.py); the chapters keep `engine_envs.run_script`, so a
chapter's execution key does not depend on this module.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servelab.machine import engine_envs

SERVER = Path(__file__).resolve().parent / "venv_scripts" / "fork_server.py"
# Variables that differ from call to call without changing what an import does.
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})

_cold_run_script = engine_envs.run_script


class _ServerGone(RuntimeError):
    pass


class ForkServer:
    """One fork server: a venv's python with one environment and working directory, its engine imported."""

    def __init__(self, python: Path, env: Mapping[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen([str(python), str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=dict(env), cwd=cwd)
        self.lock = threading.Lock()
        self._buffer = b""
        self.ready: list[str] | None = None
        try:
            hello = self._read(timeout=300)
        except _ServerGone:
            hello = {}
        if "ready" in hello:
            self.ready = hello["ready"]
        else:
            self.close()

    def _read(self, timeout: float | None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            if not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, 65536)
            if not chunk:
                raise _ServerGone
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, script: Path, args: tuple[str, ...], env: Mapping[str, str], stdin: Path, stdout: Path,
            stderr: Path, timeout: float) -> int | None:
        """The script's exit code; None when it ran past `timeout` (it is killed). Its streams are files."""
        request = {"script": str(script), "argv": list(args), "env": dict(env), "stdin": str(stdin),
                   "stdout": str(stdout), "stderr": str(stderr)}
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            raise _ServerGone from None
        pid = self._read(timeout=60)["pid"]
        try:
            return self._read(timeout=timeout)["rc"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._read(timeout=60)
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_SERVERS: dict[tuple, ForkServer] = {}  # the most recently used last
_SEEN: set[tuple] = set()
_SERVERS_LOCK = threading.Lock()
# Servers kept at once (each holds an imported engine, some hundreds of MiB); the least recently used goes first.
KEEP = 4


def _server(python: Path, env: Mapping[str, str], cwd: str) -> ForkServer | None:
    """The fork server for this venv, environment and folder; None the first time they are asked for (a
    one-off call, such as a flag check in its own temporary folder, gains nothing from a server)."""
    key = (str(python), tuple(sorted((k, v) for k, v in env.items() if k not in VOLATILE)), cwd)
    with _SERVERS_LOCK:
        if key not in _SEEN:
            _SEEN.add(key)
            return None
        server = _SERVERS.pop(key, None)
        if server is None or (server.ready is not None and server.proc.poll() is not None):  # new, or died
            server = ForkServer(python, env, cwd)
        _SERVERS[key] = server
        while len(_SERVERS) > KEEP:
            _SERVERS.pop(next(iter(_SERVERS))).close()
        return server


def run_script(python: Path, script: Path, *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | str | None = None, timeout: float = 600, log: Path | None = None) -> Any:
    """`engine_envs.run_script`, through the fork server of (python, env, cwd); the cold path where none runs."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"} if env is None else dict(env)
    folder = str(Path(cwd).resolve()) if cwd is not None else os.getcwd()
    server = _server(python, env, folder)
    if server is None or server.ready is None:
        return _cold_run_script(python, script, *args, stdin=stdin, env=env, cwd=cwd, timeout=timeout, log=log)
    with tempfile.TemporaryDirectory(prefix="servelab-warm-") as tmp:
        given, out = Path(tmp) / "stdin", Path(tmp) / "stdout"
        given.write_text(stdin or "", encoding="utf-8")
        err = log if log is not None else Path(tmp) / "stderr"
        err.parent.mkdir(parents=True, exist_ok=True)
        try:
            with server.lock:
                code = server.run(Path(script).resolve(), tuple(str(a) for a in args), env, given, out, err, timeout)
        except _ServerGone:
            server.ready = None
            return _cold_run_script(python, script, *args, stdin=stdin, env=env, cwd=cwd, timeout=timeout, log=log)
        if code is None:
            raise engine_envs.ScriptFailed(f"{Path(script).name} took longer than {timeout:.0f} s")
        return engine_envs._answer(Path(script), code, _text(out), _text(err), log)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def close_all() -> None:
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.close()
        _SERVERS.clear()
        _SEEN.clear()


def install() -> None:
    """Route `engine_envs.run_script` through fork servers for the rest of this process."""
    engine_envs.run_script = run_script
    atexit.register(close_all)


def uninstall() -> None:
    engine_envs.run_script = _cold_run_script
    close_all()
