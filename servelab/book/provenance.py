"""What produced a number: profile, hardware, engine and library versions, commit, time."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from typing import Any

from servelab import __version__
from servelab.machine import engine_envs, hardware
from servelab.machine.paths import REPO
from servelab.machine.profiles import Profile


def engine_versions(profile: Profile) -> dict[str, str]:
    """Versions of each engine and its torch, read from the engine venvs' metadata (no import)."""
    out: dict[str, str] = {}
    for engine in engine_envs.ENGINE_DISTS:
        env = engine_envs.get(profile.engine_env(engine))
        out[engine] = engine_envs.engine_version(env) or "not installed"
        out[f"{engine} torch"] = engine_envs.installed_version(env, "torch") or "-"
    return out


def git_commit() -> str:
    """The checkout's commit, with "-dirty" when tracked files differ from it (a run from edited code)."""
    try:
        return subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=7", "--exclude=*"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(profile: Profile) -> dict[str, Any]:
    gpus = hardware.gpus()
    return {
        "profile": profile.name,
        "time_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": hardware.cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_gib": round(hardware.memory_gib(), 1),
        "gpus": ", ".join(f"{g.name} ({g.memory_gib:.0f} GiB)" for g in gpus) or "none",
        "python": platform.python_version(),
        **engine_versions(profile),
        "model": profile.model,
        "dtype": profile.dtype,
        "servelab": __version__,
        "commit": git_commit(),
    }
