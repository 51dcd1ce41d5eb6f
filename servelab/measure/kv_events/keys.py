"""Content keys: one name for a cached unit whatever hash the engine or the simulator gives it.

A cached unit is a vLLM block (``block_size`` tokens) or an SGLang page (``page_size`` tokens, 1 on CPU). Both
engines name a unit by a hash chained over the whole prefix that ends with it (vLLM: SHA-256 of the parent's hash,
the block's token ids and extra keys, ``hash_block_tokens`` in ``vllm/v1/core/kv_cache_utils.py``; SGLang: a
SHA-256 page chain cut to a signed 64-bit integer, ``compute_node_hash_values`` and ``hash_str_to_int64`` in
``sglang/srt/mem_cache/utils.py``), and our simulators use yet other hashes. So the referee renames every unit by
its content: ``chain(key of the parent unit, the unit's tokens)``, which both sides can compute, the engine from
a ``BlockStored`` event (parent hash + token ids), the simulator from the prompt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

ROOT = "root"  # the key of the empty prefix: a first unit's parent


def chain(parent: str, tokens: Sequence[int]) -> str:
    """The key of a unit: its parent's key and its own token ids, hashed."""
    text = parent + "|" + ",".join(str(int(t)) for t in tokens)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def prefix_keys(tokens: Sequence[int], unit: int) -> list[str]:
    """The key of every whole ``unit``-token prefix of ``tokens``, shortest first (a partial tail has none)."""
    if unit < 1:
        raise ValueError(f"unit must be a positive number of tokens, got {unit}")
    keys, parent = [], ROOT
    for start in range(0, len(tokens) - unit + 1, unit):
        parent = chain(parent, tokens[start:start + unit])
        keys.append(parent)
    return keys


def short_hash(engine_hash: str | None) -> str | None:
    """The first 6 hex digits of an engine's hash as the recorder wrote it: vLLM's hashes are 64-bit
    integers by default (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`), SHA-256 bytes (hex already) without it
    (64 digits); SGLang's signed 64-bit integers (decimal) are read as their 16 hex digits, two's complement."""
    if engine_hash is None:
        return None
    if len(engine_hash) == 64:
        return engine_hash[:6]
    return format(int(engine_hash) & (2**64 - 1), "016x")[:6]
