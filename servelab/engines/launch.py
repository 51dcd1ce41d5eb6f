"""What it takes to launch each engine: its command line and environment, per profile.

One function per engine turns (profile, model, port, options) into argv + env. Everything
hardware-specific comes from the profile, so a notebook cell is the same on every machine. An option that
names one of the profile's own flags (dtype, context length, batch cap) replaces it, so each flag appears once.
The process itself (start, wait, teardown) is servelab.engines.server's job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.machine import engine_envs
from servelab.machine.model_shapes import kv_bytes_per_token, served_model_shape
from servelab.machine.models import ModelRef
from servelab.machine.profiles import Profile

ENGINES = ("vllm", "sglang")
SGL_STAND_IN = Path(__file__).resolve().parent / "sgl_kernel_stand_in"


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
    env = engine_envs.get(profile.vllm_env)
    opts = dict(options)
    dtype = opts.pop("dtype", profile.dtype)
    argv = [str(env.path / "bin" / "vllm"), "serve", model.source,
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", model.served_name,
            "--dtype", dtype,
            "--max-model-len", str(opts.pop("max_model_len", profile.max_model_len)),
            "--max-num-seqs", str(opts.pop("max_num_seqs", profile.max_num_seqs)),
            "--enable-prompt-tokens-details",
            *profile.vllm_flags]
    _memory_options("vllm", profile, opts, model, dtype)
    return LaunchSpec("vllm", argv + _flags(opts))


def sglang_command(profile: Profile, model: ModelRef, port: int, options: dict[str, Any]) -> LaunchSpec:
    env = engine_envs.get(profile.sglang_env)
    opts = dict(options)
    dtype = opts.pop("dtype", profile.dtype)
    argv = [str(env.path / "bin" / "sglang"), "serve", "--model-path", model.source,
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", model.served_name,
            "--dtype", dtype,
            "--context-length", str(opts.pop("context_length", profile.max_model_len)),
            "--max-running-requests", str(opts.pop("max_running_requests", profile.max_num_seqs)),
            "--enable-metrics",
            *profile.sglang_flags]
    extra: dict[str, str] = {}
    if profile.is_cpu:
        if not (SGL_STAND_IN / "sgl_kernel" / "__init__.py").is_file():
            raise StandInMissing(f"SGLang's CPU stand-in for sgl_kernel is missing at {SGL_STAND_IN}; restore it "
                                 "from the repository (git checkout -- servelab/engines/sgl_kernel_stand_in)")
        extra.update({
            "SGLANG_USE_CPU_ENGINE": "1",
            # The cpu profile runs on the CPU even on a GPU machine (the stand-in refuses to load
            # where CUDA is visible).
            "CUDA_VISIBLE_DEVICES": "",
            # One thread per op was 4-10x faster than two on a 2-core machine.
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(SGL_STAND_IN),
        })
    _memory_options("sglang", profile, opts, model, dtype)
    return LaunchSpec("sglang", argv + _flags(opts), extra)


def _memory_options(engine: str, profile: Profile, opts: dict[str, Any], model: ModelRef, dtype: str) -> None:
    """Into `opts`: the KV budget (option or profile, in tokens) as the engine's flag, else, for vLLM, the profile's
    share of GPU memory. On CPU vLLM would size its cache from VLLM_CPU_KVCACHE_SPACE (whole GiB only); the
    budget flag takes any size, which chapters with tiny budgets need.

    The two engines' shares cover different things: vLLM's `--gpu-memory-utilization` covers weights,
    activations, CUDA graphs and KV cache (vllm/v1/worker/gpu_worker.py, determine_available_memory), SGLang's
    `--mem-fraction-static` weights and KV pool only, and SGLang chooses it from the card's memory so the rest
    holds activations and CUDA graphs (sglang/srt/arg_groups/memory_hook.py, handle_gpu_memory_settings). So
    SGLang gets no share from the profile: the profile's 0.90 would take that room away (servelab.engines.
    memory_fit computes what SGLang picks on each GPU class)."""
    budget = opts.pop("kv_cache_tokens", profile.kv_cache_tokens)
    if budget is None and profile.gpu_memory_utilization and engine == "vllm":
        opts.setdefault("gpu_memory_utilization", profile.gpu_memory_utilization)
    opts.update(kv_budget_flags(engine, budget, model, dtype))


def kv_budget_flags(engine: str, tokens: int | None, model: ModelRef, dtype: str) -> dict[str, int]:
    """The one place a KV budget (in tokens) becomes an engine flag; {} for None.

    SGLang sizes its pool in tokens (`--max-total-tokens`). vLLM takes bytes
    (`--kv-cache-memory-bytes`) and carves them into whole blocks itself, so the budget becomes
    `tokens` x the KV bytes of one token of this model in this dtype.
    """
    if tokens is None:
        return {}
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"kv_cache_tokens must be an integer >= 1 (tokens of KV cache), got {tokens!r}")
    if engine == "sglang":
        return {"max_total_tokens": tokens}
    return {"kv_cache_memory_bytes": tokens * kv_bytes_per_token(served_model_shape(model.source), dtype)}


def command(engine: str, profile: Profile, model: ModelRef, port: int, options: dict[str, Any]) -> LaunchSpec:
    if engine == "vllm":
        return vllm_command(profile, model, port, options)
    if engine == "sglang":
        return sglang_command(profile, model, port, options)
    raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(ENGINES)}")
