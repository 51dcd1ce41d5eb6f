"""KV-cache arithmetic: bytes per token from a model's shape, and a capacity planner.

Every generated or prompt token leaves one key and one value vector per layer and per KV head
in the cache. With grouped-query attention (GQA) several query heads share one KV head, which
is why num_key_value_heads, not num_attention_heads, sets the size.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import tomllib

from servelab.paths import DATA

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
               "half": 2, "fp8": 1, "float8": 1, "int8": 1}
GIB = 2**30


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    hidden_size: int
    head_dim: int
    params_b: float = 0.0
    max_position_embeddings: int = 0

    @classmethod
    def from_config(cls, name: str, config: dict) -> ModelShape:
        heads = config["num_attention_heads"]
        return cls(
            name=name,
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=config.get("num_key_value_heads", heads),
            hidden_size=config["hidden_size"],
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            params_b=config.get("params_b", 0.0),
            max_position_embeddings=config.get("max_position_embeddings", 0),
        )

    @classmethod
    def from_config_file(cls, path: str | Path) -> ModelShape:
        path = Path(path)
        return cls.from_config(path.parent.name, json.loads(path.read_text()))


def known_shapes() -> dict[str, ModelShape]:
    """The models the chapters plan for (data/model_shapes.toml)."""
    with (DATA / "model_shapes.toml").open("rb") as f:
        return {name: ModelShape.from_config(name, cfg) for name, cfg in tomllib.load(f).items()}


def served_model_shape(source: str) -> ModelShape:
    """Shape of the model an engine serves: a local folder's config.json, or a known hub id."""
    config = Path(source) / "config.json"
    if config.is_file():
        return ModelShape.from_config_file(config)
    shapes = known_shapes()
    if source not in shapes:
        raise ValueError(f"no shape known for {source!r}; add it to servelab/data/model_shapes.toml")
    return shapes[source]


def kv_bytes_per_token(shape: ModelShape, dtype: str) -> int:
    """2 (K and V) x layers x KV heads x head dim x bytes per element."""
    return 2 * shape.num_hidden_layers * shape.num_key_value_heads * shape.head_dim * dtype_bytes(dtype)


def weights_bytes(shape: ModelShape, dtype: str) -> float:
    return shape.params_b * 1e9 * dtype_bytes(dtype)


def kv_capacity_tokens(kv_bytes: float, shape: ModelShape, dtype: str, block_size: int = 1) -> int:
    """Tokens a KV budget holds when the engine allocates whole blocks of `block_size` tokens."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    blocks = int(kv_bytes // (kv_bytes_per_token(shape, dtype) * block_size))
    return blocks * block_size


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
    per_seq_blocks = math.ceil(context_len / block_size)
    return Plan(
        model=shape.name, memory_gib=memory_gib, dtype=dtype, context_len=context_len,
        weights_gib=weights / GIB, kv_budget_gib=budget / GIB, kv_per_token_kib=per_token / 1024,
        kv_per_sequence_gib=per_token * context_len / GIB, capacity_tokens=capacity,
        max_sequences=capacity // (per_seq_blocks * block_size),
    )
