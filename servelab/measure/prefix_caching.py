"""Chapter 03's referee: our radix tree and SGLang's own RadixCache replay the same operations.

A seeded generator writes a sequence of cache operations the way a serving loop issues them (match
a prompt, lock the matched path while the request runs, insert the finished sequence, unlock, evict
when memory runs short), with shared prefixes, branches, prompts that end inside a cached run, locks
and evictions under pressure. :func:`replay_radix_tree` runs them on
:class:`servelab.sim.prefix_cache.RadixTree`; :func:`sglang_radix_replay` runs them on SGLang's
``RadixCache.create_simulated`` inside SGLang's venv (``engine_side/sgl_radix_referee.py``, no GPU, no
server); :func:`compare_with_sglang` puts the two side by side, one row per seed.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from typing import Any

import pandas as pd

from servelab.engines.engine_side import script
from servelab.machine import engine_envs
from servelab.machine.profiles import Profile
from servelab.sim.prefix_cache import RadixNode, RadixTree

Op = dict[str, Any]


def radix_ops(seed: int, num_requests: int = 40, vocab: int = 6, max_len: int = 48, lock_p: float = 0.5,
              evict_p: float = 0.35, max_evict: int = 24) -> list[Op]:
    """A seeded request stream as radix-cache operations: match, maybe lock, insert, maybe unlock, maybe evict.

    Each request's tokens continue an earlier sequence (multi-turn), branch off inside one, repeat a
    prefix of one (the match ends inside a node, which splits it) or start afresh; a small ``vocab``
    makes fresh sequences share short prefixes by chance too. At the end every lock is released and
    the whole tree is evicted, so the final counts are comparable too.
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
        else:
            raise ValueError(f"unknown op {kind!r} at index {i}; accepted: insert, match, lock, unlock, evict")
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
    drop = ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH")
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, "CUDA_VISIBLE_DEVICES": "",
           "HF_HUB_OFFLINE": "1"}
    return engine_envs.run_script(python, script("sgl_radix_referee.py"), stdin=json.dumps({"runs": list(runs)}),
                                  env=env, timeout=timeout)


def agreement(ops: Sequence[Op], ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """One row: does every match length, eviction, lock delta, token count and final tree agree."""
    kinds = [op["op"] for op in ops]

    def same(kind: str, key: str) -> bool:
        return all(a[key] == b[key] for k, a, b in zip(kinds, ours["results"], theirs["results"], strict=True)
                   if k == kind)

    counts = ("total", "evictable", "protected")
    return {
        "ops": len(ops),
        "matched tokens": sum(r["length"] for k, r in zip(kinds, ours["results"], strict=True) if k == "match"),
        "evicted tokens": sum(r["evicted"] for k, r in zip(kinds, ours["results"], strict=True) if k == "evict"),
        "match lengths agree": same("match", "length"),
        "insert prefixes agree": same("insert", "prefix_len"),
        "evictions agree": same("evict", "evicted"),
        "lock deltas agree": same("lock", "delta") and same("unlock", "delta"),
        "token counts agree": all(a[c] == b[c] for a, b in zip(ours["results"], theirs["results"], strict=True)
                                  for c in counts),
        "cached sequences agree": ours["sequences"] == theirs["sequences"],
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
