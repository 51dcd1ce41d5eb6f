"""Chapter 06's servers: both engines with one KV budget, for the head-to-head run."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name, two_sequences


def servers(profile: Profile, **parameters: Any) -> dict[str, Launch]:
    tokens = profile.kv_cache_tokens or two_sequences(profile)
    return by_name(Launch("vLLM", "vllm", {"kv_cache_tokens": tokens}),
                   Launch("SGLang", "sglang", {"kv_cache_tokens": tokens}))
