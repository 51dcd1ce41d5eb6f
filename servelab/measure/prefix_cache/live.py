"""Chapter 04 on the real engines: the same token ids sent to vLLM and SGLang, and what our caches predict.

Prompts are chat requests turned into token ids once, by vLLM's ``/tokenize`` with the model's chat
template (``messages``, ``add_generation_prompt``), and sent to both engines as token-id completions,
so both engines see exactly the same sequences and any difference in hits comes from their caches.
Each request asks for one token: its time to first token is its prefill, and only the prompt is
cached. Per request the engines report their cached prompt tokens in ``usage.prompt_tokens_details``
(vLLM with ``--enable-prompt-tokens-details``, SGLang with ``--enable-cache-report``); their counters
(``COUNTERS``) add them up. Between workloads the prefix cache is emptied (vLLM's
``/reset_prefix_cache``, a dev-mode endpoint; SGLang's ``/flush_cache``), so each workload starts cold.

:func:`predict_hits` replays the same sequences, one request at a time as they are sent, on our
``BlockHashCache`` (vLLM) or ``RadixTree`` (SGLang) with the engine's block size and capacity.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import time
from collections.abc import Sequence
from typing import Any

import httpx
import pandas as pd
from openai import AsyncOpenAI

from servelab.engines.metrics import scrape
from servelab.engines.server import Server
from servelab.integers import int_at_least
from servelab.machine import engine_envs
from servelab.machine.profiles import Profile
from servelab.measure.kv_memory.capacity import engine_capacity
from servelab.measure.prefix_cache.workloads import Message
from servelab.sim.prefix_cache import BlockHashCache, RadixTree

# Each engine's cumulative counters, in tokens: prompt tokens looked up, and those found cached.
COUNTERS = {"vllm": ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"),
            "sglang": ("sglang:prompt_tokens", "sglang:cached_tokens")}
# How each engine is told to turn its prefix cache off.
CACHE_OFF = {"vllm": {"no_enable_prefix_caching": True}, "sglang": {"disable_radix_cache": True}}


def cache_options(engine: str, *, caching: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``Server(engine, ...)``: report cached tokens per request, serve an endpoint
    that empties the prefix cache, and with ``caching=False`` turn the prefix cache off.

    vLLM reports cached tokens with ``--enable-prompt-tokens-details``, which servelab always passes, and
    serves ``/reset_prefix_cache`` in dev mode (``vllm/entrypoints/serve/dev/``); SGLang needs
    ``--enable-cache-report`` and always serves ``/flush_cache``.
    """
    if engine not in CACHE_OFF:
        raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(CACHE_OFF)}")
    options: dict[str, Any] = ({"env": {"VLLM_SERVER_DEV_MODE": "1"}} if engine == "vllm"
                               else {"enable_cache_report": True})
    return options if caching else {**options, **CACHE_OFF[engine]}


def chat_token_ids(server: Server, messages: Sequence[Message]) -> list[int]:
    """The prompt vLLM builds for ``messages`` (chat template and generation prompt), as token ids."""
    if server.engine != "vllm":
        raise ValueError(f"chat_token_ids uses vLLM's /tokenize; this server runs {server.engine!r}")
    reply = httpx.post(f"{server.url}/tokenize", timeout=60, json={
        "model": server.served_model, "messages": list(messages), "add_generation_prompt": True})
    reply.raise_for_status()
    return reply.json()["tokens"]


FLUSH_TRIES = 10


def flush(server: Server, tries: int = FLUSH_TRIES, wait_s: float = 0.5) -> None:
    """Empty the engine's prefix cache, or raise. Both engines refuse while blocks are still held (a request
    just finishing): vLLM answers 200 with ``{"success": false}`` (``serve/dev/cache/api_router.py``,
    ``reset_prefix_cache``, "callers may retry"), SGLang 400 (``http_server.py``, ``flush_cache``); so retry."""
    path = "/reset_prefix_cache" if server.engine == "vllm" else "/flush_cache"
    for _ in range(tries):
        reply = httpx.post(server.url + path, timeout=60)
        if reply.status_code == 200 and (server.engine != "vllm" or reply.json().get("success") is True):
            return
        if reply.status_code not in (200, 400):
            reply.raise_for_status()
        time.sleep(wait_s)
    raise RuntimeError(f"{server.engine} did not empty its prefix cache ({path}) in {tries} tries: "
                       f"last answer {reply.status_code} {reply.text.strip()[:80]!r}")


def counters(server: Server) -> dict[str, float]:
    """The engine's cumulative prompt tokens looked up (``queries``) and found cached (``hits``).

    SGLang exposes a counter only once it has counted something, so a missing one reads 0.
    """
    metrics = scrape(server.url)
    out = {}
    for key, name in zip(("queries", "hits"), COUNTERS[server.engine], strict=True):
        try:
            out[key] = metrics.value(name)
        except KeyError:
            out[key] = 0.0
    return out


