"""Chapter 06's servers: vLLM plain and with each speculative method, the 16-bit rounding pair where drafts are
cut from the model itself, and on a GPU profile each GPU run against its plain target."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name
from servelab.measure.lineup import side_by_side
from servelab.measure.speculative import gpu, setups


def servers(profile: Profile, *, k: int, lookup: Sequence[int], rounding_dtype: str, kv_tokens: int | None = None,
            draft_layers: Sequence[int] | None = None, rounds: int = 3, **parameters: Any) -> dict[str, Launch]:
    # one budget for every server; six full-length sequences (12288 tokens on cpu) leave a draft's KV room too
    budget = {"kv_cache_tokens": kv_tokens or 6 * profile.max_model_len}
    cut = profile.model.startswith("local:")  # drafts cut from the model itself (cpu); else the profile's draft
    layers = setups.target_layers(profile) if cut else None
    methods = setups.methods(profile, k, tuple(lookup), (draft_layers or [layers // 4]) if cut else [])
    starts = 1 if side_by_side(profile) else rounds  # one at a time, every round starts each server afresh
    out = [Launch("plain", "vllm", dict(budget), starts=starts),
           *(Launch(m.name, "vllm", {"speculative_config": m.config, **budget}, starts=starts) for m in methods)]
    rounding = next((m for m in methods if m.draft_layers == layers), None) if cut else None
    if rounding is not None and rounding_dtype != profile.dtype:
        dtype = {"dtype": rounding_dtype, **budget}
        out += [Launch(f"plain, {rounding_dtype}", "vllm", dtype),
                Launch(f"{rounding.name}, {rounding_dtype}", "vllm", {"speculative_config": rounding.config, **dtype})]
    for run in gpu.gpu_runs(profile, k):
        env = {"env": dict(run.env)} if run.env else {}
        out += [Launch(f"{run.label}: plain", run.engine, {}, model=run.model, needs="a GPU", starts=rounds),
                Launch(run.label, run.engine, {**run.options, **env}, model=run.model, needs="a GPU", starts=rounds)]
    return by_name(*out)
