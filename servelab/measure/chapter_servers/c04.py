"""Chapter 04's servers: vLLM with an endpoint that empties its prefix cache, SGLang reporting cached tokens and
prefilling a burst in one step, and SGLang again with the longest-prefix-match policy."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name
from servelab.measure.lineup import side_by_side
from servelab.measure.prefix_cache.burst import one_step_prefill
from servelab.measure.prefix_cache.live import cache_options


def servers(profile: Profile, *, kv_tokens: int | None = None, **parameters: Any) -> dict[str, Launch]:
    tokens = kv_tokens or profile.max_model_len * 9 // 8  # one full-length sequence plus vLLM's null block
    sglang = {**cache_options("sglang"), **one_step_prefill(tokens), "kv_cache_tokens": tokens}
    # The chapter's lineup runs the servers side by side where every one's memory is bounded (cpu); on a GPU each
    # claims most of the card, so one runs at a time and the chapter's order (vllm, sglang, vllm, vllm, sglang,
    # sglang lpm) starts vllm and sglang twice.
    again = 1 if side_by_side(profile) else 2
    return by_name(Launch("vllm", "vllm", {**cache_options("vllm"), "kv_cache_tokens": tokens}, starts=again),
                   Launch("sglang", "sglang", sglang, starts=again),
                   Launch("sglang lpm", "sglang", {**sglang, "schedule_policy": "lpm"}))
