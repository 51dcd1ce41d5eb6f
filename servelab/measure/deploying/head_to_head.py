"""Both engines under one load generator: vLLM's own `vllm bench serve`, aimed at either server.

The client is vLLM's benchmark (`vllm/benchmarks/serve.py`), run inside the vLLM venv by
``engine_side/vllm_bench_runs.py``, whatever engine serves: it speaks only the OpenAI-compatible
HTTP API (backend ``openai``, the completions endpoint), so the same requests, arrival times and
metric code measure both engines. Prompts come from the benchmark's own datasets where it has one
(``random``; ``prefix_repetition`` for shared prefixes) and, for chapter 04's multi-turn set, from
a ``custom`` JSONL file rendered with the model's chat template. Every run asks for a fixed number
of output tokens (``--ignore-eos``) at temperature 0, with the tokenizer read from the model's
local folder (no hub access).

Every run has its own seed (`plan`: the chapter's seed plus the run's index), so no two runs send the same
random prompts and neither engine's prefix cache can serve one run from another; `measure` sends a warm-up
run (its own seed, not reported) first, and reads each engine's own cached-token counter before and after
every run (`CACHED_COUNTER`), so a table can show that the random runs got no prefix-cache hits.

The plan runs in rounds (`plans`: each round with seeds of its own); where both servers fit side by side
the engines take turns within every round, the one that starts changing from round to round
(`measure_rounds`), so a slow stretch of the host lands on both; on a GPU, where they do not, every
round starts each server afresh, in the same turns. `round_ratios` gives one vLLM/SGLang ratio per run and round, and
`ratio_spread` their median with the lowest and highest round.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from servelab.engines.engine_side import script
from servelab.engines.server import Server
from servelab.integers import int_at_least
from servelab.machine import engine_envs
from servelab.measure.lineup import in_rounds
from servelab.measure.prefix_cache.workloads import multi_turn
from servelab.measure.rounds import spread

CLIENT_ENV_ENGINE = "vllm"  # the engine whose venv holds the load generator
PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "itl", "e2el")
KEPT = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
        "output_throughput", "total_token_throughput")
# Each engine's own counter of prompt tokens served from its prefix cache (vllm/v1/metrics/loggers.py;
# sglang/srt/observability/metrics_collector.py), read from /metrics before and after every run.
CACHED_COUNTER = {"vllm": "vllm:prefix_cache_hits", "sglang": "sglang:cached_tokens"}
# Per-request lists of the benchmark's answer that are saved (ms for times; itls: one list per request).
PER_REQUEST = {"ttfts": "ttft_ms", "latencies": "e2el_ms", "itls": "itls_ms", "input_lens": "input_tokens",
               "output_lens": "output_tokens"}


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
    seed: int = 0  # --seed: the prompts (and arrival times) of this run

    def args(self, server: Server, output_tokens: int, dataset_path: str | None = None) -> list[str]:
        """The `vllm bench serve` arguments of this run against `server`."""
        out = ["--backend", "openai", "--base-url", server.url, "--model", server.served_model,
               "--tokenizer", server.model.source, "--seed", str(self.seed), "--num-prompts", str(self.prompts),
               "--temperature", "0", "--ignore-eos", "--output-len", str(output_tokens), "--disable-tqdm",
               "--save-detailed",  # keep the per-request lists in the answer (nothing is written to a file)
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
    prefixes, long prompts and chapter 04's multi-turn conversations (these three at one concurrency).
    A concurrency level c sends `waves` x c prompts (at least 4). Run i gets the seed `seed + i`, so no
    two runs send the same prompts; `warm_up` uses the next seed."""
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
    return [replace(r, seed=seed + i) for i, r in enumerate(runs)]


ROUND_SEEDS = 1000  # round r's runs take the seeds from seed + r * ROUND_SEEDS on


def plans(rounds: int, *, seed: int = 0, **options: Any) -> list[list[Run]]:
    """`plan(**options)` once per round, round r from the seed `seed + r * ROUND_SEEDS`: no two runs of any
    round send the same prompts, the multi-turn conversations included, so no round is served from the
    prefix cache an earlier round filled."""
    out = [plan(seed=seed + r * ROUND_SEEDS, **options) for r in range(int_at_least("rounds", rounds, 1))]
    if len(out[0]) > ROUND_SEEDS:
        raise ValueError(f"a round of {len(out[0])} runs needs more than the {ROUND_SEEDS} seeds a round has")
    return out


