"""Chapter 02's exercises: an fp8 KV cache, a budget that is not a whole number of blocks, and GQA's saving."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from servelab.sim import kv_memory
from servelab.sim.kv_memory import ModelShape

Cases = dict[str, tuple[tuple[Any, ...], Any]]


def fp8_gain(shape: ModelShape, memory_gib: float, context_len: int, utilization: float) -> int:
    """Exercise 1: how many more sequences of `context_len` fit with an fp8 KV cache (bf16 weights)."""
    bf16 = kv_memory.plan(shape, memory_gib, "bf16", context_len, utilization=utilization)
    fp8 = kv_memory.plan(shape, memory_gib, "bf16", context_len, utilization=utilization, kv_dtype="fp8")
    return fp8.max_sequences - bf16.max_sequences


def fp8_cases(shape: ModelShape, utilization: float) -> Cases:
    return {"Qwen2.5-7B, 8k tokens, 24 GiB": ((), fp8_gain(shape, 24, 8192, utilization))}


def kept_cases(budget: int, block_size: int) -> Cases:
    """Exercise 2, the prediction: the tokens vLLM keeps of a budget (whole blocks only), at the chapter's budget
    and block size and at two others."""
    points = [(budget, block_size), (budget, 16), (budget + block_size // 2, block_size)]
    return {f"budget {b}, block {s}": ((b, s), kv_memory.tokens_held(b, s)) for b, s in points}


def gqa_growth(shape: ModelShape, dtype: str = "bf16") -> float:
    """Exercise 3: the KV cache per token with one KV head per attention head, over the real one."""
    without = replace(shape, num_key_value_heads=shape.num_attention_heads)
    return kv_memory.kv_bytes_per_token(without, dtype) / kv_memory.kv_bytes_per_token(shape, dtype)


def gqa_cases(shapes: dict[str, ModelShape]) -> Cases:
    names = ("meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen2.5-7B-Instruct")
    return {name.split("/")[1]: ((shapes[name],), gqa_growth(shapes[name])) for name in names if name in shapes}
