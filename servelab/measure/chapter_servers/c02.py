"""Chapter 02's servers: both engines with one KV budget, and both with a budget half a vLLM block over two
full-length sequences (the exercise on partial blocks)."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import VLLM_BLOCK_SIZE, Launch, by_name, two_sequences


def servers(profile: Profile, *, kv_cache_tokens: int | None = None, **parameters: Any) -> dict[str, Launch]:
    tokens = kv_cache_tokens or profile.kv_cache_tokens or two_sequences(profile)
    partial = two_sequences(profile) + VLLM_BLOCK_SIZE[profile.device] // 2
    return by_name(Launch("vLLM", "vllm", {"kv_cache_tokens": tokens}),
                   Launch("SGLang", "sglang", {"kv_cache_tokens": tokens}),
                   Launch("vLLM, partial block", "vllm", {"kv_cache_tokens": partial}),
                   Launch("SGLang, partial block", "sglang", {"kv_cache_tokens": partial}))
