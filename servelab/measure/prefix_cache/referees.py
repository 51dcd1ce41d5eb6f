"""Chapter 04's referees: our two prefix caches and the engines' own code replay the same operations.

Radix tree: a seeded generator writes a sequence of cache operations the way a serving loop issues
them (match a prompt, lock the matched path while the request runs, insert the finished sequence,
unlock, evict when memory runs short), with shared prefixes, branches, prompts that end inside a
cached run, locks and evictions under pressure. :func:`replay_radix_tree` runs them on
:class:`servelab.sim.prefix_cache.RadixTree`; :func:`sglang_radix_replay` runs them on SGLang's
``RadixCache.create_simulated`` inside SGLang's venv (``engine_side/sgl_radix_referee.py``, no GPU, no
server); :func:`compare_with_sglang` puts the two side by side, one row per seed.

Block cache: :func:`block_ops` writes request lifecycles (admit a prompt, append decoded tokens, free)
into a small pool, so hits, refusals and evictions all happen; :func:`replay_block_cache` runs them on
:class:`servelab.sim.prefix_cache.BlockHashCache`, :func:`vllm_block_replay` on vLLM's own
``KVCacheManager`` in vLLM's venv (``engine_side/vllm_prefix_referee.py``, no model, no server), and
:func:`compare_with_vllm` compares hits, block tables, the free queue after every op, and the counters.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pandas as pd

from servelab.engines.engine_side import script
from servelab.integers import ceil_div
from servelab.machine import engine_envs
from servelab.machine.profiles import Profile
from servelab.sim.prefix_cache import BlockHashCache, RadixNode, RadixTree

Op = dict[str, Any]


def radix_ops(seed: int, num_requests: int = 40, vocab: int = 6, max_len: int = 48, lock_p: float = 0.5,
              evict_p: float = 0.35, max_evict: int = 24) -> list[Op]:
    """A seeded request stream as radix-cache operations: match, maybe lock, insert, maybe unlock, maybe evict.

    Each request's tokens continue an earlier sequence (multi-turn), branch off inside one, repeat a
    prefix of one (the match ends inside a node, which splits it) or start afresh; a small ``vocab``
    makes fresh sequences share short prefixes by chance too. After every eviction, and once more
    before the end, a ``snapshot`` op reads the cached sequences (every leaf's path). At the end every
    lock is released and the whole tree is evicted (the cleanup, the last op), so the final counts are
    comparable too.
    """
    rng = random.Random(seed)

    def fresh(lo: int, hi: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(rng.randint(lo, hi))]

    seen: list[list[int]] = []
    ops: list[Op] = []
    locked: list[int] = []
    for _ in range(num_requests):
        roll = rng.random()
        if seen and roll < 0.35:
            seq = rng.choice(seen) + fresh(1, 8)
        elif seen and roll < 0.65:
            base = rng.choice(seen)
            seq = base[:rng.randint(0, len(base))] + fresh(1, 8)
        elif seen and roll < 0.8:
            base = rng.choice(seen)
            seq = base[:rng.randint(1, len(base))]
        else:
            seq = fresh(1, 16)
        seq = seq[:max_len]
        ops.append({"op": "match", "tokens": seq})
        if rng.random() < lock_p:
            locked.append(len(ops) - 1)
            ops.append({"op": "lock", "handle": len(ops) - 1})
        ops.append({"op": "insert", "tokens": seq})
        seen.append(seq)
        if locked and rng.random() < 0.4:
            ops.append({"op": "unlock", "handle": locked.pop(rng.randrange(len(locked)))})
        if rng.random() < evict_p:
            ops.append({"op": "evict", "num_tokens": rng.randint(1, max_evict)})
            ops.append({"op": "snapshot"})
    ops.append({"op": "snapshot"})
    ops += [{"op": "unlock", "handle": h} for h in locked]
    ops.append({"op": "evict", "num_tokens": 10**9})
    return ops


def replay_radix_tree(ops: Sequence[Op], tree: RadixTree | None = None) -> dict[str, Any]:
    """Run ``ops`` on a fresh (or the given) RadixTree; the same document the SGLang referee prints per run."""
    tree = RadixTree() if tree is None else tree
    handles: dict[int, RadixNode] = {}
    results = []
    for i, op in enumerate(ops):
        kind = op["op"]
        if kind == "insert":
            out = {"prefix_len": tree.insert(op["tokens"]).prefix_len}
        elif kind == "match":
            match = tree.match_prefix(op["tokens"])
            handles[i] = match.node
            out = {"length": match.length}
        elif kind == "lock":
            out = {"delta": tree.inc_lock_ref(handles[op["handle"]])}
        elif kind == "unlock":
            out = {"delta": tree.dec_lock_ref(handles[op["handle"]])}
        elif kind == "evict":
            out = {"evicted": tree.evict(op["num_tokens"])}
        elif kind == "snapshot":
            out = {"sequences": sorted(list(s) for s in tree.sequences())}
        else:
            raise ValueError(f"unknown op {kind!r} at index {i}; accepted: insert, match, lock, unlock, evict, "
                             "snapshot")
        out.update(total=tree.total_tokens, evictable=tree.evictable_tokens, protected=tree.protected_tokens)
        results.append(out)
    return {"results": results, "sequences": sorted(list(s) for s in tree.sequences())}


def sglang_radix_replay(profile: Profile, runs: Sequence[Sequence[Op]], timeout: float = 300) -> dict[str, Any]:
    """Replay each op list on a fresh SGLang ``RadixCache`` in SGLang's venv, all in one process.

    SGLang's radix cache imports without the CPU stand-in for ``sgl_kernel`` and without
    ``SGLANG_USE_CPU_ENGINE``; both are dropped from the environment so a caller's server settings
    cannot change what gets imported, and CUDA is hidden so a GPU machine runs it on the CPU too.
    """
    python = engine_envs.get(profile.sglang_env).require().python
    env = engine_envs.cpu_only_env("SGLANG_USE_CPU_ENGINE", "PYTHONPATH")
    return engine_envs.run_script(python, script("sgl_radix_referee.py"), stdin=json.dumps({"runs": list(runs)}),
                                  env=env, timeout=timeout)


def agreement(ops: Sequence[Op], ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """One row: does every match length, eviction, lock delta, token count and cached-sequence snapshot agree.

    ``evicted tokens`` leaves out the last op, the cleanup that empties the tree; ``snapshot sequences``
    counts the cached sequences over all snapshots (taken before that cleanup), so it is not 0 when
    the snapshots compared something.
    """
    kinds = [op["op"] for op in ops]
    last_evict = max(i for i, k in enumerate(kinds) if k == "evict") if "evict" in kinds else -1
    snaps = [(a["sequences"], b["sequences"]) for k, a, b in zip(kinds, ours["results"], theirs["results"],
                                                                  strict=True) if k == "snapshot"]

    def same(kind: str, key: str) -> bool:
        return all(a[key] == b[key] for k, a, b in zip(kinds, ours["results"], theirs["results"], strict=True)
                   if k == kind)

    counts = ("total", "evictable", "protected")
    return {
        "ops": len(ops),
        "matched tokens": sum(r["length"] for k, r in zip(kinds, ours["results"], strict=True) if k == "match"),
        "evicted tokens": sum(r["evicted"] for i, (k, r) in enumerate(zip(kinds, ours["results"], strict=True))
                              if k == "evict" and i != last_evict),
        "snapshot sequences": sum(len(a) for a, _ in snaps),
        "match lengths agree": same("match", "length"),
        "insert prefixes agree": same("insert", "prefix_len"),
        "evictions agree": same("evict", "evicted"),
        "lock deltas agree": same("lock", "delta") and same("unlock", "delta"),
        "token counts agree": all(a[c] == b[c] for a, b in zip(ours["results"], theirs["results"], strict=True)
                                  for c in counts),
        "cached sequences agree": bool(snaps) and all(a == b for a, b in snaps),
    }


def compare_with_sglang(profile: Profile, seeds: Sequence[int], **ops_options: Any) -> pd.DataFrame:
    """For each seed, our tree and SGLang's on the same ops; one row per seed (one SGLang process for all)."""
    runs = [radix_ops(seed, **ops_options) for seed in seeds]
    theirs = sglang_radix_replay(profile, runs)
    rows = [{"seed": seed, **agreement(ops, replay_radix_tree(ops), run)}
            for seed, ops, run in zip(seeds, runs, theirs["runs"], strict=True)]
    frame = pd.DataFrame(rows)
    frame.attrs["sglang"] = theirs["sglang"]
    return frame


# ---- the block cache against vLLM -----------------------------------------------------------------


def block_ops(seed: int, num_requests: int = 30, vocab: int = 3, block_size: int = 4, num_blocks: int = 12,
              max_blocks: int = 6, max_running: int = 3, append_p: float = 0.4) -> list[Op]:
    """A seeded stream of request lifecycles for a pool of ``num_blocks`` blocks: admit, maybe append, free.

    Prompts continue, branch off, repeat a prefix of an earlier sequence (decoded tokens included) or
    start afresh, up to ``max_blocks`` blocks long. Up to ``max_running`` requests hold blocks at once,
    so admissions are sometimes refused and cached blocks get evicted. An append is written only when
    it cannot run out of blocks even if no block were shared (the engine would preempt instead, which
    neither side models). Every request is freed at the end.
    """
    rng = random.Random(seed)
    seen: list[list[int]] = []
    running: dict[str, int] = {}  # tokens each admitted-or-refused request could hold
    ops: list[Op] = []

    def fresh(lo: int, hi: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(rng.randint(lo, hi))]

    def bound(extra: int = 0) -> int:
        return sum(ceil_div(n, block_size) for n in running.values()) + extra

    def free_one() -> None:
        rid = rng.choice(sorted(running))
        del running[rid]
        ops.append({"op": "free", "id": rid})

    for r in range(num_requests):
        roll = rng.random()
        base = rng.choice(seen) if seen else []
        if base and roll < 0.35:
            seq = base + fresh(1, 2 * block_size)
        elif base and roll < 0.65:
            seq = base[:rng.randint(0, len(base))] + fresh(1, 2 * block_size)
        elif base and roll < 0.8:
            seq = base[:rng.randint(1, len(base))]
        else:
            seq = fresh(1, 3 * block_size)
        seq = seq[:max_blocks * block_size]
        while len(running) >= max_running:
            free_one()
        rid = f"r{r}"
        ops.append({"op": "admit", "id": rid, "tokens": seq})
        running[rid] = len(seq)
        if rng.random() < append_p:
            more = fresh(1, 2 * block_size)
            if bound() - ceil_div(len(seq), block_size) + ceil_div(len(seq) + len(more), block_size) <= num_blocks:
                ops.append({"op": "append", "id": rid, "tokens": more})
                running[rid] += len(more)
                seq = seq + more
        seen.append(seq)
        if running and rng.random() < 0.5:
            free_one()
    while running:
        free_one()
    return ops


def replay_block_cache(ops: Sequence[Op], block_size: int, num_blocks: int,
                       cache: BlockHashCache | None = None) -> dict[str, Any]:
    """Run ``ops`` on a fresh (or the given) BlockHashCache; the document the vLLM referee prints per run."""
    cache = BlockHashCache(num_blocks, block_size) if cache is None else cache
    admitted: set[str] = set()
    results = []
    for i, op in enumerate(ops):
        kind, rid = op["op"], op["id"]
        if kind not in ("admit", "append", "free"):
            raise ValueError(f"unknown op {kind!r} at index {i}; accepted: admit, append, free")
        if kind == "admit":
            got = cache.allocate(rid, op["tokens"])
            out: dict[str, Any] = {"hit": None}
            if got is not None:
                admitted.add(rid)
                out = {"hit": got.hit_tokens, "blocks": cache.request_blocks(rid)}
        elif rid not in admitted:
            out = {"skipped": True}
        elif kind == "append":
            cache.append(rid, op["tokens"])
            out = {"blocks": cache.request_blocks(rid)}
        else:
            cache.free(rid)
            admitted.discard(rid)
            out = {}
        out["free_queue"] = cache.free_queue()
        results.append(out)
    return {"results": results, "evicted": cache.evicted_blocks,
            "counters": {"requests": cache.requests, "queries": cache.queries, "hits": cache.hits}}


def vllm_block_replay(profile: Profile, runs: Sequence[Sequence[Op]], block_size: int, num_blocks: int,
                      timeout: float = 300) -> dict[str, Any]:
    """Replay each op list on a fresh vLLM ``KVCacheManager`` in vLLM's venv, all in one process (CUDA hidden)."""
    python = engine_envs.get(profile.vllm_env).require().python
    env = engine_envs.cpu_only_env("PYTHONPATH")
    document = {"block_size": block_size, "num_blocks": num_blocks, "runs": list(runs)}
    return engine_envs.run_script(python, script("vllm_prefix_referee.py"), stdin=json.dumps(document),
                                  env=env, timeout=timeout)


def block_agreement(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """One row: do hits (and refusals), block tables, the free queue after every op and the counters agree."""
    pairs = list(zip(ours["results"], theirs["results"], strict=True))
    admits = [a for a, _ in pairs if "hit" in a]
    return {
        "ops": len(pairs),
        "admitted": sum(a["hit"] is not None for a in admits),
        "refused": sum(a["hit"] is None for a in admits),
        "hit tokens": ours["counters"]["hits"],
        "evicted blocks": ours.get("evicted"),
        "hits agree": all(a.get("hit", -1) == b.get("hit", -1) for a, b in pairs),
        "block tables agree": all(a.get("blocks") == b.get("blocks") for a, b in pairs),
        "free queues agree": all(a["free_queue"] == b["free_queue"] for a, b in pairs),
        "counters agree": ours["counters"] == theirs["counters"],
    }


def compare_with_vllm(profile: Profile, seeds: Sequence[int], block_size: int = 4, num_blocks: int = 12,
                      **ops_options: Any) -> pd.DataFrame:
    """For each seed, our block cache and vLLM's KVCacheManager on the same ops; one row per seed."""
    runs = [block_ops(seed, block_size=block_size, num_blocks=num_blocks, **ops_options) for seed in seeds]
    theirs = vllm_block_replay(profile, runs, block_size, num_blocks)
    rows = [{"seed": seed, **block_agreement(replay_block_cache(ops, block_size, num_blocks), run)}
            for seed, ops, run in zip(seeds, runs, theirs["runs"], strict=True)]
    frame = pd.DataFrame(rows)
    frame.attrs["vllm"] = theirs["vllm"]
    return frame
