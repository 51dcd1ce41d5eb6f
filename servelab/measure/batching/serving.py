"""Chapter 01's measurements: prefill against decode, decode batching, and load against latency.

Three sweeps of `vllm bench serve` runs (`servelab.measure.deploying.head_to_head.Run`, random prompts, a fixed
number of output tokens), sent to either engine with `head_to_head.measure`:

* `prefill_runs`: one request at a time, prompts of several lengths. The time to the first token (TTFT)
  grows with the prompt, which the engine reads in one forward (prefill); the gap between later tokens
  (decode steps, one token each) does not.
* `batch_runs`: b requests at a time (closed loop: a new one as soon as one ends). A decode step reads the
  weights once for the whole batch, so the server's tokens/s grows with b while each request slows little;
  `batch_roofline` is the memory-bandwidth bound on it (`speculative.Roofline`, made per batch).
* `rate_runs`: requests arriving at random (Poisson) at a given rate, however many are in flight (open
  loop). Below the server's capacity each request finishes before many more arrive; past it requests
  pile up, first in the running batch (every step slower), then, beyond the engine's cap on running
  requests (`batch_knobs`), in its queue, and latency grows with every request sent. `rates_from_capacity`
  places the rates around a capacity measured on the machine at hand.

Every run has a seed of its own: run i of a sweep gets ``seed + SWEEP_SEEDS[sweep] + i``. vLLM's random
prompts are consecutive token ids from a seeded offset (`RandomDataset` in vllm/benchmarks/datasets/
datasets.py), so two runs with one seed would share their first tokens and the prefix cache would serve
one from the other. The sweeps lie ten rounds apart (`head_to_head.ROUND_SEEDS`), so rounds 0-9 of all three
(``seed + r * ROUND_SEEDS``) and `head_to_head.warm_up` of any of them send prompts of their own.

The aggregations read `measure`'s two tables (per run, per request; a `round` column is pooled) and pick
their sweep's rows by run name. `batch_knobs` tabulates the scheduler knobs that bound a batch, read from
each engine's own code by two engine-side scripts (`engine_batch_defaults`) and, optionally, from running
servers (`running_batch_knobs`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pandas as pd

from servelab.engines.engine_side import script
from servelab.engines.server import Server
from servelab.integers import int_at_least
from servelab.machine import engine_envs, models
from servelab.machine.profiles import Profile
from servelab.measure.deploying.head_to_head import ROUND_SEEDS, Run
from servelab.measure.kv_memory.capacity import server_info
from servelab.measure.speculative.verification import Roofline

SWEEP_SEEDS = {"prefill": 0, "batch": 10 * ROUND_SEEDS, "rate": 20 * ROUND_SEEDS}
NAMES = {"prefill": "prefill {:d} tokens", "batch": "batch {:d}", "rate": "rate {:g} req/s"}  # run names


def _random(tokens: int) -> tuple[str, ...]:
    """vLLM's random dataset with prompts of exactly `tokens` tokens."""
    return "--dataset-name", "random", "--random-input-len", str(tokens), "--random-range-ratio", "0"


def _distinct(name: str, values: Sequence[Any]) -> None:
    if not values or len(set(values)) != len(values):
        raise ValueError(f"{name} must be distinct and at least one, got {list(values)}")
    if len(values) > ROUND_SEEDS:
        raise ValueError(f"{name}: {len(values)} runs need more than the {ROUND_SEEDS} seeds a sweep has")


def _seeded(sweep: str, runs: list[Run], seed: int) -> list[Run]:
    base = int_at_least("seed", seed, 0) + SWEEP_SEEDS[sweep]
    return [replace(r, seed=base + i) for i, r in enumerate(runs)]


def prefill_runs(prompt_tokens: Sequence[int], *, requests: int, seed: int) -> list[Run]:
    """For each prompt length, `requests` random prompts of exactly that many tokens, sent one at a time."""
    _distinct("prompt_tokens", prompt_tokens)
    lengths = [int_at_least("each prompt length", t, 1) for t in prompt_tokens]
    n = int_at_least("requests", requests, 1)
    runs = [Run(NAMES["prefill"].format(t), "random", _random(t), n, concurrency=1) for t in lengths]
    return _seeded("prefill", runs, seed)


