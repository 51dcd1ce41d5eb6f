"""Chapter 04's burst: fresh prompts queued ahead of requests that reuse a cached prefix, on a live engine.

Which requests a scheduler takes first decides, under a small cache, whether a cached prefix survives
until the requests that need it run. To make the queue's order certain on every machine, the engine is
paused while the burst arrives (a GPU would otherwise prefill the first request before the last one is
sent), and resumed once all of it waits. vLLM gets one request after another and its engine core
queues them, in the order sent. SGLang's tokenizer manager holds paused requests before tokenizing them
and, on resume, would hand separate requests to the scheduler one after another, so its first round
could see only the first few; SGLang therefore gets the burst as one batched ``/generate`` request of
token ids, which its tokenizer manager sends to the scheduler as one message (``_send_batch_request`` in
``tokenizer_manager.py``): the first round sees all of it, in order.
:func:`reuser_ceiling` is the most a reuser can find in a block cache; :func:`one_step_prefill` starts an
SGLang server so that one prefill step can take every request that fits its KV pool at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Sequence
from typing import Any

import httpx
import pandas as pd
from openai import AsyncOpenAI

from servelab.engines.server import Server
from servelab.measure.prefix_cache.live import _one, flush, send

# How each engine holds new requests in its queue without scheduling them, and lets them go: vLLM's
# ``/pause?mode=keep`` (dev mode; ``PAUSED_ALL``: ``schedule`` takes nothing, ``vllm/v1/engine/core.py``),
# SGLang's ``/pause_generation`` in place (the tokenizer manager holds new requests until
# ``/continue_generation``, ``tokenizer_manager.py``).
PAUSE = {"vllm": ("/pause?mode=keep&clear_cache=false", None, "/resume", None),
         "sglang": ("/pause_generation", {"mode": "in_place"}, "/continue_generation", {})}


def pause(server: Server, *, resume: bool = False) -> None:
    """Stop the engine from scheduling (queued requests wait), or with ``resume=True`` let it go on."""
    if server.engine not in PAUSE:
        raise ValueError(f"unknown engine {server.engine!r}; accepted: {', '.join(PAUSE)}")
    stop, stop_body, go, go_body = PAUSE[server.engine]
    path, body = (go, go_body) if resume else (stop, stop_body)
    httpx.post(server.url + path, json=body, timeout=60).raise_for_status()


async def _held(server: Server, names: Sequence[str], prompts: Sequence[list[int]], stagger_s: float,
                settle_s: float) -> tuple[list[dict[str, Any]], float]:
    client = AsyncOpenAI(base_url=server.api_url, api_key="servelab", timeout=3600, max_retries=0)
    t0 = time.perf_counter()

    async def release() -> float:
        await asyncio.sleep(len(prompts) * stagger_s + settle_s)
        await asyncio.to_thread(pause, server, resume=True)
        return time.perf_counter() - t0

    try:
        if server.engine == "sglang":
            rows, resumed = await asyncio.gather(_one_batch(server, names, prompts, t0), release())
        else:
            *rows, resumed = await asyncio.gather(*(_one(client, server.served_model, n, p, i * stagger_s, t0, 1)
                                                    for i, (n, p) in enumerate(zip(names, prompts, strict=True))),
                                                  release())
    finally:
        await client.close()
    return list(rows), resumed


async def _one_batch(server: Server, names: Sequence[str], prompts: Sequence[list[int]],
                     t0: float) -> list[dict[str, Any]]:
    """The prompts as one streamed, batched SGLang ``/generate`` of one token each; a row per prompt, as ``_one``."""
    body = {"input_ids": list(prompts), "stream": True, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
    first: dict[int, float] = {}
    last: dict[int, dict[str, Any]] = {}
    ended: dict[int, float] = {}
    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=3600) as http, http.stream("POST", server.url + "/generate",
                                                                     json=body) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk, now = json.loads(line[len("data:"):]), time.perf_counter()
            i = chunk.get("index", 0)
            first.setdefault(i, now)
            last[i], ended[i] = chunk["meta_info"], now
    missing = [names[i] for i in range(len(names)) if i not in last]
    if missing:
        raise RuntimeError(f"SGLang answered no chunk for {', '.join(missing)}")
    return [{"request": n, "prompt_tokens": last[i]["prompt_tokens"], "cached_tokens": last[i].get("cached_tokens", 0),
             "ttft_s": first[i] - start, "latency_s": ended[i] - start, "start_s": start - t0, "end_s": ended[i] - t0}
            for i, n in enumerate(names)]


def run_burst(server: Server, warm: list[int], burst: Sequence[list[int]], names: Sequence[str], *,
              stagger_s: float = 0.2, settle_s: float = 0.5) -> pd.DataFrame:
    """From an empty cache: ``warm`` alone (it caches the shared prefix), then ``burst`` queued in order.

    The engine is paused while the burst arrives, so every request is queued, in this order, before the
    scheduler sees any of them: to vLLM one request after another, ``stagger_s`` apart; to SGLang as one
    batched request (see the module's docstring). It resumes ``settle_s`` after the last one. One row per
    burst request: times from the resume (``start_s`` negative: sent while paused), ``finished`` (its
    rank by the end of its response, from 1), ``finish_group`` (:func:`finish_groups`: requests that
    ended within ``FINISH_TOLERANCE_S`` of each other share a number) and ``sent_rank`` (by send time; a
    batch's in list order).
    """
    flush(server)
    send(server, [warm], ["warm-up"])
    pause(server)
    coro = _held(server, list(names), [list(p) for p in burst], stagger_s, settle_s)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        rows, resumed = asyncio.run(coro)
    else:  # inside Jupyter: a private loop in a worker thread
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            rows, resumed = pool.submit(asyncio.run, coro).result()
    frame = pd.DataFrame(rows)
    frame[["start_s", "end_s"]] -= resumed
    return frame.assign(finished=frame.end_s.rank(method="first").astype(int), finish_group=finish_groups(frame.end_s),
                        sent_rank=frame.start_s.rank(method="first").astype(int))


FINISH_TOLERANCE_S = 0.05  # requests that end this close together share a finish group


def finish_groups(end_s: Sequence[float], tolerance_s: float = FINISH_TOLERANCE_S) -> list[int]:
    """Per request, its group among the requests that finished together, from 1 in time order: sorted by
    end time, a new group starts where an end is more than ``tolerance_s`` after the one before. Requests
    finished by the same engine step are answered together, so they share a group; a rank among them
    would only order their streams' last chunks. A group is not a step: two steps that end close enough
    together fall into one group."""
    if tolerance_s < 0:
        raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
    ends = [float(e) for e in end_s]
    groups, group, previous = [0] * len(ends), 0, None
    for i in sorted(range(len(ends)), key=ends.__getitem__):
        if previous is None or ends[i] - previous > tolerance_s:
            group += 1
        groups[i], previous = group, ends[i]
    return groups


PREFILL_STEP_ALIGN = 256  # SGLang's page sizes (1 by default, up to 256 for some models) all divide it


def one_step_prefill(kv_tokens: int) -> dict[str, int]:
    """Options for ``Server("sglang", ...)``: both of SGLang's prefill-step budgets at least ``kv_tokens``.

    ``PrefillAdder`` (``sglang/srt/managers/schedule_policy.py``) fills a prefill step from the sorted
    queue until one of two budgets is spent: ``chunked_prefill_size`` (``rem_chunk_tokens``; a request
    longer than what is left of it is cut into a chunk) and ``max_prefill_tokens`` (``rem_input_tokens``;
    once spent, no further request joins). ``chunked_prefill_size`` defaults to a size that grows with the
    device's memory (``handle_gpu_memory_settings`` in ``sglang/srt/arg_groups/memory_hook.py``), so a
    burst taken in one step on one machine could span several steps on another. With both budgets at
    least the KV pool, every set of requests that fits the pool at once can be prefilled in one step.
    ``kv_tokens`` is rounded up to a multiple of ``PREFILL_STEP_ALIGN``: ``chunked_prefill_size`` must be
    divisible by the page size (``sglang/srt/arg_groups/validation_hook.py``).
    """
    if isinstance(kv_tokens, bool) or not isinstance(kv_tokens, int) or kv_tokens < 1:
        raise ValueError(f"kv_tokens must be an integer >= 1 (tokens of KV cache), got {kv_tokens!r}")
    tokens = -(-kv_tokens // PREFILL_STEP_ALIGN) * PREFILL_STEP_ALIGN
    return {"chunked_prefill_size": tokens, "max_prefill_tokens": tokens}


def reuser_ceiling(shared_tokens: int, prompt_tokens: int, block_size: int) -> int:
    """The most tokens a request can find cached when its first ``shared_tokens`` were cached before:
    all but its last token at most, in whole blocks of ``block_size`` (1: SGLang's tree, page size 1)."""
    if block_size < 1 or shared_tokens < 0 or prompt_tokens < 1:
        raise ValueError(f"need block_size >= 1, shared_tokens >= 0, prompt_tokens >= 1; got {block_size}, "
                         f"{shared_tokens}, {prompt_tokens}")
    return min(shared_tokens, prompt_tokens - 1) // block_size * block_size


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
