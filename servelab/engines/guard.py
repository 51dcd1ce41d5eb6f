"""Process-group guard: runs an engine server and kills its whole group when the client dies.

Started by servelab.engines.server in a new session, so it leads the process group that the
engine and every worker the engine forks inherit. It watches the client's pid; when the client
goes away, even by SIGKILL (a crashed or killed Jupyter kernel), it terminates the group. It
imports only the standard library so it starts in milliseconds from any Python.

Usage: python guard.py CLIENT_PID GRACE_SECONDS STOP_FILE -- COMMAND [ARG ...]

Ending the group means: SIGTERM to every process of the group, up to a grace period for them to
exit, then SIGKILL for whatever is left. The grace is GRACE_SECONDS when the client dies or the
engine exits on its own. A client that wants a different grace for one stop writes it (seconds,
as text) to STOP_FILE and then sends the guard SIGTERM; the guard reads the file when the signal
arrives. A SIGTERM with no readable, finite, non-negative number in STOP_FILE uses GRACE_SECONDS.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time

USAGE = "usage: guard.py CLIENT_PID GRACE_SECONDS STOP_FILE -- COMMAND [ARG ...]"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stat(pid: int | str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def still_running(pids: list[int]) -> list[int]:
    """Those of `pids` that are still running (not gone, not zombies)."""
    return [pid for pid in pids if (fields := _stat(pid)) and fields[0] != "Z"]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid` (Linux /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(entry)) and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def requested_grace(stop_file: str, default: float) -> float:
    """The grace the client wrote to `stop_file` for this stop, or `default`."""
    try:
        with open(stop_file) as f:
            grace = float(f.read().strip())
    except (OSError, ValueError):
        return default
    return grace if math.isfinite(grace) and grace >= 0 else default


def _others() -> list[int]:
    return [pid for pid in group_members(os.getpgid(0)) if pid != os.getpid()]


def _kill_group(grace: float) -> None:
    """SIGTERM the group, give it `grace` seconds, then SIGKILL whatever is left; the guard stays."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(os.getpgid(0), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _others() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.1)
    for pid in _others():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _reap()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        raise SystemExit(USAGE)
    client, grace, stop_file, _, *command = argv
    client_pid, grace_s, parent = int(client), float(grace), os.getppid()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    child = subprocess.Popen(command)
    while child.poll() is None and not stop and os.getppid() == parent and _alive(client_pid):
        time.sleep(0.2)
    code = child.poll()
    # The engine exited, was asked to stop, or its client died: nothing of the group may outlive this.
    _kill_group(requested_grace(stop_file, grace_s) if stop else grace_s)
    return code if code is not None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
