"""Chapter 05 on a live engine: streams with per-token timestamps, the long-prompt scenario, calibration.

``stream_tokens`` sends streaming completions and records when every chunk of every stream arrived
(``servelab.engines.client.run_load`` keeps only each request's first-token and finish times). Prompts
are token ids, so a prompt has exactly the length asked for, on both engines, without a chat template.
Each answer is forced to its full length with ``min_tokens`` (end of sequence refused until then)
rather than ``ignore_eos``, which SGLang admits differently (see ``measure.kv_pressure``). With
``continuous_usage_stats`` every chunk carries the running count of generated tokens, so a chunk that
holds several tokens is seen as such.

Calibration turns live timings into samples for ``sim.chunked_prefill.fit_cost_model``: the time to
first token of one prompt alone (one prefill step plus the request's overhead) and the steady
inter-token gap of a batch of streams decoding together (one decode step).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from openai import AsyncOpenAI
from tqdm import tqdm

from servelab.engines.client import Endpoint
from servelab.sim.chunked_prefill import LONG, Scenario, StepSample, itl_summary, stream_name

VOCAB_RANGE = (1000, 20000)  # ordinary token ids in every profile's model (special tokens lie outside)
CHUNK_COLUMNS = ["request", "t_s", "completion_tokens", "text"]


@dataclass(frozen=True)
class StreamSpec:
    """One streaming request. It is sent ``delay_s`` after the start, or, with ``after=(name, k)``, as
    soon as request ``name`` has received its k-th chunk."""

    name: str
    prompt: list[int]
    max_tokens: int
    delay_s: float = 0.0
    after: tuple[str, int] | None = None


@dataclass(frozen=True)
class StreamRun:
    """``requests``: name, sent_s, prompt_tokens, completion_tokens. ``chunks``: one row per streamed
    chunk (``CHUNK_COLUMNS``; ``completion_tokens`` is the running count, NaN where the engine sent none)."""

    requests: pd.DataFrame
    chunks: pd.DataFrame


def prompt_ids(tokens: int, seed: int) -> list[int]:
    """A prompt of exactly ``tokens`` random ordinary token ids; distinct seeds share no prefix cache."""
    if tokens < 1:
        raise ValueError(f"a prompt needs at least one token, got {tokens}")
    return np.random.default_rng(seed).integers(*VOCAB_RANGE, size=tokens).tolist()


async def _one(client: AsyncOpenAI, model: str, spec: StreamSpec, t0: float, seen: dict[str, int],
               events: dict[tuple[str, int], asyncio.Event], chunks: list[tuple]) -> dict:
    if spec.after is not None:
        await events[spec.after].wait()
    elif spec.delay_s:
        await asyncio.sleep(spec.delay_s)
    sent = time.perf_counter() - t0
    usage = None
    try:
        stream = await client.completions.create(
            model=model, prompt=spec.prompt, max_tokens=spec.max_tokens, temperature=0.0, stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
            extra_body={"min_tokens": spec.max_tokens})
        async for chunk in stream:
            now = time.perf_counter() - t0
            usage = chunk.usage or usage
            if not chunk.choices:
                continue
            count = chunk.usage.completion_tokens if chunk.usage else np.nan
            chunks.append((spec.name, now, count, "".join(c.text or "" for c in chunk.choices)))
            seen[spec.name] += 1
            for (name, k), event in events.items():
                if name == spec.name and seen[name] >= k:
                    event.set()
    finally:  # a stream that ended (or failed) early must not leave its followers waiting forever
        for (name, _), event in events.items():
            if name == spec.name:
                event.set()
    return {"request": spec.name, "sent_s": sent, "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": usage.completion_tokens if usage else 0}


async def _all(server: Endpoint, specs: Sequence[StreamSpec]) -> StreamRun:
    client = AsyncOpenAI(base_url=server.api_url, api_key="servelab", timeout=3600, max_retries=0)
    events = {s.after: asyncio.Event() for s in specs if s.after is not None}
    seen = {s.name: 0 for s in specs}
    chunks: list[tuple] = []
    t0 = time.perf_counter()
    try:
        rows = await asyncio.gather(*(_one(client, server.served_model, s, t0, seen, events, chunks) for s in specs))
    finally:
        await client.close()
    return StreamRun(pd.DataFrame(rows), pd.DataFrame(chunks, columns=CHUNK_COLUMNS))


def stream_tokens(server: Endpoint, specs: Sequence[StreamSpec]) -> StreamRun:
    """Send every spec (greedy, exactly ``max_tokens`` tokens each) and record every chunk's arrival.

    Times are seconds from one common start. Works in a script and inside Jupyter's running loop.
    """
    names = [s.name for s in specs]
    if not specs or len(set(names)) != len(names):
        raise ValueError(f"specs need distinct names and at least one spec, got {names}")
    for s in specs:
        if s.after is not None and (s.after[0] not in names or s.after[0] == s.name or s.after[1] < 1):
            raise ValueError(f"spec {s.name!r}: after={s.after} must name another spec and a chunk count >= 1")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _all(server, specs)).result()


def token_times(chunks: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per request, the arrival time of each chunk that brought new tokens: a rise of the running
    token count where the engine reports it, else a non-empty text."""
    out = {}
    for name, group in chunks.sort_values("t_s", kind="stable").groupby("request", sort=False):
        counts = group["completion_tokens"]
        reported = counts.notna().all()
        new = counts.diff().fillna(counts) > 0 if reported else group["text"].str.len() > 0
        out[name] = group.loc[new, "t_s"].to_numpy(dtype=float)
    return out


