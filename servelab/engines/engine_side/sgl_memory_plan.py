"""What SGLang resolves its memory settings to on a GPU of a given size, with no GPU here.

Runs inside the SGLang venv and imports nothing from servelab. Each command goes through SGLang's own
`prepare_server_args` and `ServerArgs.resolve_once()` (the resolution pipeline `sglang serve` runs
before it starts anything; `--device cuda` is added when no `--device` is given). The one thing faked is
the lowest layer: `sglang.srt.utils.common.get_device_memory_capacity`, which on a CUDA machine returns
nvidia-smi's `memory.total` in MiB (`get_nvgpu_memory_capacity`). It is replaced where it is defined and
in every sglang module that imported it by name (`sglang/srt/arg_groups/memory_hook.py`,
`kv_shard_hook.py`, `model_overrides/qwen3_vl.py`), so `handle_gpu_memory_settings` and everything else
that reads the capacity see `gpu_mib`. SGLang's heuristics then run unchanged: `chunked_prefill_size` and
the decode CUDA-graph `max_bs` by capacity, and, when `--mem-fraction-static` is not given,
mem_fraction_static = (capacity - reserved_mem) / capacity.

When the command gives `--mem-fraction-static`, it is resolved a second time without it, so the answer
also says which fraction SGLang itself would pick on that GPU (`own_mem_fraction_static`).

stdin: {"commands": [{"label": ..., "args": [...server args...], "gpu_mib": N}, ...]}
stdout: one JSON document {"version": ..., "results": [{"label", "ok", "error", "gpu_mib", "resolved",
"own_mem_fraction_static", "own_error"}]}. Everything SGLang prints goes to stderr.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from engine_report import Capture, describe  # beside this script

os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # before sglang is imported: is_cpu() reads it

FIELDS = ("mem_fraction_static", "chunked_prefill_size", "max_running_requests", "max_total_tokens",
          "context_length", "tp_size", "device", "speculative_algorithm", "speculative_draft_model_path")
FRACTION_FLAG = "--mem-fraction-static"
# The modules that look the capacity function up by name during resolution (imported before patching).
LOOKED_UP_IN = ("sglang.srt.utils.common", "sglang.srt.arg_groups.memory_hook", "sglang.srt.arg_groups.kv_shard_hook",
                "sglang.srt.arg_groups.model_overrides.qwen3_vl")
CAPACITY: dict[str, float | None] = {"mib": None}


def fake_capacity() -> None:
    """Replace get_device_memory_capacity wherever sglang looks it up; it answers CAPACITY["mib"] for CUDA."""
    modules = [importlib.import_module(name) for name in LOOKED_UP_IN]
    original = modules[0].get_device_memory_capacity

    def get_device_memory_capacity(device: str | None = None):
        if device in (None, "cuda") and CAPACITY["mib"] is not None:
            return CAPACITY["mib"]  # a float in MiB, as get_nvgpu_memory_capacity returns it
        return original(device)

    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "sglang" and getattr(module, "get_device_memory_capacity", None) is original:
            module.get_device_memory_capacity = get_device_memory_capacity
    for module in modules:
        if module.get_device_memory_capacity is not get_device_memory_capacity:
            raise RuntimeError(f"{module.__name__}.get_device_memory_capacity is not the function common defines")


def without_fraction(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == FRACTION_FLAG:
            skip = True
        elif not arg.startswith(FRACTION_FLAG + "="):
            out.append(arg)
    return out


def resolve(args: list[str]) -> tuple[dict, str]:
    """SGLang's resolved values of FIELDS (plus the decode CUDA-graph max_bs), or its error."""
    from sglang.srt.server_args import prepare_server_args

    with Capture("sglang") as cap:
        try:
            server_args = prepare_server_args(args)
            server_args.resolve_once()
        except BaseException as err:  # noqa: BLE001 - the engine's own error is the result
            if isinstance(err, KeyboardInterrupt):
                raise
            return {}, describe(err, cap.stderr.getvalue())
    resolved = server_args.resolved_dict()
    out = {name: resolved.get(name) for name in FIELDS}
    graphs = resolved.get("cuda_graph_config") or {}
    out["cuda_graph_decode_max_bs"] = (graphs.get("decode") or {}).get("max_bs") if isinstance(graphs, dict) else None
    return out, ""


def plan(command: dict) -> dict:
    args = list(command["args"])
    if not any(a == "--device" or a.startswith("--device=") for a in args):
        args += ["--device", "cuda"]
    CAPACITY["mib"] = float(command["gpu_mib"])
    resolved, error = resolve(args)
    own, own_error = (resolved.get("mem_fraction_static"), error)
    if any(a == FRACTION_FLAG or a.startswith(FRACTION_FLAG + "=") for a in args):
        own_resolved, own_error = resolve(without_fraction(args))
        own = own_resolved.get("mem_fraction_static")
    return {"label": command["label"], "ok": not error, "error": error, "gpu_mib": CAPACITY["mib"], "args": args,
            "resolved": resolved, "own_mem_fraction_static": own, "own_error": own_error}


def main() -> None:
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)
        request = json.load(sys.stdin)
        version = importlib.import_module("sglang").__version__
        fake_capacity()
        results = [plan(c) for c in request["commands"]]
        out.write(json.dumps({"version": version, "results": results}))


if __name__ == "__main__":
    main()
