"""What a GPU profile's machine must have before setup installs or downloads anything: a driver new enough for the
CUDA the locked engines were built with, a Python both engines ship wheels for, and the disk the plan needs.

Each check returns one line naming the problem and what to do, or None.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from servelab.machine import engine_envs, locks, model_shapes, profiles

# NVIDIA's minimum Linux driver for each CUDA major, with minor-version compatibility (the CUDA Toolkit release
# notes, "CUDA Toolkit and Corresponding Driver Versions"): any 12.x toolkit runs on >= 525.60.13, any 13.x on
# >= 580.65.06.
MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}
PYTHONS = ((3, 11), (3, 13))  # both engines' wheels: vLLM requires >=3.11, SGLang 0.5.23 ships cp311-cp313
GIB = 2**30


def cuda_major(env_name: str) -> int | None:
    """The CUDA major the env's lock installs (its nvidia-cuda-runtime), None for a CPU env."""
    version = locks.pins(locks.get(env_name).path).get("nvidia-cuda-runtime")
    return int(version.split(".")[0]) if version else None


def driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi reports it, None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def driver_problem(profile: profiles.Profile, driver: str | None = None) -> str | None:
    majors = sorted({m for e in ("vllm", "sglang") if (m := cuda_major(profile.engine_env(e)))})
    if not majors:
        return None
    wanted = max((MIN_DRIVER[m] for m in majors), key=_version)
    need = _version(wanted)
    driver = driver or driver_version()
    if driver is None:
        return (f"no NVIDIA driver found (nvidia-smi); profile {profile.name}'s engines are built for CUDA "
                f"{majors[-1]}, which needs driver {wanted} or newer")
    if _version(driver) < need:
        return (f"NVIDIA driver {driver} is too old for CUDA {majors[-1]}, which the locked engines of profile "
                f"{profile.name} use; it needs {wanted} or newer (rent an image with driver R{need[0]}+)")
    return None


def python_problem(version: tuple[int, int] | None = None) -> str | None:
    version = version or sys.version_info[:2]
    low, high = PYTHONS
    if not low <= version <= high:
        return (f"Python {version[0]}.{version[1]} cannot run both engines; use Python "
                f"{low[0]}.{low[1]} to {high[0]}.{high[1]}")
    return None


def disk_problem(path: Path, need_bytes: int) -> str | None:
    """Whether the file system holding `path` (or its nearest existing parent) has `need_bytes` free."""
    probe = _existing(path)
    free = shutil.disk_usage(probe).free
    if free < need_bytes:
        return (f"{probe} has {free / GIB:.0f} GiB free; this profile needs {need_bytes / GIB:.0f} GiB "
                "(engine venvs and models): free some space or point SERVELAB_HOME and HF_HOME at a larger disk")
    return None


def model_bytes(model_id: str) -> int:
    """A hub model's weights as they download (bf16 safetensors: 2 bytes a parameter), from its known size."""
    shape = model_shapes.known_shapes().get(model_id)
    return int(shape.params_b * 1e9 * 2) if shape and shape.params_b else 0


def missing_disk(profile: profiles.Profile, model_ids: list[str]) -> list[str]:
    """What setup still has to write, against the free space of the file system it goes to: the engine venvs that
    are not built yet (under $SERVELAB_HOME) and the models not downloaded yet (the Hugging Face cache), each with
    a tenth more for the caches engines write. A rerun needs only what is missing."""
    from servelab.machine import hub, models
    from servelab.machine.paths import cache_home

    envs = {profile.engine_env(e) for e in ("vllm", "sglang")}
    venvs = sum(env_bytes(e) for e in envs if not engine_envs.get(e).is_ready())
    cache = models.hub_cache()
    weights = sum(model_bytes(m) for m in model_ids if not hub.cached(cache / f"models--{m.replace('/', '--')}"))
    found = [disk_problem(cache_home(), int(venvs * 1.1)) if venvs else None,
             disk_problem(cache, int(weights * 1.1)) if weights else None]
    if venvs and weights and _device(cache_home()) == _device(cache):  # one disk for both: their sum must fit
        found = [disk_problem(cache, int((venvs + weights) * 1.1))]
    return [line for line in found if line]


SHAPE_KEYS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "vocab_size",
              "max_position_embeddings")


def shape_problems(model_ids: list[str], cache: Path) -> list[str]:
    """servelab/data/model_shapes.toml against the config.json setup just downloaded: the book sizes KV caches,
    checks draft pairs and fits memory from that file before anything is downloaded, so a value there that the
    real model contradicts is one line naming model, key and both values."""
    shapes = model_shapes.known_shapes()
    found = []
    for model in model_ids:
        snaps = sorted((cache / f"models--{model.replace('/', '--')}" / "snapshots").glob("*/config.json"))
        if model not in shapes or not snaps:
            continue
        config = json.loads(snaps[-1].read_text())
        config = config.get("text_config", config)
        ours = shapes[model]
        for key in SHAPE_KEYS:
            if key in config and getattr(ours, key) and config[key] != getattr(ours, key):
                found.append(f"{model}: servelab/data/model_shapes.toml says {key} = {getattr(ours, key)}, its "
                             f"config.json says {config[key]}; correct the file (the plan and the chapters read it)")
    return found


def _existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists (where it will be created)."""
    while not path.exists():
        path = path.parent
    return path


def _device(path: Path) -> int:
    return _existing(path).stat().st_dev


def env_bytes(env_name: str) -> int:
    """What an engine venv takes on disk once built: its `disk_gib` in engine_envs.toml (measured with du)."""
    return int(float(engine_envs.get(env_name).spec.get("disk_gib", 0)) * GIB)