def window_stats(run: StreamRun, long: str = LONG) -> dict[str, float]:
    """The long prompt's TTFT (from its send to its first token) and the other streams' ITL p50, p90
    and longest stall over that window (``sim.chunked_prefill.itl_summary``, as for the simulator)."""
    times = token_times(run.chunks)
    if long not in times or times[long].size == 0:
        raise ValueError(f"no token of request {long!r} in the run; requests: {', '.join(times)}")
    sent = float(run.requests.set_index("request").loc[long, "sent_s"])
    first = float(times[long][0])
    streams = {n: t for n, t in times.items() if n != long}
    return {"long_ttft_s": first - sent, **itl_summary(streams, sent, first)}


# Prompt seeds: a scenario's are seed * 1000 + i, below CALIBRATION_SEEDS; the calibration's start there, so no
# calibration prompt is ever a scenario's (whose first tokens the server would then find cached).
CALIBRATION_SEEDS = 10_000_000


def scenario_specs(scenario: Scenario, seed: int = 0) -> list[StreamSpec]:
    """The simulator's scenario as requests: the streams at once, the long prompt after the last
    stream's ``warmup_tokens``-th chunk (the last stream sent is the last admitted, so all are decoding).
    Every prompt is fresh (seeded by ``seed``), so nothing is cached."""
    if not 0 <= seed < CALIBRATION_SEEDS // 1000:
        raise ValueError(f"scenario seed must be in 0..{CALIBRATION_SEEDS // 1000 - 1}, got {seed}")
    specs = [StreamSpec(stream_name(i), prompt_ids(scenario.stream_prompt_tokens, seed * 1000 + i),
                        scenario.stream_output_tokens) for i in range(scenario.streams)]
    return [*specs, StreamSpec(LONG, prompt_ids(scenario.long_prompt_tokens, seed * 1000 + 999),
                               scenario.long_output_tokens,
                               after=(stream_name(scenario.streams - 1), scenario.warmup_tokens))]


