"""Chapter 01: the KV capacity an engine actually built for a budget, next to the planner's prediction.

vLLM reports its block size and block count on `/metrics` (`vllm:cache_config_info`); SGLang
reports the size of its token pool (`max_total_num_tokens`) and its page size on `/server_info`.
vLLM's own defaults for sizing the cache come from its config classes, read inside its venv.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from servelab.engines.engine_side import script
from servelab.engines.metrics import scrape
from servelab.engines.server import EngineStartError, Server
from servelab.machine import engine_envs, models
from servelab.machine.model_shapes import ModelShape, served_model_shape
from servelab.machine.profiles import Profile

# vLLM's block pool holds its first block back as the "null block" (vllm/v1/core/block_pool.py), so
# requests can use one block fewer than `num_gpu_blocks`; SGLang's token pool has an extra padding
# slot 0 outside `max_total_num_tokens` (sglang/srt/mem_cache/allocator/token.py), so all of it is usable.
RESERVED_BLOCKS = {"vllm": 1, "sglang": 0}


def served_shape(profile: Profile) -> ModelShape:
    """The shape (layers, KV heads, head size) of the model the profile serves."""
    return served_model_shape(models.resolve(profile.model).source)


def vllm_cache_defaults(profile: Profile) -> dict[str, Any]:
    """vLLM's defaults for sizing its KV cache (`gpu_memory_utilization`, ...), from its own `EngineArgs`.

    Runs `engine_side/vllm_cache_defaults.py` in the profile's vLLM venv; the kernel never imports vLLM.
    """
    python = engine_envs.get(profile.vllm_env).require().python
    return engine_envs.run_script(python, script("vllm_cache_defaults.py"), timeout=300)


def server_info(server: Server) -> dict[str, Any]:
    """SGLang's `/server_info`: its resolved server arguments and per-scheduler internal states."""
    if server.engine != "sglang":
        raise ValueError(f"server_info is SGLang's endpoint; this server runs {server.engine!r}")
    return httpx.get(f"{server.url}/server_info", timeout=30).json()


def engine_capacity(server: Server) -> dict[str, Any]:
    """What a live server built: `block_size`, `blocks` and `tokens` of KV cache, and the `usable` tokens.

    `tokens` is what the engine reports (blocks x block size); `usable` leaves out the blocks the
    engine holds back for itself (`RESERVED_BLOCKS`). SGLang's block is its page (`page_size`).
    vLLM also says how many requests of its `max_model_len` the pool holds (`max_concurrency`,
    counting every block, its null block included). SGLang also says how large its K and V buffers
    are (`kv_gib`: GiB of 2**30 bytes, rounded to 3 decimals; they hold the pool plus one padding page).
    """
    extra: dict[str, Any] = {}
    if server.engine == "vllm":
        info = scrape(server.url).labels("vllm:cache_config_info")
        block_size, blocks = int(info["block_size"]), int(info["num_gpu_blocks"])
        extra["max_concurrency"] = float(info["kv_cache_max_concurrency"])
    else:
        info = server_info(server)
        block_size = int(_find(info, "page_size"))
        blocks = int(_find(info, "max_total_num_tokens")) // block_size
        extra["kv_gib"] = float(_find(info, "memory_usage")["kvcache"])
    usable = (blocks - RESERVED_BLOCKS[server.engine]) * block_size
    return {"block_size": block_size, "blocks": blocks, "tokens": block_size * blocks, "usable": usable, **extra}


# SGLang rounds its K + V size to 3 decimals of a GiB (sglang/srt/managers/scheduler_components/memory_usage.py).
SGLANG_KV_GIB_HALF_STEP = 0.0005


def sglang_buffer_gib(pool_tokens: int, page_size: int, bytes_per_token: int) -> float:
    """GiB of K and V buffers SGLang allocates for a pool of `pool_tokens`: its buffers hold one page more
    (`size + page_size` rows, sglang/srt/mem_cache/memory_pool.py), at `bytes_per_token` each."""
    if pool_tokens < 0 or page_size < 1 or bytes_per_token < 1:
        raise ValueError(f"need pool_tokens >= 0, page_size >= 1, bytes_per_token >= 1; got "
                         f"{pool_tokens}, {page_size}, {bytes_per_token}")
    return (pool_tokens + page_size) * bytes_per_token / 2**30


def capacity_for_budget(launch: Any, profile: Profile) -> dict[str, Any]:
    """Start a declared server (servelab.measure.chapter_servers.Launch: an engine and its KV budget), read what
    it built (`engine_capacity`) and stop it.

    `started` says whether it came up; an engine may refuse a budget at start (vLLM does when the
    pool cannot hold one request of the profile's `max_model_len`), and then `reason` is the first
    exception its log names: the root cause, not the errors that follow from it.
    """
    srv = launch.server(profile)
    try:
        srv.start()
    except EngineStartError:
        return {"started": False, "reason": first_exception(srv.log_path.read_text(errors="replace"))}
    try:
        return {"started": True, **engine_capacity(srv)}
    finally:
        srv.stop()


def first_exception(log: str) -> str:
    """From an engine log, the first line that raises `SomethingError: message` (or `...Exception: ...`), else
    its last line; a warning that merely mentions an error inside its text does not count."""
    log = re.sub(r"\x1b\[[0-9;]*m", "", log)  # colour codes
    # at the start of a line, or right after a log prefix ("... [core.py:1510] ValueError: ...")
    found = re.search(r"(?:^|\] )([A-Z]\w*(?:Error|Exception): .*)", log, re.MULTILINE)
    if found:
        return found.group(1).strip()
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1] if lines else "(empty log)"


def _find(info: dict, key: str) -> Any:
    """`key` in SGLang's server info, at the top or in its per-scheduler `internal_states`."""
    if key in info:
        return info[key]
    for state in info.get("internal_states") or []:
        if key in state:
            return state[key]
    raise KeyError(f"SGLang's /server_info has no {key!r}; keys: {', '.join(info)}")
