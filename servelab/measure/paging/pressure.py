"""Chapter 02: what an engine does when its KV budget runs out, measured token by token.

`run_pressure` sends every prompt at once, streams the answers and records when each token arrived,
while a Sampler reads the engine's gauges. The gauges are renamed to one vocabulary for both engines
(`GAUGES`): vLLM preempts (its counter `vllm:num_preemptions`), SGLang retracts
(`sglang:num_retracted_requests`). A request that was sent back to the queue shows in its own stream
as a pause in which the other requests kept receiving tokens (`pauses`), which dates each eviction
where it happened; vLLM's counter only moves once the preempted request runs again.
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

from servelab.engines.metrics import Sampler, scrape
from servelab.engines.server import Server
from servelab.sim.paging import simulate

# One vocabulary for both engines' gauges and counters (names as in each engine's /metrics).
GAUGES = {
    "vllm": {"kv_used": "vllm:kv_cache_usage_perc", "running": "vllm:num_requests_running",
             "waiting": "vllm:num_requests_waiting", "evictions": "vllm:num_preemptions",
             "cached_tokens": "vllm:prefix_cache_hits"},
    "sglang": {"kv_used": "sglang:token_usage", "running": "sglang:num_running_reqs",
               "waiting": "sglang:num_queue_reqs", "evictions": "sglang:num_retracted_requests",
               "cached_tokens": "sglang:cached_tokens"},
}
COUNTERS = ("evictions", "cached_tokens")
# A gap counts as a pause when the others ran this many steps meanwhile; 3 took 2-core scheduling jitter for one.
MIN_MISSED_STEPS = 6


def pressure_output_tokens(kv_tokens: int, requests: int, prompt_tokens: int, overfill: float,
                           spread: float = 0.5) -> list[int]:
    """Answer lengths at which `requests` requests of `prompt_tokens` + answer need `overfill` x `kv_tokens`.

    The lengths rise evenly from `1 - spread` to `1 + spread` times their mean, so the requests finish
    at different times, as real ones do; an engine then admits waiting requests while others still run.
    """
    if not overfill > 1:
        raise ValueError(f"overfill must be > 1 (how many times the budget the requests need), got {overfill!r}")
    if not 0 <= spread < 1:
        raise ValueError(f"spread must be in [0, 1) (answer lengths vary by +-spread of their mean), got {spread!r}")
    mean = overfill * kv_tokens / requests - prompt_tokens
    if mean * (1 - spread) < 2:
        raise ValueError(f"{requests} prompts of {prompt_tokens} tokens leave answers under 2 tokens at {overfill} x "
                         f"kv_tokens={kv_tokens}; use fewer requests, shorter prompts or a smaller spread")
    step = 2 * spread / (requests - 1) if requests > 1 else 0.0
    return [round(mean * (1 - spread + step * i)) for i in range(requests)]


def budget_bytes(server: Server) -> int:
    """The KV budget in bytes a vLLM server was launched with (`--kv-cache-memory-bytes`)."""
    argv = server.spec.argv
    if "--kv-cache-memory-bytes" not in argv:
        raise ValueError(f"{server.engine} server on port {server.port} has no --kv-cache-memory-bytes; "
                         "start vLLM with kv_cache_tokens=N")
    return int(argv[argv.index("--kv-cache-memory-bytes") + 1])


def reservation_fit(kv_tokens: int, max_len: int, needs: Sequence[int]) -> dict[str, int]:
    """How many requests contiguous reservation starts at once in `kv_tokens`, first come first served.

    `max_len`: a slab of the context length each. `exact`: a slab of exactly what each needs (`needs`,
    in the order the requests arrive), the oracle that knows every answer's length.
    """
    exact, used = 0, 0
    for need in needs:
        if used + need > kv_tokens:
            break
        exact, used = exact + 1, used + need
    return {"max_len": min(len(needs), kv_tokens // max_len), "exact": exact}


class _Sampler(Sampler):
    """A Sampler that reads a counter the engine has not created yet as 0.

    SGLang creates a labelled counter such as `sglang:num_retracted_requests_total` at its first
    increment, so before the first retraction the series is absent from /metrics.
    """

    def __init__(self, base_url: str, names: list[str], counters: list[str], every_s: float) -> None:
        super().__init__(base_url, names, every_s)
        self.counters = set(counters)

    def _sample(self, t0: float) -> None:
        metrics, row = scrape(self.base_url), {"t_s": time.perf_counter() - t0}
        for name in self.names:
            try:
                row[name] = metrics.value(name)
            except KeyError:
                if name not in self.counters:
                    raise
                row[name] = 0.0
        self.rows.append(row)


@dataclass(frozen=True)
class PressureRun:
    """One pressure run: per request, per token (`req`, `t_s`), and the sampled gauges (`t_s`, GAUGES keys)."""

    engine: str
    requests: pd.DataFrame
    tokens: pd.DataFrame
    timeline: pd.DataFrame


async def _stream(client: AsyncOpenAI, model: str, i: int, prompt: str, t0: float, max_tokens: int,
                  extra: dict, after: asyncio.Event | None = None,
                  first: asyncio.Event | None = None) -> tuple[dict, list[float]]:
    times: list[float] = []
    usage = None
    if after is not None:
        await after.wait()
    sent = time.perf_counter() - t0
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0,
        stream=True, stream_options={"include_usage": True}, extra_body=extra)
    async for chunk in stream:
        if any(c.delta.content for c in chunk.choices):
            times.append(time.perf_counter() - t0)
            if first is not None:
                first.set()
        usage = chunk.usage or usage
    return {"req": i, "sent_s": sent, "max_tokens": max_tokens, "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": usage.completion_tokens if usage else 0}, times


async def _all(server: Server, prompts: Sequence[str], max_tokens: Sequence[int], waves: Sequence[int],
               t0: float) -> list:
    client = AsyncOpenAI(base_url=server.api_url, api_key="servelab", timeout=3600, max_retries=0)
    firsts = [asyncio.Event() for _ in prompts]
    gates = {w: asyncio.Event() for w in set(waves)}

    async def open_gates() -> None:  # wave w goes out once every request of wave w - 1 has its first token
        for w in sorted(gates):
            await asyncio.gather(*(firsts[i].wait() for i, v in enumerate(waves) if v < w))
            gates[w].set()

    try:
        await _stream(client, server.served_model, -1, "Hello", t0, 1, {})  # warm the client and the server
        opener = asyncio.ensure_future(open_gates())
        answers = await asyncio.gather(*(
            _stream(client, server.served_model, i, p, t0, n, {"min_tokens": n}, gates[w], firsts[i])
            for i, (p, n, w) in enumerate(zip(prompts, max_tokens, waves, strict=True))))
        await opener
        return answers
    finally:
        await client.close()


def run_pressure(server: Server, prompts: Sequence[str], max_tokens: Sequence[int],
                 every_s: float = 0.25, waves: Sequence[int] | None = None) -> PressureRun:
    """Send all `prompts` at once, greedy, answer `i` exactly `max_tokens[i]` long; gauges every `every_s` s.

    `waves` (one integer per prompt, default all 0) staggers them: the requests of wave `w` are sent
    once every request of an earlier wave has received its first token (is running).

    The length is forced with `min_tokens` (end-of-sequence is refused until then), not `ignore_eos`:
    SGLang reserves the whole answer at admission for `ignore_eos` requests (their length is known),
    and would then never run out of KV (`schedule_policy.py`, "Fixed-length requests cannot benefit
    from the early-EOS estimate").
    """
    names = GAUGES[server.engine]
    if len(max_tokens) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(max_tokens)} answer lengths; give one length per prompt")
    waves = [0] * len(prompts) if waves is None else list(waves)
    if len(waves) != len(prompts) or any(not isinstance(w, int) or w < 0 for w in waves):
        raise ValueError(f"waves must be one integer >= 0 per prompt ({len(prompts)} prompts), got {waves!r}")
    t0 = time.perf_counter()  # the Sampler's clock starts a few milliseconds later, in its thread
    counters = [names[c] for c in COUNTERS]
    with _Sampler(server.url, list(names.values()), counters, every_s) as sampler:
        coro = _all(server, prompts, max_tokens, waves, t0)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # works inside Jupyter's running loop too
            answers = pool.submit(asyncio.run, coro).result()
    zero = min(row["sent_s"] for row, _ in answers)  # times from the moment the requests were sent
    timeline = sampler.frame().rename(columns={v: k for k, v in names.items()})
    timeline["t_s"] -= zero
    rows, tokens = [], []
    for row, times in answers:
        times = [t - zero for t in times]
        rows.append({**row, "wave": waves[row["req"]], "sent_s": row["sent_s"] - zero,
                     "first_token_s": times[0] if times else np.nan, "finish_s": times[-1] if times else np.nan})
        tokens += [{"req": row["req"], "t_s": t} for t in times]
    return PressureRun(server.engine, pd.DataFrame(rows), pd.DataFrame(tokens), timeline)


def pauses(tokens: pd.DataFrame, min_missed: int = MIN_MISSED_STEPS) -> pd.DataFrame:
    """Stretches in which a request received no token while the engine went on producing them for others.

    Engines decode every running request once per step, so a request that misses steps that the
    others ran was not running: it had been preempted (vLLM) or retracted (SGLang) and waited to be
    readmitted. Tokens reach the client in bursts when the API server falls behind, so the steps
    others ran are counted as distinct arrival times (arrivals closer than a quarter of the median
    gap between two tokens of a stream are one), and a gap counts when it holds at least
    `min_missed` of them and lasts at least `min_missed` median gaps. A stall of the whole server,
    or a burst of buffered tokens, is not a pause. One row per pause: `req`, `start_s` (its last
    token before) and `end_s` (its next token).
    """
    by_req = {r: np.sort(g["t_s"].to_numpy()) for r, g in tokens.groupby("req")}
    gaps = np.concatenate([np.diff(t) for t in by_req.values()] or [np.zeros(0)])
    median = float(np.median(gaps)) if len(gaps) else 0.0
    rows = []
    for r, times in by_req.items():
        others = np.sort(np.concatenate([t for q, t in by_req.items() if q != r] or [np.zeros(0)]))
        for a, b in zip(times[:-1], times[1:], strict=True):
            if b - a < min_missed * median:
                continue
            inside = others[(others > a) & (others < b)]
            steps = int(len(inside) > 0) + int((np.diff(inside) > median / 4).sum())
            if steps >= min_missed:
                rows.append({"req": r, "start_s": float(a), "end_s": float(b)})
    return pd.DataFrame(rows, columns=["req", "start_s", "end_s"])


def gauge_evictions(timeline: pd.DataFrame) -> pd.DataFrame:
    """Samples at which the running gauge fell while the waiting gauge rose: requests sent back to the queue.

    `moved` is the smaller of the two changes. A sample can hide an eviction that was followed by a
    readmission before the next sample, so this is a lower bound on what happened, dated to within one
    sampling interval.
    """
    d_run = timeline["running"].diff()
    d_wait = timeline["waiting"].diff()
    hit = (d_run < 0) & (d_wait > 0)
    moved = np.minimum(-d_run[hit], d_wait[hit]).astype(int)
    return pd.DataFrame({"t_s": timeline["t_s"][hit].to_numpy(), "moved": moved.to_numpy()})


def busy_mean_running(timeline: pd.DataFrame) -> float:
    """Time-averaged number of running requests over the samples in which any request was in the engine."""
    dt = timeline["t_s"].diff().shift(-1).fillna(0.0)  # each sample holds until the next one
    busy = (timeline["running"] + timeline["waiting"]) > 0
    weight = dt[busy]
    if weight.sum() <= 0:
        raise ValueError("the timeline has no busy sample; nothing ran while it was sampled")
    return float((timeline["running"][busy] * weight).sum() / weight.sum())


def gauges_catch_up_s(run: PressureRun) -> float:
    """When the gauges first count every request in flight: sent, not finished, shown running or waiting.

    Requests sent at once do not reach an engine's scheduler at once: its API server handles them
    (HTTP, chat template, tokenization) on the same cores, and SGLang updates its gauges only after a
    step. Until this time the gauges show fewer requests than the client has in flight. It is the
    first sample that shows them all (0.0 if the first one does; the last sample's time if none does).
    """
    tl, req = run.timeline, run.requests
    sent = np.searchsorted(np.sort(req["sent_s"].to_numpy()), tl["t_s"].to_numpy(), side="right")
    done = np.searchsorted(np.sort(req["finish_s"].dropna().to_numpy()), tl["t_s"].to_numpy(), side="right")
    shown = (tl["running"] + tl["waiting"]).to_numpy()
    caught = np.flatnonzero((sent > 0) & (shown >= sent - done))
    t = tl["t_s"].to_numpy()
    return max(0.0, float(t[caught[0]] if len(caught) else t[-1]))


def peak_blocks(prompt_tokens: Sequence[int], output_tokens: Sequence[int], block_size: int) -> int:
    """Most blocks the requests hold at once if all start together and none is preempted.

    After generating its first `k` tokens a request stores `prompt + k - 1` tokens (the newest token
    is not fed back yet); it leaves once it has all `output` tokens. The peak is the largest sum over
    `k` of the blocks the requests still running hold.
    """
    prompts, outputs = np.asarray(prompt_tokens), np.asarray(output_tokens)
    k = np.arange(1, int(outputs.max()) + 1)[:, None]  # tokens generated so far
    held = np.where(k <= outputs, -(-(prompts + k - 1) // block_size), 0)
    return int(held.sum(axis=1).max())


def simulated_pressure(prompt_tokens: Sequence[int], output_tokens: Sequence[int], *, block_size: int, blocks: int,
                       max_len: int) -> dict[str, float]:
    """The same requests, all arriving at step 0, in the from-scratch paged simulator with `blocks` blocks.

    Pass the blocks the engine can hand out (vLLM: its block count less the null block). An engine
    stores the KV of every token it feeds the model: the prompt and each generated token but the
    last, which is sampled and returned, never fed back. The simulator stores a step's token in that
    step, so it is given `output_tokens - 1`. It counts steps, not seconds, and prefill and
    recomputation cost it nothing.
    """
    if min(output_tokens) < 2:
        raise ValueError(f"every output must be >= 2 tokens (one is never stored), got {min(output_tokens)}")
    reqs = pd.DataFrame({"arrival": 0, "prompt_len": list(prompt_tokens),
                         "output_len": [n - 1 for n in output_tokens]})
    summary = simulate(reqs, f"paged:{block_size}", blocks * block_size, max_len=max_len).summary
    return {"mean_batch": float(summary["mean_batch"]), "max_batch": int(summary["max_batch"]),
            "preemptions": int(summary["preemptions"])}
