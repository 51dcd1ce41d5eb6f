"""vLLM's own scheduler defaults that decide chunked prefill, read from its config classes.

Runs inside the vLLM venv and imports nothing from servelab. Prints one JSON object:
`EngineArgs.get_batch_defaults(world_size)` on this machine's platform (the default
`max_num_batched_tokens` for `vllm serve` and for the `LLM` class), the `EngineArgs` field defaults
of `enable_chunked_prefill`, `max_num_batched_tokens` and `long_prefill_token_threshold`, whether any
`*partial_prefill*` field exists, and the vLLM version. ``cuda_by_device`` runs the same
`get_batch_defaults` with the platform replaced by a stand-in CUDA device of a given memory and
name (its branches depend only on those two, and on `is_cpu` / `is_tpu`), so the GPU defaults
come from vLLM's own code on a machine without a GPU.

Usage: python vllm_scheduler_defaults.py [WORLD_SIZE ...]   (default: 1)
"""

from __future__ import annotations

import dataclasses
import json
import sys

GIB = 1 << 30
# stand-in devices: (label, total memory in GiB, device name as the platform reports it)
CUDA_DEVICES = (("24 GiB (L4-class)", 24, "nvidia l4"), ("80 GiB A100", 80, "nvidia a100-sxm4-80gb"),
                ("80 GiB H100", 80, "nvidia h100 80gb hbm3"), ("141 GiB H200", 141, "nvidia h200"),
                ("180 GiB B200", 180, "nvidia b200"))
FIELDS = ("enable_chunked_prefill", "max_num_batched_tokens", "long_prefill_token_threshold")


def main(world_sizes: list[int]) -> dict:
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    fields = {f.name: f.default for f in dataclasses.fields(EngineArgs)}
    batch = {}
    for ws in world_sizes:
        tokens, _ = EngineArgs.get_batch_defaults(world_size=ws)
        batch[str(ws)] = {"serve": tokens.get(UsageContext.OPENAI_API_SERVER),
                          "LLM class": tokens.get(UsageContext.LLM_CLASS)}
    return {"version": vllm.__version__, "cuda_by_device": cuda_defaults(), "platform": type(current_platform).__name__,
            "default_max_num_batched_tokens": batch,
            **{f"EngineArgs.{name}": fields.get(name, "absent") for name in FIELDS},
            "partial_prefill_fields": sorted(n for n in fields if "partial_prefill" in n)}


def batch_defaults_on(gib: int, name: str) -> tuple[dict, dict]:
    """`EngineArgs.get_batch_defaults` (max_num_batched_tokens, max_num_seqs by usage context) with the
    platform replaced by a stand-in CUDA device of `gib` GiB named `name` (world size 1; the CUDA
    branches ignore it)."""
    from types import SimpleNamespace
    from unittest import mock

    from vllm.engine import arg_utils

    device = SimpleNamespace(get_device_total_memory=lambda: gib * GIB, get_device_name=lambda: name,
                             is_cpu=lambda: False, is_tpu=lambda: False)
    with mock.patch.object(arg_utils, "current_platform", device):
        return arg_utils.EngineArgs.get_batch_defaults(world_size=1)


def cuda_defaults() -> dict[str, dict[str, int]]:
    """Default max_num_batched_tokens per stand-in CUDA device."""
    from vllm.usage.usage_lib import UsageContext

    out = {}
    for label, gib, name in CUDA_DEVICES:
        tokens, _ = batch_defaults_on(gib, name)
        out[label] = {"serve": tokens.get(UsageContext.OPENAI_API_SERVER),
                      "LLM class": tokens.get(UsageContext.LLM_CLASS)}
    return out


if __name__ == "__main__":
    print(json.dumps(main([int(a) for a in sys.argv[1:]] or [1])))
