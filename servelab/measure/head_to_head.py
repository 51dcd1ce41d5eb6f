"""Both engines under one load generator: vLLM's own `vllm bench serve`, aimed at either server.

The client is vLLM's benchmark (`vllm/benchmarks/serve.py`), run inside the vLLM venv by
``engine_side/vllm_bench_runs.py``, whatever engine serves: it speaks only the OpenAI-compatible
HTTP API (backend ``openai``, the completions endpoint), so the same requests, arrival times and
metric code measure both engines. Prompts come from the benchmark's own datasets where it has one
(``random``; ``prefix_repetition`` for shared prefixes) and, for chapter 03's multi-turn set, from
a ``custom`` JSONL file rendered with the model's chat template. Every run asks for a fixed number
of output tokens (``--ignore-eos``) at temperature 0, with the tokenizer read from the model's
local folder (no hub access).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from servelab.engines.engine_side import script
from servelab.engines.server import Server
from servelab.machine import engine_envs
from servelab.measure.prefix_workloads import multi_turn

CLIENT_ENV_ENGINE = "vllm"  # the engine whose venv holds the load generator
PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "itl", "e2el")
KEPT = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
        "output_throughput", "total_token_throughput", "max_concurrent_requests")


@dataclass(frozen=True)
class Run:
    """One benchmark run: a workload at one concurrency limit or request rate."""

    name: str
    workload: str  # random, shared_prefix, long_prompt, multi_turn
    dataset: tuple[str, ...]  # the benchmark's dataset arguments
    prompts: int
    concurrency: int | None = None  # --max-concurrency (None: unlimited)
    rate: float = math.inf  # --request-rate in requests/s (inf: all at once)
    chats: tuple = field(default=(), compare=False)  # multi-turn: the messages of each request, in order

    def args(self, server: Server, output_tokens: int, seed: int, dataset_path: str | None = None) -> list[str]:
        """The `vllm bench serve` arguments of this run against `server`."""
        out = ["--backend", "openai", "--base-url", server.url, "--model", server.served_model,
               "--tokenizer", server.model.source, "--seed", str(seed), "--num-prompts", str(self.prompts),
               "--temperature", "0", "--ignore-eos", "--output-len", str(output_tokens), "--disable-tqdm",
               "--percentile-metrics", ",".join(METRICS),
               "--metric-percentiles", ",".join(str(p) for p in PERCENTILES), *self.dataset]
        if self.chats:
            if dataset_path is None:
                raise ValueError(f"run {self.name!r} sends chats: it needs a dataset_path for their JSONL file")
            out += ["--dataset-path", dataset_path]
        if self.concurrency is not None:
            out += ["--max-concurrency", str(self.concurrency)]
        if math.isfinite(self.rate):
            out += ["--request-rate", str(self.rate)]
        return out


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


def plan(max_model_len: int, *, input_tokens: int, concurrencies: Sequence[int], rates: Sequence[float],
         rate_prompts: int, long_fraction: float, long_prompts: int, prefix_fraction: float,
         suffix_tokens: int, prefixes: int, prefix_prompts: int, conversations: int, turns: int,
         waves: int = 2, seed: int = 0) -> list[Run]:
    """The runs of the head-to-head: random prompts over concurrency and over request rate, shared
    prefixes, long prompts and chapter 03's multi-turn conversations (these three at one concurrency).
    A concurrency level c sends `waves` x c prompts (at least 4)."""
    for name, value in (("input_tokens", input_tokens), ("rate_prompts", rate_prompts),
                        ("long_prompts", long_prompts), ("suffix_tokens", suffix_tokens), ("prefixes", prefixes),
                        ("prefix_prompts", prefix_prompts), ("conversations", conversations), ("turns", turns),
                        ("waves", waves)):
        _positive(name, value)
    for c in concurrencies:
        _positive("each concurrency", c)
    if not all(r > 0 for r in rates):
        raise ValueError(f"request rates must be > 0 requests/s, got {list(rates)}")
    if not (0 < long_fraction < 1 and 0 < prefix_fraction < 1):
        raise ValueError(f"long_fraction and prefix_fraction must lie in (0, 1), "
                         f"got {long_fraction}, {prefix_fraction}")
    random = ("--dataset-name", "random", "--random-input-len", str(input_tokens), "--random-range-ratio", "0")
    runs = [Run(f"random, concurrency {c}", "random", random, max(4, waves * c), concurrency=c) for c in concurrencies]
    runs += [Run(f"random, {r:g} req/s", "random", random, rate_prompts, rate=float(r)) for r in rates]
    prefix_tokens = int(prefix_fraction * max_model_len)
    runs.append(Run("shared prefix", "shared_prefix",
                    ("--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", str(prefix_tokens),
                     "--prefix-repetition-suffix-len", str(suffix_tokens),
                     "--prefix-repetition-num-prefixes", str(prefixes)), prefix_prompts, concurrency=prefixes))
    long_tokens = int(long_fraction * max_model_len)
    runs.append(Run("long prompts", "long_prompt",
                    ("--dataset-name", "random", "--random-input-len", str(long_tokens), "--random-range-ratio", "0"),
                    long_prompts, concurrency=1))
    chats = multi_turn_chats(seed, conversations, turns)
    custom = ("--dataset-name", "custom", "--skip-chat-template", "--disable-shuffle")
    runs.append(Run("multi-turn", "multi_turn", custom, conversations * turns, concurrency=conversations, chats=chats))
    return runs


def multi_turn_chats(seed: int, conversations: int, turns: int) -> tuple:
    """Chapter 03's multi-turn requests, turn by turn with the conversations interleaved (turn t of every
    conversation before turn t+1 of any), so that at a concurrency of `conversations` a turn is sent only
    once a request of the turn before has finished."""
    requests = multi_turn(seed, conversations=conversations, turns=turns)
    order = sorted(requests, key=lambda r: (int(r.request_id.rsplit("-", 1)[1]), r.request_id))
    return tuple(tuple(dict(m) for m in r.messages) for r in order)


def measure(server: Server, runs: Sequence[Run], *, output_tokens: int, seed: int = 0,
            timeout: float = 600) -> pd.DataFrame:
    """Every run against `server` with vLLM's benchmark client (one process); one row per run."""
    client = engine_envs.get(server.profile.engine_env(CLIENT_ENV_ENGINE)).require()
    with tempfile.TemporaryDirectory(prefix="servelab-bench-") as tmp:
        request = {"runs": [{"name": r.name, "args": r.args(server, output_tokens, seed, f"{tmp}/{i}.jsonl"),
                             "chats": [list(c) for c in r.chats], "tokenizer": server.model.source}
                            for i, r in enumerate(runs)]}
        answer = engine_envs.run_script(client.python, script("vllm_bench_runs.py"), stdin=json.dumps(request),
                                        timeout=timeout, log=Path(tmp) / "bench.log")
    return frame(server.engine, runs, answer)


