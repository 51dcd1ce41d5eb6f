"""Chapter 01's servers: each engine once, on the profile's model, with its own default scheduler limits (the
chapter reads those limits, it does not set them)."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name


def servers(profile: Profile, **parameters: Any) -> dict[str, Launch]:
    return by_name(Launch("vLLM", "vllm"), Launch("SGLang", "sglang"))
