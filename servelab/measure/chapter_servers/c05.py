"""Chapter 05's servers: one per step budget (chunked_prefill_live.chapter_configs)."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name
from servelab.measure.chunked_prefill import live
from servelab.measure.lineup import side_by_side


def servers(profile: Profile, rounds: int = 3, **parameters: Any) -> dict[str, Launch]:
    starts = 1 if side_by_side(profile) else rounds  # one at a time, every round starts each server afresh
    return by_name(*(Launch(cfg.label, cfg.engine, cfg.options(), starts=starts)
                     for cfg in live.chapter_configs(profile.chunk_sizes)))
