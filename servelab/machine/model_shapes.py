"""Model shapes that decide KV-cache size: from a model folder's config.json or data/model_shapes.toml.

Every generated or prompt token leaves one key and one value vector per layer and per KV head
in the cache. With grouped-query attention (GQA) several query heads share one KV head, which
is why num_key_value_heads, not num_attention_heads, sets the size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from servelab.machine import datafiles

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
    vocab_size: int = 0  # config.json's vocab_size (0: not known)
    gated: bool = False  # the hub serves its files only to users who accepted its licence

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
            vocab_size=config.get("vocab_size", 0),
            gated=bool(config.get("gated", False)),
        )

    @classmethod
    def from_config_file(cls, path: str | Path) -> ModelShape:
        path = Path(path)
        return cls.from_config(path.parent.name, json.loads(path.read_text()))


def known_shapes() -> dict[str, ModelShape]:
    """The models the chapters plan for (data/model_shapes.toml)."""
    return {name: ModelShape.from_config(name, cfg) for name, cfg in datafiles.load("model_shapes.toml").items()}


def gated(model_ids: Iterable[str]) -> list[str]:
    """The ids among ``model_ids`` that model_shapes.toml marks gated on the hub, in order, once each
    (an id it does not list counts as not gated)."""
    shapes = known_shapes()
    return [m for m in dict.fromkeys(model_ids) if m in shapes and shapes[m].gated]


@dataclass(frozen=True)
class Vocabulary:
    """What a draft/target check compares: config.json's vocab_size, an EAGLE-3 head's reduced
    draft_vocab_size (else vocab_size), and the tokenizer family ("" where not known)."""

    model: str
    vocab_size: int
    draft_vocab_size: int
    tokenizer: str = ""


def vocabulary(source: str) -> Vocabulary | None:
    """A local model folder's (its config.json) or a known hub id's vocabulary; None when neither."""
    path = Path(source) / "config.json"
    if path.is_file():
        config, tokenizer = json.loads(path.read_text()), ""
    else:
        config = datafiles.load("model_shapes.toml").get(source)
        if config is None or not config.get("vocab_size"):
            return None
        tokenizer = config.get("tokenizer", "")
    vocab = int(config["vocab_size"])
    return Vocabulary(source, vocab, int(config.get("draft_vocab_size") or vocab), tokenizer)


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