def frame(engine: str, runs: Sequence[Run], answer: dict) -> pd.DataFrame:
    """The benchmark's answer as a table: the run's settings, then its counts, rates and percentiles."""
    if len(answer["runs"]) != len(runs):
        raise ValueError(f"the benchmark answered {len(answer['runs'])} runs for {len(runs)} sent")
    rows = []
    for run, got in zip(runs, answer["runs"], strict=True):
        result = got["result"]
        row = {"engine": engine, "run": run.name, "workload": run.workload, "concurrency": run.concurrency,
               "rate": run.rate, "prompts": run.prompts, "client": f"vllm bench serve {answer['version']}"}
        row.update({k: result.get(k) for k in KEPT})
        for metric in METRICS:
            row[f"mean_{metric}_ms"] = result.get(f"mean_{metric}_ms")
            row.update({f"p{p}_{metric}_ms": result.get(f"p{p}_{metric}_ms") for p in PERCENTILES})
        rows.append(row)
    return pd.DataFrame(rows)


RATIO_COLUMNS = ("p50_ttft_ms", "p90_ttft_ms", "p50_itl_ms", "p90_itl_ms", "p50_e2el_ms", "output_throughput")


def ratios(table: pd.DataFrame, numerator: str = "vllm", denominator: str = "sglang") -> pd.DataFrame:
    """Per run, numerator engine's value over the denominator's, for the latency percentiles and throughput.

    A latency ratio below 1 or a throughput ratio above 1 favours the numerator engine."""
    engines = set(table.engine)
    if not {numerator, denominator} <= engines:
        raise ValueError(f"ratios need rows of both {numerator!r} and {denominator!r}; the table has {sorted(engines)}")
    wide = table.set_index(["run", "engine"])[list(RATIO_COLUMNS)].unstack("engine")
    out = pd.DataFrame({c: wide[(c, numerator)] / wide[(c, denominator)] for c in RATIO_COLUMNS})
    order = list(dict.fromkeys(table.run))
    return out.loc[order]
