"""Chapter 04's servers: one per step budget (chunked_prefill_live.chapter_configs)."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure import chunked_prefill_live as live
from servelab.measure.chapter_servers import Launch, by_name


def servers(profile: Profile, **parameters: Any) -> dict[str, Launch]:
    return by_name(*(Launch(cfg.label, cfg.engine, cfg.options()) for cfg in live.chapter_configs(profile.chunk_sizes)))
