"""What it takes to launch each engine: its command line and environment, per profile.

One function per engine turns (profile, model, port, options) into argv + env. Everything
hardware-specific comes from the profile, so a notebook cell is the same on every machine.
The process itself (start, wait, teardown) is servelab.server's job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from servelab import envs
from servelab.models import ModelRef
from servelab.paths import REPO
from servelab.profiles import Profile

ENGINES = ("vllm", "sglang")
SGL_STAND_IN = REPO / "servelab" / "sgl_kernel_stand_in"


class StandInMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class LaunchSpec:
    engine: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def _flags(options: dict[str, Any]) -> list[str]:
    """{"max_num_seqs": 4, "enable_x": True} -> ["--max-num-seqs", "4", "--enable-x"]."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def vllm_command(profile: Profile, model: ModelRef, port: int, options: dict[str, Any]) -> LaunchSpec:
    env = envs.get(profile.vllm_env)
    opts = dict(options)
    argv = [str(env.path / "bin" / "vllm"), "serve", model.source,
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", model.served_name,
            "--dtype", opts.pop("dtype", profile.dtype),
            "--max-model-len", str(profile.max_model_len),
            "--max-num-seqs", str(profile.max_num_seqs),
            "--enable-prompt-tokens-details",
            *profile.vllm_flags]
    if profile.is_cpu:
        # On CPU vLLM sizes its KV cache from VLLM_CPU_KVCACHE_SPACE (whole GiB only) or from
        # --kv-cache-memory-bytes; the flag takes any size, which chapters with tiny budgets need.
        opts.setdefault("kv_cache_gib", profile.kv_cache_gib)
    elif profile.gpu_memory_utilization:
        opts.setdefault("gpu_memory_utilization", profile.gpu_memory_utilization)
    if (gib := opts.pop("kv_cache_gib", None)) is not None:
        opts.setdefault("kv_cache_memory_bytes", int(gib * 2**30))
    return LaunchSpec("vllm", argv + _flags(opts))


def sglang_command(profile: Profile, model: ModelRef, port: int, options: dict[str, Any]) -> LaunchSpec:
    env = envs.get(profile.sglang_env)
    opts = dict(options)
    dtype = opts.pop("dtype", profile.dtype)
    argv = [str(env.path / "bin" / "sglang"), "serve", "--model-path", model.source,
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", model.served_name,
            "--dtype", dtype,
            "--context-length", str(profile.max_model_len),
            "--max-running-requests", str(profile.max_num_seqs),
            "--enable-metrics",
            *profile.sglang_flags]
    extra: dict[str, str] = {}
    if profile.is_cpu:
        if not (SGL_STAND_IN / "sgl_kernel" / "__init__.py").is_file():
            raise StandInMissing(f"SGLang's CPU stand-in for sgl_kernel is missing at {SGL_STAND_IN}; "
                                    "restore it from the repository (git checkout -- servelab/sgl_kernel_stand_in)")
        extra.update({
            "SGLANG_USE_CPU_ENGINE": "1",
            # The cpu profile runs on the CPU even on a GPU machine (the stand-in refuses to load
            # where CUDA is visible).
            "CUDA_VISIBLE_DEVICES": "",
            # One thread per op was 4-10x faster than two on a 2-core machine.
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(SGL_STAND_IN),
        })
        opts.setdefault("kv_cache_gib", profile.kv_cache_gib)
    elif profile.gpu_memory_utilization:
        opts.setdefault("mem_fraction_static", profile.gpu_memory_utilization)
    if (gib := opts.pop("kv_cache_gib", None)) is not None:
        # SGLang sizes its KV pool in tokens.
        opts.setdefault("max_total_tokens", kv_tokens_for(dtype, model, gib))
    return LaunchSpec("sglang", argv + _flags(opts), extra)


def kv_tokens_for(dtype: str, model: ModelRef, gib: float) -> int:
    """Tokens of KV cache that `gib` holds for this model and dtype (SGLang sizes its pool in tokens)."""
    from servelab.kvcache import kv_bytes_per_token, served_model_shape

    shape = served_model_shape(model.source)
    return int(gib * 2**30 // kv_bytes_per_token(shape, dtype))


def command(engine: str, profile: Profile, model: ModelRef, port: int, options: dict[str, Any]) -> LaunchSpec:
    if engine == "vllm":
        return vllm_command(profile, model, port, options)
    if engine == "sglang":
        return sglang_command(profile, model, port, options)
    raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(ENGINES)}")
