"""Chapter 03's servers: vLLM and SGLang under KV pressure with one budget, vLLM refusing a block size its
attention backend cannot use, and vLLM with another block size."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import VLLM_BLOCK_SIZE, Launch, by_name, two_sequences
from servelab.measure.paging import block_size as blocks
from servelab.measure.prefix_cache.live import cache_options


def servers(profile: Profile, *, sglang_conservativeness: float, kv_tokens: int | None = None,
            **parameters: Any) -> dict[str, Launch]:
    tokens = kv_tokens or two_sequences(profile)  # vLLM refuses budgets below one full-length sequence
    default = VLLM_BLOCK_SIZE[profile.device]
    return by_name(
        # both may empty their prefix cache and report cached tokens: the recording of their KV events needs it
        Launch("vLLM", "vllm", {"kv_cache_tokens": tokens, **cache_options("vllm")}),
        Launch("SGLang", "sglang", {"kv_cache_tokens": tokens, "schedule_conservativeness": sglang_conservativeness,
                                    "decode_log_interval": 1, **cache_options("sglang")}),
        Launch("vLLM, refused block size", "vllm",
               {"kv_cache_tokens": tokens, "block_size": blocks.probe_block_size(default)}, refused=True),
        Launch("vLLM, other block size", "vllm",
               {"kv_cache_tokens": tokens, "block_size": blocks.comparison_block_size(default)}))
