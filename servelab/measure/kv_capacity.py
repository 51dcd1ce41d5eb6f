"""Chapter 01: the KV capacity an engine actually built for a budget, next to the planner's prediction.

vLLM reports its block size and block count on `/metrics` (`vllm:cache_config_info`); SGLang
reports the size of its token pool (`max_total_num_tokens`) on `/get_server_info`.
"""

from __future__ import annotations

import httpx

from servelab.engines.metrics import scrape
from servelab.engines.server import Server
from servelab.machine import models
from servelab.machine.model_shapes import ModelShape, served_model_shape
from servelab.machine.profiles import Profile


def served_shape(profile: Profile) -> ModelShape:
    """The shape (layers, KV heads, head size) of the model the profile serves."""
    return served_model_shape(models.resolve(profile.model).source)


def engine_capacity(server: Server) -> dict[str, int]:
    """What a live server built: `block_size`, `blocks` and `tokens` of KV cache (SGLang: block size 1)."""
    if server.engine == "vllm":
        info = scrape(server.url).labels("vllm:cache_config_info")
        block_size, blocks = int(info["block_size"]), int(info["num_gpu_blocks"])
        return {"block_size": block_size, "blocks": blocks, "tokens": block_size * blocks}
    info = httpx.get(f"{server.url}/get_server_info", timeout=30).json()
    tokens = int(_find(info, "max_total_num_tokens"))
    page = int(info.get("page_size") or 1)
    return {"block_size": page, "blocks": tokens // page, "tokens": tokens}


def _find(info: dict, key: str) -> object:
    """`key` in SGLang's server info, at the top or in its per-scheduler `internal_states`."""
    if key in info:
        return info[key]
    for state in info.get("internal_states") or []:
        if key in state:
            return state[key]
    raise KeyError(f"SGLang's /get_server_info has no {key!r}; keys: {', '.join(info)}")