def batch_runs(batches: Sequence[int], *, input_tokens: int, waves: int, seed: int) -> list[Run]:
    """For each batch size b, b x `waves` prompts of `input_tokens` tokens, b in flight at a time."""
    _distinct("batches", batches)
    sizes = [int_at_least("each batch", b, 1) for b in batches]
    tokens, w = int_at_least("input_tokens", input_tokens, 1), int_at_least("waves", waves, 1)
    runs = [Run(NAMES["batch"].format(b), "random", _random(tokens), b * w, concurrency=b) for b in sizes]
    return _seeded("batch", runs, seed)


def _positive_rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number > 0 (requests/s), got {value!r}")
    return float(value)


def rate_runs(rates: Sequence[float], *, prompts: int, input_tokens: int, seed: int) -> list[Run]:
    """For each request rate, `prompts` prompts of `input_tokens` tokens arriving at random (Poisson, vLLM's
    --request-rate) at that mean rate, with no limit on how many are in flight."""
    _distinct("rates", rates)
    checked = [_positive_rate("each rate", r) for r in rates]
    n, tokens = int_at_least("prompts", prompts, 1), int_at_least("input_tokens", input_tokens, 1)
    runs = [Run(NAMES["rate"].format(r), "random", _random(tokens), n, rate=r) for r in checked]
    return _seeded("rate", runs, seed)


def rates_from_capacity(requests_per_s: float, fractions: Sequence[float] = (0.25, 0.5, 1.0, 2.0)) -> list[float]:
    """Request rates at `fractions` of a measured capacity (e.g. the request throughput of the largest batch
    run), rounded to two significant digits, so that every machine's sweep crosses its own knee."""
    capacity = _positive_rate("requests_per_s", requests_per_s)
    if not fractions or any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < math.inf
                            for f in fractions) or list(fractions) != sorted(set(fractions)):
        raise ValueError(f"fractions must be increasing finite numbers > 0, got {list(fractions)}")
    rates = [float(format(f * capacity, ".2g")) for f in fractions]
    if len(set(rates)) != len(rates):
        raise ValueError(f"fractions {list(fractions)} of {capacity:g} req/s round to equal rates {rates}; "
                         "space them further apart")
    return rates


# ----------------------------------------------------------------------------- aggregations


def _sweep(table: pd.DataFrame, sweep: str) -> pd.DataFrame:
    """The rows of one sweep's runs (by run name); a ValueError if there are none."""
    prefix = NAMES[sweep].split("{")[0]
    rows = table[table.run.str.startswith(prefix)]
    if rows.empty:
        raise ValueError(f"no {sweep} run in the table (run names starting {prefix!r}); runs: {sorted(set(table.run))}")
    return rows


def _in_order(table: pd.DataFrame, key: str) -> pd.DataFrame:
    """Sorted by `key` within each engine, the engines in the order they first appear."""
    order = {e: i for i, e in enumerate(dict.fromkeys(table.engine))}
    return table.sort_values(key).sort_values("engine", key=lambda s: s.map(order), kind="stable").reset_index(
        drop=True)


def _per_setting(rows: pd.DataFrame, key: str, name: str, columns: Mapping[str, str]) -> pd.DataFrame:
    """Per engine and `key` (renamed `name`): the median over rounds of each `columns` entry (column of `rows`
    -> its new name)."""
    out = rows.groupby(["engine", key], sort=False)[list(columns)].median().reset_index()
    return _in_order(out.rename(columns={key: name, **columns}), name)


def prefill_decode(per_request: pd.DataFrame) -> pd.DataFrame:
    """Per engine and prompt length (`prefill_runs`' requests, every round pooled): the median TTFT and the
    median gap between later tokens (ms, over every gap of every request), and both over the shortest
    prompt's. `prompt_tokens` is the median prompt the benchmark sent."""
    rows = []
    for (engine, _), run in _sweep(per_request, "prefill").groupby(["engine", "run"], sort=False):
        gaps = [g for text in run.itls_ms for g in json.loads(text)]
        rows.append({"engine": engine, "prompt_tokens": int(run.input_tokens.median()), "requests": len(run),
                     "ttft_ms": float(run.ttft_ms.median()), "itl_ms": statistics.median(gaps) if gaps else math.nan})
    out = _in_order(pd.DataFrame(rows), "prompt_tokens")
    first = out.groupby("engine", sort=False)[["ttft_ms", "itl_ms"]].transform("first")
    return out.assign(ttft_vs_shortest=out.ttft_ms / first.ttft_ms, itl_vs_shortest=out.itl_ms / first.itl_ms)


