"""Hardware profiles (data in data/profiles.toml) and detection of the one that fits this machine."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import tomllib

from servelab.paths import DATA

PROFILES_FILE = DATA / "profiles.toml"


class UnknownProfile(ValueError):
    pass


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    device: str
    dtype: str
    model: str
    draft_model: str
    max_model_len: int
    max_num_seqs: int
    chunk_sizes: list[int]
    vllm_env: str
    sglang_env: str
    vllm_flags: list[str]
    sglang_flags: list[str]
    speculative: dict[str, dict[str, Any]]
    kv_cache_gib: float | None = None
    gpu_memory_utilization: float | None = None
    min_gpu_gib: float = 0.0

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    def engine_env(self, engine: str) -> str:
        return {"vllm": self.vllm_env, "sglang": self.sglang_env}[engine]


def _table() -> dict[str, dict[str, Any]]:
    with PROFILES_FILE.open("rb") as f:
        return tomllib.load(f)


def names() -> list[str]:
    return list(_table())


def load(name: str = "auto") -> Profile:
    """The profile called `name`; "auto" detects the hardware (see `detect`)."""
    if name == "auto":
        name = detect()
    table = _table()
    if name not in table:
        raise UnknownProfile(f"unknown profile {name!r}; valid profiles: auto, {', '.join(table)}")
    raw = table[name]
    fields = {k: v for k, v in raw.items() if k in Profile.__dataclass_fields__}
    return Profile(name=name, **fields)


def gpu_memory_gib() -> list[float]:
    """Total memory of each NVIDIA GPU, from nvidia-smi; empty without one."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [float(line) / 1024 for line in out.split() if line.strip()]


def detect(gpus_gib: list[float] | None = None) -> str:
    """Pick the largest GPU profile whose memory floor the first GPU meets, else `cpu`."""
    gpus = gpu_memory_gib() if gpus_gib is None else gpus_gib
    if not gpus:
        return "cpu"
    fitting = [(p.get("min_gpu_gib", 0), n) for n, p in _table().items()
               if p["device"] == "cuda" and gpus[0] >= p.get("min_gpu_gib", 0)]
    return max(fitting)[1] if fitting else "cpu"
