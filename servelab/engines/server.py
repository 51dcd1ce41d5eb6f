"""Engine server lifecycle: launch on 127.0.0.1 and a free port, wait for /health, always tear down.

One way to start a server: `Server(engine, profile, ...).start()` (or `with Server(...) as srv`),
and `running(engine, profile, ...)`, a context manager built on it. A Server starts at most once
at a time: `start()` on a running one raises ServerAlreadyRunning.

The server runs under servelab.engines.guard, which leads its own process group: `stop()` ends the
whole group (engine, workers, tokenizer processes) and returns only once no process of it is
left, an `atexit` hook stops whatever is still running when the client exits, and the guard
itself ends the group if the client is killed outright (SIGKILL, a dead Jupyter kernel), so no
engine outlives the notebook that started it. `grace` is how long the engine gets between SIGTERM
and SIGKILL: the Server's own for client death, or the one passed to `stop(grace)` for that stop.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from servelab.engines.guard import group_members
from servelab.engines.launch import ENGINES, command
from servelab.machine import engine_envs, models, profiles
from servelab.machine.paths import cache_home

GUARD = Path(__file__).resolve().parent / "guard.py"
KILL_WAIT_S = 5.0  # after SIGKILL, how long the group may take to disappear before stop() gives up
_LIVE: set[Server] = set()


class EngineStartError(RuntimeError):
    pass


class PortInUse(RuntimeError):
    pass


def _note_start(engine: str, argv: list[str]) -> None:
    """With SERVELAB_START_LOG set (the tests set it), append one line per engine start: who started what."""
    if log := os.environ.get("SERVELAB_START_LOG"):
        who = os.environ.get("SERVELAB_CHAPTER") or os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(log, "a") as f:
            f.write(json.dumps({"engine": engine, "by": who, "argv": argv}) + "\n")


class ServerAlreadyRunning(RuntimeError):
    pass


class ServerStopError(RuntimeError):
    pass


def _check_grace(grace: float) -> float:
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < float("inf"):
        raise ValueError(f"grace must be a number of seconds >= 0, got {grace!r}")
    return float(grace)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Server:
    """One engine server process group. Use as a context manager, or call start() and stop().

    `grace`: seconds between SIGTERM and SIGKILL when the guard ends the group because the client
    died or the engine exited, and for `stop()` without a grace of its own.
    """

    def __init__(self, engine: str, profile: profiles.Profile | str = "auto", *, port: int | None = None,
                 model: str | None = None, log_dir: Path | None = None, env: dict[str, str] | None = None,
                 grace: float = 15.0, **options: Any) -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(ENGINES)}")
        self.grace = _check_grace(grace)
        self.profile = profiles.load(profile) if isinstance(profile, str) else profile
        self.env = engine_envs.get(self.profile.engine_env(engine)).require()
        self.model = models.resolve(model or self.profile.model)
        if port is not None and not port_is_free(port):
            raise PortInUse(f"port {port} on 127.0.0.1 is in use; pass port=None to pick a free one")
        self.port = port or free_port()
        self.engine = engine
        self.spec = command(engine, self.profile, self.model, self.port, options)
        self.extra_env = env or {}
        self.log_path = (log_dir or cache_home() / "logs") / f"{engine}-{self.port}.log"
        self.stop_file = self.log_path.with_suffix(".stop")  # where stop() leaves its grace for the guard
        self.proc: subprocess.Popen | None = None
        self.started_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        """Base URL of the OpenAI-compatible API."""
        return f"{self.url}/v1"

    @property
    def served_model(self) -> str:
        return self.model.served_name

    def version(self) -> str:
        """The engine's version, from its venv's package metadata."""
        return engine_envs.engine_version(self.env) or "unknown"

    @property
    def running(self) -> bool:
        """Whether any process of this server's group is still alive."""
        return bool(self.pids())

    def pids(self) -> list[int]:
        """Every live process of this server's group (guard, engine, workers)."""
        return group_members(self.proc.pid) if self.proc else []

    def peak_rss_gib(self) -> float:
        """Sum over the group's processes of each one's peak resident memory (VmHWM)."""
        total_kib = 0
        for pid in self.pids():
            with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
                total_kib += next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
        return total_kib / 2**20

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def start(self, timeout: float = 600.0) -> Server:
        """Launch the engine under its guard and wait until it answers /health."""
        if self.running:
            raise ServerAlreadyRunning(
                f"{self.engine} server on port {self.port} is already running (guard pid {self.proc.pid}); "
                "stop() it before starting it again")
        if self.proc is not None:  # its group died without stop(): collect the guard first
            self.stop()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.stop_file.unlink(missing_ok=True)
        env = {**os.environ, **self.spec.env, **self.extra_env}
        argv = [sys.executable, str(GUARD), str(os.getpid()), str(self.grace), str(self.stop_file),
                "--", *self.spec.argv]
        t0 = time.monotonic()
        _note_start(self.engine, self.spec.argv)
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, stdin=subprocess.DEVNULL)
        _LIVE.add(self)
        try:
            self._wait_healthy(timeout, t0)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, timeout: float, t0: float) -> None:
        bar = tqdm(total=int(timeout), desc=f"starting {self.engine}", unit="s", leave=False, mininterval=2)
        try:
            while (elapsed := time.monotonic() - t0) < timeout:
                bar.update(int(elapsed) - bar.n)
                if self.proc.poll() is not None:
                    raise EngineStartError(
                        f"{self.engine} server exited with code {self.proc.returncode} during start "
                        f"(log: {self.log_path}); last lines:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                        return
                time.sleep(0.5)
        finally:
            bar.close()
        raise EngineStartError(
            f"{self.engine} server not healthy after {timeout:.0f} s (log: {self.log_path}); "
            f"last lines:\n{self.log_tail()}"
        )

    def stop(self, grace: float | None = None) -> int | None:
        """End the whole process group and return once none of it is left; a no-op when not started.

        The guard SIGTERMs the group and SIGKILLs it after `grace` seconds (default: the Server's).
        Returns the guard's exit status: 0 when it ended a running engine, the engine's exit code
        when the engine had already exited, negative when the guard itself had to be killed; None
        when there was nothing to stop. Raises ServerStopError naming the pids still alive after
        SIGKILL and KILL_WAIT_S seconds (the server then stays stoppable: call stop() again).
        """
        grace = self.grace if grace is None else _check_grace(grace)
        _LIVE.discard(self)
        if self.proc is None:
            return None
        pgid = self.proc.pid  # the guard leads the group
        with contextlib.suppress(OSError):
            self.stop_file.write_text(f"{grace}\n")
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        # The guard needs `grace` plus a moment to SIGKILL and reap; past that the client does it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace + 5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while (left := group_members(pgid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if left:
            raise ServerStopError(f"{self.engine} server on port {self.port}: processes {left} of group {pgid} "
                                  f"still alive {KILL_WAIT_S:g} s after SIGKILL")
        code = self.proc.wait()
        self.proc = None
        self.stop_file.unlink(missing_ok=True)
        return code

    def __enter__(self) -> Server:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(engine: str, profile: profiles.Profile | str = "auto", *, timeout: float = 600.0,
            **kwargs: Any) -> Iterator[Server]:
    """`Server(engine, profile, **kwargs)`, started (waiting up to `timeout` s) and always stopped."""
    server = Server(engine, profile, **kwargs).start(timeout=timeout)
    try:
        yield server
    finally:
        server.stop()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        try:
            server.stop(grace=5)
        except ServerStopError as err:
            print(err, file=sys.stderr)