def prefill_samples(run: StreamRun, budget: int | None = None) -> list[StepSample]:
    """One sample per request of a run whose requests ran alone: its TTFT = its prefill + its overhead.

    Alone, a prompt of P tokens takes ``ceil(P / budget)`` steps (one without a ``budget``).
    """
    if budget is not None and budget < 1:
        raise ValueError(f"budget must be >= 1 token or None, got {budget}")
    times = token_times(run.chunks)
    return [StepSample(float(times[r.request][0] - r.sent_s), prefill_tokens=int(r.prompt_tokens), requests=1,
                       steps=-(-int(r.prompt_tokens) // budget) if budget else 1)
            for r in run.requests.itertuples()]


def decode_sample(run: StreamRun) -> StepSample:
    """One decode step of a batch that started together: the median gap while every stream decoded.

    The window runs from the last stream's first token to the first stream's last token; the context
    is every stream's prompt plus the tokens it had generated at the middle of the window.
    """
    times = token_times(run.chunks)
    start, end = max(t[0] for t in times.values()), min(t[-1] for t in times.values())
    gaps = [np.diff(t[(t >= start) & (t <= end)]) for t in times.values()]
    pooled = np.concatenate(gaps)
    if pooled.size == 0:
        raise ValueError("no two tokens of any stream fall while all streams decode; ask for more tokens")
    middle = (start + end) / 2
    prompts = run.requests.set_index("request")["prompt_tokens"]
    context = sum(int(prompts[n]) + int(np.searchsorted(t, middle)) for n, t in times.items())
    return StepSample(float(np.median(pooled)), decodes=len(times), decode_context_tokens=context)


def calibrate(server: Endpoint, *, prompt_lengths: Sequence[int], batch_sizes: Sequence[int],
              contexts: Sequence[int], budget: int | None, decode_tokens: int = 24, repeats: int = 3,
              seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """Step-cost samples from a live server whose step budget is ``budget`` tokens: each prompt length
    alone ``repeats`` times, then each (batch size, context) decoding ``decode_tokens`` tokens together;
    one warm-up request first. One row per sample, ``source`` prefill or decode."""
    prefills = [p for p in prompt_lengths for _ in range(repeats)]
    batches = [(b, c) for b in batch_sizes for c in contexts]
    if not prefills or not batches:
        raise ValueError("calibration needs prompt_lengths, batch_sizes and contexts (and repeats >= 1)")
    bar = tqdm(total=1 + len(prefills) + len(batches), desc="calibrating step costs", disable=not progress)
    base = CALIBRATION_SEEDS + seed * 10_000
    stream_tokens(server, [StreamSpec("warm-up", prompt_ids(16, base + 9_999), 2)])
    bar.update()
    rows = []
    for i, length in enumerate(prefills):
        run = stream_tokens(server, [StreamSpec("prefill", prompt_ids(length, base + i), 1)])
        rows += [{"source": "prefill", **vars(s)} for s in prefill_samples(run, budget)]
        bar.update()
    for j, (batch, context) in enumerate(batches):
        specs = [StreamSpec(f"decode {k}", prompt_ids(context, base + 5000 + 100 * j + k), decode_tokens)
                 for k in range(batch)]
        rows.append({"source": "decode", **vars(decode_sample(stream_tokens(server, specs)))})
        bar.update()
    bar.close()
    return pd.DataFrame(rows)


def budget_options(engine: str, budget: int | None, *, chunking: bool = True, mixed_chunk: bool = False,
                   long_prefill_token_threshold: int = 0) -> dict[str, int | bool]:
    """Server options (``Server(..., **options)``) for one step budget on one engine.

    vLLM: ``--max-num-batched-tokens`` (``None``: the engine's default), ``--no-enable-chunked-prefill``,
    ``--long-prefill-token-threshold``. SGLang: ``--chunked-prefill-size`` (-1 when chunking is off),
    ``--enable-mixed-chunk``.
    """
    if engine == "vllm":
        if mixed_chunk:
            raise ValueError("mixed_chunk is SGLang's --enable-mixed-chunk; vLLM always mixes")
        opts: dict[str, int | bool] = {} if budget is None else {"max_num_batched_tokens": budget}
        if not chunking:
            opts["no_enable_chunked_prefill"] = True
        if long_prefill_token_threshold:
            opts["long_prefill_token_threshold"] = long_prefill_token_threshold
        return opts
    if engine == "sglang":
        if long_prefill_token_threshold:
            raise ValueError("long_prefill_token_threshold is a vLLM option; SGLang has none")
        opts = {"chunked_prefill_size": -1} if not chunking else ({} if budget is None else
                                                                  {"chunked_prefill_size": budget})
        if mixed_chunk:
            opts["enable_mixed_chunk"] = True
        return opts
    raise ValueError(f"unknown engine {engine!r}; accepted: vllm, sglang")
