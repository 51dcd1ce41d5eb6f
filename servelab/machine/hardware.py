"""What this machine has: its CPU, memory and NVIDIA GPUs (one nvidia-smi probe for all of servelab)."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float


@cache
def gpus() -> tuple[Gpu, ...]:
    """Every NVIDIA GPU nvidia-smi reports (name, total memory); empty without one or without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return ()
    return tuple(parse_nvidia_smi(out))


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Lines of `name, memory in MiB` as nvidia-smi prints them with --format=csv,noheader,nounits."""
    found = []
    for line in text.splitlines():
        if "," in line:
            name, mib = line.rsplit(",", 1)
            with contextlib.suppress(ValueError):
                found.append(Gpu(name.strip(), float(mib) / 1024))
    return found


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
