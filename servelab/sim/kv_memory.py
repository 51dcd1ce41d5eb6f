"""Chapter 02's arithmetic: how many tokens and sequences a KV budget holds, a capacity planner.

Bytes per token come from the model's shape (`servelab.machine.model_shapes`, re-exported here):
2 (K and V) x layers x KV heads x head dim x bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.integers import ceil_div
from servelab.machine.model_shapes import (
    DTYPE_BYTES,
    GIB,
    ModelShape,
    dtype_bytes,
    known_shapes,
    kv_bytes_per_token,
    served_model_shape,
)

__all__ = ["DTYPE_BYTES", "GIB", "ModelShape", "Plan", "dtype_bytes", "known_shapes", "kv_bytes_per_token",
           "kv_capacity_tokens", "plan", "served_model_shape", "tokens_held", "weights_bytes"]


def weights_bytes(shape: ModelShape, dtype: str) -> float:
    return shape.params_b * 1e9 * dtype_bytes(dtype)


def kv_capacity_tokens(kv_bytes: float, shape: ModelShape, dtype: str, block_size: int = 1) -> int:
    """Tokens a KV budget of `kv_bytes` holds when the engine allocates whole blocks of `block_size` tokens."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    blocks = int(kv_bytes // (kv_bytes_per_token(shape, dtype) * block_size))
    return blocks * block_size


def tokens_held(budget_tokens: int, block_size: int) -> int:
    """Tokens an engine can hold from a budget of `budget_tokens` when it carves it into whole blocks."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return budget_tokens // block_size * block_size


@dataclass(frozen=True)
class Plan:
    model: str
    memory_gib: float
    dtype: str
    context_len: int
    weights_gib: float
    kv_budget_gib: float
    kv_per_token_kib: float
    kv_per_sequence_gib: float
    capacity_tokens: int
    max_sequences: int

    @property
    def fits(self) -> bool:
        return self.max_sequences >= 1


def plan(shape: ModelShape, memory_gib: float, dtype: str, context_len: int, *,
         utilization: float = 0.9, overhead_gib: float = 0.0, block_size: int = 16,
         kv_dtype: str | None = None) -> Plan:
    """How many sequences of `context_len` tokens fit beside the weights in `memory_gib`.

    Mirrors how engines size the cache: a fraction `utilization` of device memory, minus the
    weights (in `dtype`) and an activation/overhead allowance, is carved into KV blocks (in
    `kv_dtype`, default `dtype`).
    """
    kv_dtype = kv_dtype or dtype
    for label, value in (("memory_gib", memory_gib), ("context_len", context_len)):
        if value <= 0:
            raise ValueError(f"{label} must be positive, got {value}")
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    weights = weights_bytes(shape, dtype)
    budget = max(0.0, memory_gib * GIB * utilization - weights - overhead_gib * GIB)
    per_token = kv_bytes_per_token(shape, kv_dtype)
    capacity = kv_capacity_tokens(budget, shape, kv_dtype, block_size)
    per_seq_blocks = ceil_div(context_len, block_size)
    return Plan(
        model=shape.name, memory_gib=memory_gib, dtype=dtype, context_len=context_len,
        weights_gib=weights / GIB, kv_budget_gib=budget / GIB, kv_per_token_kib=per_token / 1024,
        kv_per_sequence_gib=per_token * context_len / GIB, capacity_tokens=capacity,
        max_sequences=capacity // (per_seq_blocks * block_size),
    )
