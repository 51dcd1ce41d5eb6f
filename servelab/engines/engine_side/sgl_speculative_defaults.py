"""What SGLang resolves its speculative-decoding arguments to, and which of its handlers decided each one.

Runs inside the SGLang venv and imports nothing from servelab. Each command's arguments go through
SGLang's own `prepare_server_args` and `ServerArgs.resolve_once()` (the resolution pipeline that
`sglang serve` runs before it starts anything), then the resolved values of every `speculative_*`
field and `max_running_requests` are read with `ServerArgs.resolved_dict()`, and the handler that
declared each one from the record's `_resolved_overrides`. `SGLANG_USE_CPU_ENGINE` is never set here.

stdin: {"commands": [{"label": ..., "args": [...]}, ...]}
It also reports whether this venv can run SGLang's speculative paths on the CPU: they build and
verify draft trees with `sgl_kernel`'s `build_tree_kernel_efficient_cpu` and `verify_tree_greedy_cpu`
(`sglang/kernels/ops/speculative/spec_tree.py`), torch ops that only a CPU build of sgl_kernel registers.

stdout: one JSON document {"version": ..., "results": [{"label", "ok", "error", "resolved", "decided_by"}],
"cpu_ops": {op: "registered" | why not}}. Everything SGLang prints goes to stderr.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from engine_report import Capture, describe  # beside this script

os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # before sglang is imported: is_cpu() reads it

FIELDS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
          "speculative_num_draft_tokens", "max_running_requests", "speculative_ngram_max_bfs_breadth",
          "speculative_accept_threshold_single", "speculative_accept_threshold_acc",
          "speculative_use_rejection_sampling", "device")


def resolve(args: list[str]) -> dict:
    from sglang.srt.server_args import prepare_server_args

    with Capture("sglang") as cap:
        try:
            server_args = prepare_server_args(args)
            server_args.resolve_once()
        except BaseException as err:  # noqa: BLE001 - the engine's own error is the result
            if isinstance(err, KeyboardInterrupt):
                raise
            return {"ok": False, "error": describe(err, cap.stderr.getvalue()), "resolved": {}, "decided_by": {}}
    resolved = server_args.resolved_dict()
    decided_by = {}
    for source, declared in getattr(server_args, "_resolved_overrides", None) or ():
        for name in declared:
            if name in FIELDS:
                decided_by[name] = source
    return {"ok": True, "error": "", "resolved": {name: resolved.get(name) for name in FIELDS},
            "decided_by": decided_by}


CPU_OPS = ("build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu")


def cpu_ops() -> dict[str, str]:
    """Whether each CPU op of SGLang's speculative tree code is registered with torch, else why not."""
    import torch

    try:
        import sgl_kernel  # noqa: F401 - importing registers its ops
    except BaseException as err:  # noqa: BLE001 - reported, not raised
        loaded = f"import sgl_kernel failed: {describe(err, '')[:200]}"
    else:
        loaded = ""
    out = {}
    for name in CPU_OPS:
        try:
            getattr(torch.ops.sgl_kernel, name)
            out[name] = "registered"
        except (AttributeError, RuntimeError) as err:
            out[name] = f"not registered ({type(err).__name__}){'; ' + loaded if loaded else ''}"
    return out


def main() -> None:
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)
        request = json.load(sys.stdin)
        version = importlib.import_module("sglang").__version__
        results = [{"label": c["label"], **resolve(list(c["args"]))} for c in request["commands"]]
        out.write(json.dumps({"version": version, "results": results, "cpu_ops": cpu_ops()}))


if __name__ == "__main__":
    main()