def decode_scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Per engine and batch (`batch_runs`, median over rounds): output tokens/s of the whole server, tokens/s
    one request sees (1000 / its median inter-token gap in ms), and both over batch 1's."""
    out = _per_setting(_sweep(summary, "batch"), "concurrency", "batch",
                       {"output_throughput": "server_tok_s", "p50_itl_ms": "p50_itl_ms"})
    out = out.assign(batch=out.batch.astype(int), request_tok_s=1000 / out.pop("p50_itl_ms"))
    ones = out[out.batch == 1].set_index("engine")
    missing = sorted(set(out.engine) - set(ones.index))
    if missing:
        raise ValueError(f"decode_scaling compares with batch 1, which {', '.join(missing)} did not run")
    return out.assign(server_gain_vs_batch_1=out.server_tok_s / out.engine.map(ones.server_tok_s),
                      request_speed_vs_batch_1=out.request_tok_s / out.engine.map(ones.request_tok_s))


def load_curve(summary: pd.DataFrame) -> pd.DataFrame:
    """Per engine and offered request rate (`rate_runs`, median over rounds): the request rate achieved, output
    tokens/s, and the median and 90th-percentile TTFT and end-to-end latency (ms)."""
    columns = {"request_throughput": "achieved_req_s", "output_throughput": "output_tok_s",
               **{f"p{p}_{m}_ms": f"p{p}_{m}_ms" for m in ("ttft", "e2el") for p in (50, 90)}}
    return _per_setting(_sweep(summary, "rate"), "rate", "offered_req_s", columns)


def batch_roofline(roofline: Roofline, batch: int, context_tokens: int) -> float:
    """The memory-bandwidth bound on the whole server's decode tokens/s with `batch` requests running, each
    with `context_tokens` of KV cache: one step reads every weight once for the whole batch
    (`roofline.weight_bytes`) and each request's KV (`kv_bytes_per_context_token` x `context_tokens`), and
    makes `batch` tokens. At batch 1 it is `roofline.tokens_per_s(context_tokens)`.

    Simplified: memory traffic only (no compute bound, which a large batch or a long prefill reaches), no
    activations, the weights counted as `Roofline` counts them (the whole embedding table, see
    `decode_roofline`), and the bandwidth as given in `roofline` (the chapter measures it on the engine's device
    with `device_bandwidth`)."""
    b, context = int_at_least("batch", batch, 1), int_at_least("context_tokens", context_tokens, 0)
    step_bytes = roofline.weight_bytes + b * context * roofline.kv_bytes_per_context_token
    return b * roofline.bandwidth_gb_s * 1e9 / step_bytes


def device_bandwidth(profile: Profile) -> dict[str, Any]:
    """The memory bandwidth of the device the profile's engines compute on (GPU memory on a GPU, host memory on
    cpu), measured with vLLM's own torch inside its venv (engine-side script device_bandwidth.py): device, name,
    threads, bytes, read_gb_s and copy_gb_s."""
    python = engine_envs.get(profile.vllm_env).require().python
    return engine_envs.run_script(python, script("device_bandwidth.py"), timeout=300)


# ----------------------------------------------------------------------------- the engines' batch knobs

# per engine: knob -> (the CLI flag, what it bounds)
KNOBS = {"vllm": {"max_num_seqs": ("--max-num-seqs", "requests running at once (one step's batch)"),
                  "max_num_batched_tokens": ("--max-num-batched-tokens", "tokens (prompt and decode) in one step")},
         "sglang": {"max_running_requests": ("--max-running-requests", "requests running at once"),
                    "max_prefill_tokens": ("--max-prefill-tokens",
                                           "prompt tokens in one prefill batch (at least the context length)"),
                    "chunked_prefill_size": ("--chunked-prefill-size",
                                             "prompt tokens in one prefill step, all requests together "
                                             "(a longer prompt is split)")}}


