"""What produced a number: profile, hardware, engine and library versions, commit, time."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import subprocess
from typing import Any

from servelab import __version__, envs
from servelab.paths import REPO
from servelab.profiles import Profile, gpu_memory_gib


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def memory_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return 0.0


def gpu_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def engine_versions(profile: Profile) -> dict[str, str]:
    """Versions of each engine and its torch, read from the engine venvs' metadata (no import)."""
    out: dict[str, str] = {}
    for engine in envs.ENGINE_DISTS:
        env = envs.get(profile.engine_env(engine))
        out[engine] = envs.engine_version(env) or "not installed"
        out[f"{engine} torch"] = envs.installed_version(env, "torch") or "-"
    return out


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(profile: Profile) -> dict[str, Any]:
    gpus = gpu_names()
    return {
        "profile": profile.name,
        "time_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_gib": round(memory_gib(), 1),
        "gpus": ", ".join(f"{n} ({m:.0f} GiB)" for n, m in zip(gpus, gpu_memory_gib(), strict=False)) or "none",
        "python": platform.python_version(),
        **engine_versions(profile),
        "model": profile.model,
        "dtype": profile.dtype,
        "servelab": __version__,
        "commit": git_commit(),
    }
