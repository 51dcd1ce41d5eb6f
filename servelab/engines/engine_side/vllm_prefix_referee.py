"""Referee: replay prefix-cache block operations on vLLM's own KVCacheManager; one JSON document on stdout.

Runs inside vLLM's venv with no model, no worker and no server: vLLM's scheduler-side KV cache manager
(``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``, ``single_type_kv_cache_manager.py``) built on
a minimal ``KVCacheConfig`` (one full-attention group; the tensor shape is never used), block hashes
from vLLM's own ``get_request_block_hasher`` with SHA-256, and ``Request`` objects that carry only
token ids. Each admission follows the scheduler's order (``vllm/v1/core/sched/scheduler.py``):
``get_computed_blocks`` -> ``allocate_slots`` -> ``record_prefix_cache_stats`` on success.

Reads {"block_size": B, "num_blocks": N, "runs": [[op, ...], ...]} on stdin; each run starts from a
fresh manager with N usable blocks (N + 1 in the pool: vLLM keeps block 0 as its null block, so block
ids are reported minus one, counting from 0 like servelab's simulator). Ops:

    {"op": "admit", "id": r, "tokens": [...]}   -> {"hit": n, "blocks": [...]}  or {"hit": null} if refused
    {"op": "append", "id": r, "tokens": [...]}  -> {"blocks": [...]}  (one decode step per token)
    {"op": "free", "id": r}                     -> {}

ops on a request that was refused answer {"skipped": true}. After every op: "free_queue", the free
block ids in the order vLLM hands them out (the first is evicted first). At the end of a run the
prefix-cache counters (requests, queries, hits). Prints {"vllm": version, "runs": [...]}.
Imports nothing from servelab.
"""

from __future__ import annotations

import json
import sys
import time


def _replay(modules, block_size: int, num_blocks: int, ops: list[dict]) -> dict:
    torch, SamplingParams, sha256, KVCacheManager, hasher_for, spec_types, Request = modules
    FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec = spec_types
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    config = KVCacheConfig(num_blocks=num_blocks + 1, kv_cache_tensors=[],
                           kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    manager = KVCacheManager(config, max_model_len=1 << 20, scheduler_block_size=block_size,
                             hash_block_size=block_size, enable_caching=True, log_stats=True)
    hasher = hasher_for(block_size, sha256)
    running: dict[str, object] = {}
    stats = {"requests": 0, "queries": 0, "hits": 0}

    def table(rid: str) -> list[int]:
        return [b - 1 for b in manager.get_block_ids(rid)[0]]

    results = []
    for i, op in enumerate(ops):
        kind, rid = op["op"], op["id"]
        if kind not in ("admit", "append", "free"):
            raise SystemExit(f"unknown op {kind!r} at {i}; accepted: admit, append, free")
        if kind == "admit":
            request = Request(rid, list(op["tokens"]), SamplingParams(max_tokens=1 << 16), None,
                              block_hasher=hasher)
            computed, hit, _ = manager.get_computed_blocks(request)
            new = manager.allocate_slots(request, request.num_tokens - hit, num_new_computed_tokens=hit,
                                         new_computed_blocks=computed)
            if new is None:
                out = {"hit": None}
            else:
                manager.record_prefix_cache_stats(request, hit)
                request.num_computed_tokens = request.num_tokens
                running[rid] = request
                out = {"hit": hit, "blocks": table(rid)}
        elif rid not in running:
            out = {"skipped": True}
        elif kind == "append":
            request = running[rid]
            for token in op["tokens"]:
                request.append_output_token_ids(token)
                if manager.allocate_slots(request, 1) is None:
                    raise SystemExit(f"op {i}: no free block to append to {rid!r}; the op stream must avoid this")
                request.num_computed_tokens += 1
            out = {"blocks": table(rid)}
        else:
            manager.free(running.pop(rid))
            out = {}
        if manager.prefix_cache_stats is not None:
            got = manager.make_prefix_cache_stats()
            for key in stats:
                stats[key] += getattr(got, key)
        out["free_queue"] = [b.block_id - 1 for b in manager.block_pool.free_block_queue.get_all_free_blocks()]
        results.append(out)
    return {"results": results, "counters": stats}


def main() -> None:
    request = json.load(sys.stdin)
    started = time.perf_counter()
    import torch
    import vllm
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    imported = time.perf_counter() - started
    init_none_hash(sha256)
    modules = (torch, SamplingParams, sha256, KVCacheManager, get_request_block_hasher,
               (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec), Request)
    runs = [_replay(modules, request["block_size"], request["num_blocks"], ops) for ops in request["runs"]]
    print(json.dumps({"vllm": vllm.__version__, "import_s": round(imported, 1), "runs": runs}))


if __name__ == "__main__":
    main()
