"""Chapter 00's servers: each engine on the profile's model, and vLLM in a second dtype (two servers on a
16-bit profile, whose comparison runs on the draft model: `setup_check.dtype_comparison`)."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name
from servelab.measure.setup.check import dtype_comparison


def servers(profile: Profile, **parameters: Any) -> dict[str, Launch]:
    model, base, other = dtype_comparison(profile)
    baseline = [Launch("dtype baseline", "vllm", {"dtype": base}, model=model)] if model else []
    return by_name(Launch("vLLM", "vllm"), Launch("SGLang", "sglang"), *baseline,
                   Launch("other dtype", "vllm", {"dtype": other}, model=model))