def warm_up(runs: Sequence[Run], prompts: int = 4) -> Run:
    """A short random run with a seed no run of `runs` uses (sent first, not reported): the server's first
    requests pay one-off costs that would otherwise land on the first measured run."""
    template = next((r for r in runs if r.workload == "random"), None)
    if template is None:
        raise ValueError("warm_up copies a random run's dataset; the plan has none")
    return Run("warm-up", "warm_up", template.dataset, _positive("prompts", prompts), concurrency=prompts,
               seed=max(r.seed for r in runs) + 1)


def multi_turn_chats(seed: int, conversations: int, turns: int) -> tuple:
    """Chapter 04's multi-turn requests, turn by turn with the conversations interleaved (turn t of every
    conversation before turn t+1 of any), so that at a concurrency of `conversations` a turn is sent only
    once a request of the turn before has finished."""
    requests = multi_turn(seed, conversations=conversations, turns=turns)
    order = sorted(requests, key=lambda r: (int(r.request_id.rsplit("-", 1)[1]), r.request_id))
    return tuple(tuple(dict(m) for m in r.messages) for r in order)


def measure(server: Server, runs: Sequence[Run], *, output_tokens: int, warm: Run | None = None,
            timeout: float = 600) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every run against `server` with vLLM's benchmark client (one process), after the `warm` run if given:
    one row per run (with the growth of the engine's cached-token counter), and one row per request."""
    client = engine_envs.get(server.profile.engine_env(CLIENT_ENV_ENGINE)).require()
    sent = ([warm] if warm else []) + list(runs)
    with tempfile.TemporaryDirectory(prefix="servelab-bench-") as tmp:
        request = {"runs": [{"name": r.name, "args": r.args(server, output_tokens, f"{tmp}/{i}.jsonl"),
                             "chats": [list(c) for c in r.chats], "tokenizer": server.model.source}
                            for i, r in enumerate(sent)],
                   "metrics_url": f"{server.url}/metrics", "counter": CACHED_COUNTER[server.engine]}
        answer = engine_envs.run_script(client.python, script("vllm_bench_runs.py"), stdin=json.dumps(request),
                                        timeout=timeout, log=Path(tmp) / "bench.log")
    if warm:
        answer = {**answer, "runs": answer["runs"][1:]}
    return frame(server.engine, runs, answer), requests(server.engine, runs, answer)


def measure_rounds(servers: Mapping[str, Server], plans: Sequence[Sequence[Run]], *, together: bool,
                   output_tokens: int, warm: Run | None = None,
                   started: Callable[[str, Server], None] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every round's runs on every server (`servers`: engine -> a server, not yet started), in rounds
    (`servelab.measure.lineup.in_rounds`): the servers take turns and round r starts with server r mod n, side
    by side (`together`) or else each started afresh for every round (on a GPU, where one fits at a time).
    `warm` goes before the first round of each start; `started(engine, server)` is called after each start.
    The tables of `measure`, with a `round` column."""
    if not servers or not plans:
        raise ValueError(f"need at least one server and one round, got {len(servers)} and {len(plans)}")

    def one(engine: str, server: Server, r: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        first = r == 0 or not together  # apart, every round is a fresh start
        summary, per_request = measure(server, plans[r], output_tokens=output_tokens, warm=warm if first else None)
        return summary.assign(round=r), per_request.assign(round=r)

    done = in_rounds(servers, len(plans), together=together, measure=one, prepare=started)
    return (pd.concat([d[0] for _, _, d in done], ignore_index=True),
            pd.concat([d[1] for _, _, d in done], ignore_index=True))


def frame(engine: str, runs: Sequence[Run], answer: dict) -> pd.DataFrame:
    """The benchmark's answer as a table: the run's settings, then its counts, rates and percentiles, and
    `cached_tokens`, the growth of the engine's own cached-token counter over the run (None if not read)."""
    if len(answer["runs"]) != len(runs):
        raise ValueError(f"the benchmark answered {len(answer['runs'])} runs for {len(runs)} sent")
    rows = []
    for run, got in zip(runs, answer["runs"], strict=True):
        result = got["result"]
        row = {"engine": engine, "run": run.name, "workload": run.workload, "concurrency": run.concurrency,
               "rate": run.rate, "prompts": run.prompts, "seed": run.seed,
               "client": f"vllm bench serve {answer['version']}"}
        row.update({k: result.get(k) for k in KEPT})
        counter = got.get("counter")
        row["cached_tokens"] = counter["after"] - counter["before"] if counter else None
        for metric in METRICS:
            row[f"mean_{metric}_ms"] = result.get(f"mean_{metric}_ms")
            row.update({f"p{p}_{metric}_ms": result.get(f"p{p}_{metric}_ms") for p in PERCENTILES})
        rows.append(row)
    return pd.DataFrame(rows)


def requests(engine: str, runs: Sequence[Run], answer: dict) -> pd.DataFrame:
    """One row per request of every run: its TTFT, end-to-end latency (ms), inter-token gaps (ms, a list) and
    token counts, from the benchmark's per-request lists (seconds there). The gaps are a JSON list per request."""
    rows = []
    for run, got in zip(runs, answer["runs"], strict=True):
        lists = got.get("requests") or {}
        n = len(lists.get("ttfts", []))
        for i in range(n):
            row = {"engine": engine, "run": run.name, "request": i}
            for key, name in PER_REQUEST.items():
                value = lists[key][i] if key in lists else None
                if name.endswith("_ms") and value is not None:
                    value = (json.dumps([round(1000 * v, 3) for v in value]) if isinstance(value, list)
                             else 1000 * value)
                row[name] = value
            rows.append(row)
    return pd.DataFrame(rows, columns=["engine", "run", "request", *PER_REQUEST.values()])


def maxima(per_request: pd.DataFrame) -> pd.DataFrame:
    """Per (engine, run): the largest TTFT and the largest inter-token gap of any request (ms) over every
    round, from `requests`' table; with a few dozen requests a run's 99th percentile is little more than these."""
    if per_request.empty:
        raise ValueError("maxima needs at least one request")
    gaps = per_request.itls_ms.map(lambda text: max(json.loads(text), default=float("nan")))
    frame = per_request.assign(gap=gaps).groupby(["engine", "run"], sort=False)
    return pd.DataFrame({"max_ttft_ms": frame.ttft_ms.max(), "max_itl_ms": frame.gap.max()}).reset_index()


RATIO_COLUMNS = ("p50_ttft_ms", "p90_ttft_ms", "p50_itl_ms", "p90_itl_ms", "p50_e2el_ms", "output_throughput")
SETTINGS = ("engine", "run", "workload", "concurrency", "rate", "prompts", "client")


def medians(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (engine, run): every measured column's median over the rounds, the run's settings kept."""
    keys = ["engine", "run"]
    settings = table[[c for c in SETTINGS if c in table]].drop_duplicates(keys)
    measured = [c for c in table.select_dtypes("number").columns if c not in (*SETTINGS, "round", "seed")]
    middle = table.groupby(keys, sort=False)[measured].median().reset_index()
    return settings.merge(middle, on=keys)


def round_ratios(table: pd.DataFrame, numerator: str = "vllm", denominator: str = "sglang") -> pd.DataFrame:
    """Per run and round, the numerator engine's value over the denominator's, for the latency percentiles
    and throughput (a table without a `round` column is one round). A latency ratio below 1 or a throughput
    ratio above 1 favours the numerator engine."""
    engines = set(table.engine)
    if not {numerator, denominator} <= engines:
        raise ValueError(f"ratios need rows of both {numerator!r} and {denominator!r}; the table has {sorted(engines)}")
    table = table if "round" in table else table.assign(round=0)
    columns = [c for c in RATIO_COLUMNS if c in table]  # a saved table may keep only some of them
    wide = table.set_index(["run", "round", "engine"])[columns].unstack("engine")
    out = pd.DataFrame({c: wide[(c, numerator)] / wide[(c, denominator)] for c in columns})
    return out.loc[list(dict.fromkeys(table.run))]


def ratios(table: pd.DataFrame, numerator: str = "vllm", denominator: str = "sglang") -> pd.DataFrame:
    """Per run, the median over the rounds of `round_ratios`."""
    per_round = round_ratios(table, numerator, denominator)
    return per_round.groupby(level="run", sort=False).median()


def ratio_spread(table: pd.DataFrame, metric: str, lower_is_better: bool = True) -> pd.DataFrame:
    """Per run, one metric's vLLM/SGLang ratio: the median round, the lowest and highest, and the engine every
    round favours (`favoured in every round`: "vllm", "sglang", or "" when the rounds disagree)."""
    if metric not in RATIO_COLUMNS:
        raise ValueError(f"unknown metric {metric!r}; accepted: {', '.join(RATIO_COLUMNS)}")
    rows = {}
    for run, values in round_ratios(table)[metric].groupby(level="run", sort=False):
        stats = spread(values.tolist())
        vllm_wins = values < 1 if lower_is_better else values > 1
        rows[run] = {"median": stats["median"], "lowest round": stats["lowest"], "highest round": stats["highest"],
                     "rounds": stats["rounds"],
                     "favoured in every round": "vllm" if vllm_wins.all() else "sglang" if (~vllm_wins).all() else ""}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("run")
