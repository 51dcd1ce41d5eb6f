"""vLLM's own scheduler defaults that decide chunked prefill, read from its config classes.

Runs inside the vLLM venv and imports nothing from servelab. Prints one JSON object:
`EngineArgs.get_batch_defaults(world_size)` on this machine's platform (the default
`max_num_batched_tokens` for `vllm serve` and for the `LLM` class), the `EngineArgs` field defaults
of `enable_chunked_prefill`, `max_num_batched_tokens` and `long_prefill_token_threshold`, whether any
`*partial_prefill*` field exists, and the vLLM version.

Usage: python vllm_scheduler_defaults.py [WORLD_SIZE ...]   (default: 1)
"""

from __future__ import annotations

import dataclasses
import json
import sys

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
    return {"version": vllm.__version__, "platform": type(current_platform).__name__,
            "default_max_num_batched_tokens": batch,
            **{f"EngineArgs.{name}": fields.get(name, "absent") for name in FIELDS},
            "partial_prefill_fields": sorted(n for n in fields if "partial_prefill" in n)}


if __name__ == "__main__":
    print(json.dumps(main([int(a) for a in sys.argv[1:]] or [1])))
