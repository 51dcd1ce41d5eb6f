"""Referee: replay radix-cache operations on SGLang's own RadixCache; one JSON document on stdout.

Runs inside SGLang's venv with no GPU and no server: `RadixCache.create_simulated(...)`
(sglang/srt/mem_cache/radix_cache.py), page size 1, LRU. Reads {"runs": [[op, ...], ...]} on stdin
(importing SGLang takes seconds, so every run comes in one call); each run starts from an empty cache
and each op is one of

    {"op": "insert", "tokens": [...]}      -> {"prefix_len": n}
    {"op": "match", "tokens": [...]}       -> {"length": n}   (its last node is remembered as handle i,
                                                              i = the op's index)
    {"op": "lock", "handle": i}            -> {"delta": d}    (inc_lock_ref on match i's node)
    {"op": "unlock", "handle": i}          -> {"delta": d}    (dec_lock_ref)
    {"op": "evict", "num_tokens": n}       -> {"evicted": n}
    {"op": "snapshot"}                     -> {"sequences": [...]}  (every cached leaf's token path)

and after every op the tree's total, evictable and protected token counts. At the end of a run: every
cached leaf sequence. Prints {"sglang": version, "runs": [{"results": [...], "sequences": [...]}, ...]}.
Imports nothing from servelab.
"""

from __future__ import annotations

import json
import sys
import time
from array import array


class _Allocator:
    """The one thing evict() asks of the KV allocator: take back a leaf's slots (nothing to free here)."""

    device = "cpu"

    def free_segment(self, indices, start_pos=0):
        return None


def _leaf_sequences(cache) -> list[list[int]]:
    out = []
    stack = [(cache.root_node, [])]
    while stack:
        node, prefix = stack.pop()
        for child in node.children.values():
            stack.append((child, prefix + list(child.key.token_ids)))
        if not node.children and node is not cache.root_node:
            out.append(prefix)
    return sorted(out)


def _replay(cache_factory, params, ops: list[dict]) -> dict:
    EvictParams, InsertParams, MatchPrefixParams, RadixKey = params
    cache = cache_factory()
    handles = {}
    results = []
    for i, op in enumerate(ops):
        kind = op["op"]
        if kind == "insert":
            res = cache.insert(InsertParams(key=RadixKey(array("q", op["tokens"]))))
            out = {"prefix_len": int(res.prefix_len)}
        elif kind == "match":
            res = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", op["tokens"]))))
            handles[i] = res.last_device_node
            out = {"length": int(res.device_prefix_len)}
        elif kind == "lock":
            out = {"delta": int(cache.inc_lock_ref(handles[op["handle"]]).delta)}
        elif kind == "unlock":
            out = {"delta": int(cache.dec_lock_ref(handles[op["handle"]]).delta)}
        elif kind == "evict":
            out = {"evicted": int(cache.evict(EvictParams(num_tokens=op["num_tokens"])).num_tokens_evicted)}
        elif kind == "snapshot":
            out = {"sequences": _leaf_sequences(cache)}
        else:
            raise SystemExit(f"unknown op {kind!r} at {i}; accepted: insert, match, lock, unlock, evict, snapshot")
        out.update(total=int(cache.total_size()), evictable=int(cache.evictable_size()),
                   protected=int(cache.protected_size()))
        results.append(out)
    return {"results": results, "sequences": _leaf_sequences(cache)}


def main() -> None:
    request = json.load(sys.stdin)
    started = time.perf_counter()
    import sglang
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

    imported = time.perf_counter() - started

    def factory():
        return RadixCache.create_simulated(disable=False, mock_allocator=_Allocator(), page_size=1)

    params = (EvictParams, InsertParams, MatchPrefixParams, RadixKey)
    runs = [_replay(factory, params, ops) for ops in request["runs"]]
    print(json.dumps({"sglang": sglang.__version__, "import_s": round(imported, 1), "runs": runs}))


if __name__ == "__main__":
    main()