async def _one(client: AsyncOpenAI, model: str, name: str, prompt: list[int], delay: float, t0: float,
               max_tokens: int) -> dict[str, Any]:
    await asyncio.sleep(delay)
    start = time.perf_counter()
    first, usage = None, None
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.0,
                                             stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.choices and first is None:
            first = time.perf_counter()
        usage = chunk.usage or usage
    end = time.perf_counter()
    details = getattr(usage, "prompt_tokens_details", None)
    return {"request": name, "prompt_tokens": usage.prompt_tokens if usage else len(prompt),
            "cached_tokens": (getattr(details, "cached_tokens", None) or 0) if details else 0,
            "ttft_s": (first or end) - start, "latency_s": end - start, "start_s": start - t0, "end_s": end - t0}


async def _send(server: Server, names: Sequence[str], prompts: Sequence[list[int]], at_once: bool,
                stagger_s: float, max_tokens: int) -> list[dict[str, Any]]:
    client = AsyncOpenAI(base_url=server.api_url, api_key="servelab", timeout=3600, max_retries=0)
    t0 = time.perf_counter()
    try:
        if not at_once:
            return [await _one(client, server.served_model, n, p, 0.0, t0, max_tokens)
                    for n, p in zip(names, prompts, strict=True)]
        return await asyncio.gather(*(_one(client, server.served_model, n, p, i * stagger_s, t0, max_tokens)
                                      for i, (n, p) in enumerate(zip(names, prompts, strict=True))))
    finally:
        await client.close()


def send(server: Server, prompts: Sequence[list[int]], names: Sequence[str] | None = None, *,
         at_once: bool = False, stagger_s: float = 0.01, max_tokens: int = 1) -> pd.DataFrame:
    """Send token-id prompts one after another (or all at once, ``stagger_s`` apart, in order); one row each."""
    names = list(names) if names is not None else [str(i) for i in range(len(prompts))]
    coro = _send(server, names, [list(p) for p in prompts], at_once, stagger_s, max_tokens)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        rows = asyncio.run(coro)
    else:  # inside Jupyter: a private loop in a worker thread
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            rows = pool.submit(asyncio.run, coro).result()
    return pd.DataFrame(rows)


