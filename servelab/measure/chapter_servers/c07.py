"""Chapter 07's servers: both engines with one KV budget, for the head-to-head run."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name, two_sequences
from servelab.measure.lineup import side_by_side


def servers(profile: Profile, rounds: int = 3, **parameters: Any) -> dict[str, Launch]:
    tokens = profile.kv_cache_tokens or two_sequences(profile)
    starts = 1 if side_by_side(profile) else rounds  # one at a time, every round starts each server afresh
    return by_name(Launch("vLLM", "vllm", {"kv_cache_tokens": tokens}, starts=starts),
                   Launch("SGLang", "sglang", {"kv_cache_tokens": tokens}, starts=starts))
