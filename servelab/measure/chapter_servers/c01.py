"""Chapter 01's servers: each engine on the profile's model with its batch capped at `batch_cap` requests (vLLM's
--max-num-seqs, SGLang's --max-running-requests), so that the load sweep reaches the cap and requests queue.
Side by side (cpu) each starts once; one at a time (a GPU) each starts once per phase: the batch sweep, then
the load sweep at rates taken from both engines' capacities."""

from __future__ import annotations

from typing import Any

from servelab.machine.profiles import Profile
from servelab.measure.chapter_servers import Launch, by_name
from servelab.measure.lineup import side_by_side

PHASES = 2


def servers(profile: Profile, batch_cap: int = 8, **parameters: Any) -> dict[str, Launch]:
    starts = 1 if side_by_side(profile) else PHASES
    return by_name(Launch("vLLM", "vllm", {"max_num_seqs": batch_cap}, starts=starts),
                   Launch("SGLang", "sglang", {"max_running_requests": batch_cap}, starts=starts))