def run_workloads(server: Server, workloads: dict[str, Sequence[list[int]]],
                  names: dict[str, Sequence[str]] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each workload from an empty cache, its requests one after another.

    Returns one row per request (``workload``, ``request``, tokens, cached tokens, times) and one row
    per workload with the engine's counters over it (``queries``, ``hits``, ``hit_rate``) and its
    wall time.
    """
    frames, totals = [], []
    for workload, prompts in workloads.items():
        flush(server)
        before, t0 = counters(server), time.perf_counter()
        frame = send(server, prompts, (names or {}).get(workload))
        seconds, after = time.perf_counter() - t0, counters(server)
        frames.append(frame.assign(workload=workload))
        queries, hits = after["queries"] - before["queries"], after["hits"] - before["hits"]
        totals.append({"workload": workload, "requests": len(prompts), "queries": int(queries), "hits": int(hits),
                       "hit_rate": hits / queries if queries else 0.0, "seconds": seconds})
    requests = pd.concat(frames, ignore_index=True)
    return requests[["workload", *[c for c in requests if c != "workload"]]], pd.DataFrame(totals)


def on_off_pairs(server: Server, prompts: Sequence[list[int]], names: Sequence[str], *, pairs: int,
                 rounds: int) -> pd.DataFrame:
    """Time to first token with the cache off and on, side by side, ``rounds`` times over.

    A pair empties the cache, sends ``prompts[k]`` (cache off: it prefills its whole prompt) and at once
    ``prompts[k + 1]``, which finds what the first left cached (cache on: it prefills the rest). Each round
    runs pairs k = 0 .. ``pairs`` - 1, so every cold request has a cached one next to it in time, and a
    slow moment of the host lands on both. One row per request: ``round``, ``pair``, ``cache``.
    """
    pairs, rounds = int_at_least("pairs", pairs, 1), int_at_least("rounds", rounds, 1)
    if len(prompts) < pairs + 1 or len(names) != len(prompts):
        raise ValueError(f"{pairs} pairs need {pairs + 1} prompts with a name each, "
                         f"got {len(prompts)} prompts and {len(names)} names")
    frames = []
    for r in range(rounds):
        for k in range(pairs):
            flush(server)
            frame = send(server, [prompts[k], prompts[k + 1]], [names[k], names[k + 1]])
            frames.append(frame.assign(round=r, pair=k, cache=["off", "on"]))
    rows = pd.concat(frames, ignore_index=True)
    return rows[["round", "pair", "cache", *[c for c in rows if c not in ("round", "pair", "cache")]]]


def predict_hits(cache: str, prompts: Sequence[Sequence[int]], *, block_size: int = 1,
                 capacity: int, page_size: int = 1) -> list[int]:
    """Cached tokens per request, sent one after another and finished before the next, on our cache.

    ``cache="block"``: vLLM's hash-chained blocks, ``capacity // block_size`` usable blocks.
    ``cache="radix"``: SGLang's radix tree holding at most ``capacity`` tokens; a request matches all
    but its last token, locks what it matched, evicts least recently used leaves until its new tokens
    fit, and its prompt is inserted. With ``page_size`` > 1 (SGLang's paged tree) a hit and an insert
    are cut down to whole pages (``match_prefix`` and ``cache_finished_req`` in ``radix_cache.py``).
    Both: strictly sequential requests, no chunked prefill, no output tokens cached.
    """
    if page_size < 1:
        raise ValueError(f"page_size must be a positive number of tokens, got {page_size}")
    if cache == "block":
        blocks = BlockHashCache(capacity // block_size, block_size)
        hits = []
        for i, tokens in enumerate(prompts):
            admitted = blocks.allocate(str(i), tokens)
            if admitted is None:
                raise ValueError(f"prompt {i} ({len(tokens)} tokens) does not fit {capacity // block_size} blocks")
            hits.append(admitted.hit_tokens)
            blocks.free(str(i))
        return hits
    if cache != "radix":
        raise ValueError(f"unknown cache {cache!r}; accepted: block, radix")
    tree, hits = RadixTree(), []
    for tokens in prompts:
        match = tree.match_prefix(tokens[:-1])
        hit = match.length // page_size * page_size
        tree.inc_lock_ref(match.node)
        shortfall = len(tokens) - hit - (capacity - tree.total_tokens)
        if shortfall > 0:
            tree.evict(shortfall)
        tree.insert(tokens[:len(tokens) // page_size * page_size])
        tree.dec_lock_ref(match.node)
        hits.append(hit)
    return hits


def measured_hits(server: Server, workloads: dict[str, Sequence[list[int]]],
                  names: dict[str, Sequence[str]] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`run_workloads` on a live server, with a ``predicted`` column: what our cache of the
    server's kind (vLLM: blocks, SGLang: radix tree) predicts for every request, at the block or page
    size and capacity the server reports."""
    built = engine_capacity(server)
    requests, totals = run_workloads(server, workloads, names)
    kind, sizes = (("block", {"block_size": built["block_size"]}) if server.engine == "vllm"
                   else ("radix", {"page_size": built["block_size"]}))
    requests["predicted"] = [hit for prompts in workloads.values()
                             for hit in predict_hits(kind, prompts, capacity=built["usable"], **sizes)]
    return requests, totals


def set_apart(workload: str, requests: pd.DataFrame,
              totals: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One workload's requests taken out of :func:`run_workloads`' tables: (its requests, the other
    requests, the other workloads' totals)."""
    mine = requests.workload == workload
    return (requests[mine].reset_index(drop=True), requests[~mine].reset_index(drop=True),
            totals[totals.workload != workload].reset_index(drop=True))


def sglang_schedule_facts(profile: Profile) -> dict[str, Any]:
    """Read from SGLang's installed ``schedule_policy.py``: its policies and when cache-aware ones fall back.

    Parsed, not imported (importing SGLang takes tens of seconds): the two policy enums, the
    waiting-queue length above which ``lpm`` and ``hrrn`` are replaced by FCFS, the default
    thresholds (tokens) of the in-batch prefix check that cache-aware policies run, and every how many
    scheduling rounds cache-agnostic policies refresh the recency of the waiting requests' cached
    prefixes (``WAITING_PREFIX_REFRESH_INTERVAL``, read by ``_touch_waiting_prefixes``).
    """
    env = engine_envs.get(profile.sglang_env).require()
    path = (env.site_packages() or env.path) / "sglang" / "srt" / "managers" / "schedule_policy.py"
    if not path.is_file():
        raise FileNotFoundError(f"SGLang's schedule policy is not at {path}")
    tree = ast.parse(path.read_text())
    facts: dict[str, Any] = {"file": "sglang/srt/managers/schedule_policy.py"}
    wanted = ("WAITING_QUEUE_PREFIX_MATCH_MAX", "IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD",
              "IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD", "WAITING_PREFIX_REFRESH_INTERVAL")
    for node in tree.body:
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name) and t.id in wanted]
        if names and isinstance(node.value, ast.Constant):
            facts[names[0]] = node.value.value
        elif names:  # int(os.environ.get(NAME, "32")): the default
            defaults = [c for c in ast.walk(node.value) if isinstance(c, ast.Constant) and c.value != names[0]]
            facts[names[0]] = int(defaults[-1].value) if defaults else None
        if isinstance(node, ast.ClassDef) and node.name in ("CacheAwarePolicy", "CacheAgnosticPolicy"):
            facts[node.name] = [s.value.value for s in node.body
                                if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)]
    return facts