def engine_batch_defaults(profile: Profile, kv_tokens: int | None = None) -> dict[str, dict[str, Any]]:
    """Both engines' batch knobs on this machine from their own code: vLLM's `EngineArgs` and
    `get_batch_defaults` on its platform, SGLang's `ServerArgs` resolved for the profile's model and device,
    with the `max_running_requests` it derives from a KV pool of `kv_tokens` (default: the profile's KV budget;
    on a GPU, which has none, pass the pool a running server reports: `running_batch_knobs`'
    `max_total_num_tokens`) (engine-side scripts batch_knob_defaults_vllm.py and batch_knob_defaults_sglang.py)."""
    vllm_python = engine_envs.get(profile.vllm_env).require().python
    sglang_python = engine_envs.get(profile.sglang_env).require().python
    flags = dict(zip(profile.sglang_flags[::2], profile.sglang_flags[1::2], strict=False))
    extra = [f"{k.removeprefix('--').replace('-', '_')}={v}" for k, v in flags.items()
             if k in ("--attention-backend", "--sampling-backend")]
    tokens = kv_tokens or profile.kv_cache_tokens
    capacity = str(tokens) if tokens else "none"
    with ThreadPoolExecutor(2) as pool:
        vllm = pool.submit(engine_envs.run_script, vllm_python, script("batch_knob_defaults_vllm.py"), timeout=300)
        sglang = pool.submit(engine_envs.run_script, sglang_python, script("batch_knob_defaults_sglang.py"),
                             models.resolve(profile.model).source, profile.device, str(profile.max_model_len),
                             capacity, *extra, timeout=300)
        return {"vllm": vllm.result(), "sglang": sglang.result()}


def running_batch_knobs(server: Server) -> dict[str, int | None]:
    """The knobs a running server works with: SGLang's as resolved at start (`/server_info`, its scheduler's
    `effective_max_running_requests_per_dp`); vLLM, which reports no scheduler config, the flags it was
    launched with, the last of a flag given twice, as argparse takes it (None where none was passed: the
    engine's default holds)."""
    if server.engine == "sglang":
        info = server_info(server)
        states = info.get("internal_states") or [{}]
        return {"max_running_requests": states[0].get("effective_max_running_requests_per_dp",
                                                      info.get("max_running_requests")),
                "max_prefill_tokens": info.get("max_prefill_tokens"),
                "chunked_prefill_size": info.get("chunked_prefill_size"),
                "max_total_num_tokens": states[0].get("max_total_num_tokens", info.get("max_total_num_tokens"))}
    argv = server.spec.argv  # a flag given twice (the profile's, then a chapter's option): the last one holds
    last = {flag: int(value) for flag, value in zip(argv, argv[1:], strict=False) if flag.startswith("--")
            and value.isdigit()}
    return {k: last.get(flag) for k, (flag, _) in KNOBS["vllm"].items()}


def batch_knobs(defaults: Mapping[str, Mapping[str, Any]],
                running: Mapping[str, Mapping[str, int | None]] | None = None) -> pd.DataFrame:
    """One row per engine and knob: its flag, the default on this machine (`engine_batch_defaults`), what it
    bounds, and where it was read; with `running` (engine -> `running_batch_knobs`), what the chapter's
    servers run with (a knob a server does not report: its default)."""
    rows = []
    for engine, knobs in KNOBS.items():
        answer = defaults[engine]["knobs"]
        for knob, (flag, bounds) in knobs.items():
            read = answer[knob]
            row = {"engine": engine, "knob": flag, "default": read["default"], "bounds": bounds,
                   "where read": "; ".join(w for w in (read["field"], read["resolved by"]) if w)}
            if running is not None:
                value = running.get(engine, {}).get(knob)
                row["running server"] = read["default"] if value is None else value
            rows.append(row)
    table = pd.DataFrame(rows)
    columns = ["engine", "knob", "default", *(["running server"] if running is not None else []), "bounds",
               "where read"]
    return table[columns]
