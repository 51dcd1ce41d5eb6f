"""vLLM's own defaults for sizing its KV cache, read from its config classes.

Runs inside the vLLM venv and imports nothing from servelab. Prints one JSON object: the defaults of
the `EngineArgs` fields that decide how much memory the KV cache gets (`gpu_memory_utilization`,
`kv_cache_memory_bytes`, `block_size`, `kv_cache_dtype`), `CacheConfig.DEFAULT_BLOCK_SIZE` (the block
size when neither the user nor the attention backend picks one), and the vLLM version.

Usage: python vllm_cache_defaults.py
"""

from __future__ import annotations

import dataclasses
import json

FIELDS = ("gpu_memory_utilization", "kv_cache_memory_bytes", "block_size", "kv_cache_dtype")


def main() -> dict:
    import vllm
    from vllm.config import CacheConfig
    from vllm.engine.arg_utils import EngineArgs

    defaults = {f.name: f.default for f in dataclasses.fields(EngineArgs) if f.name in FIELDS}
    missing = [name for name in FIELDS if name not in defaults]
    if missing:
        raise SystemExit(f"vLLM {vllm.__version__}: EngineArgs has no field {', '.join(missing)}")
    return {**defaults, "CacheConfig.DEFAULT_BLOCK_SIZE": CacheConfig.DEFAULT_BLOCK_SIZE, "version": vllm.__version__}


if __name__ == "__main__":
    print(json.dumps(main()))
