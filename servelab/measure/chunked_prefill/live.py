"""Chapter 05 on both engines: one server per scheduler setting, the scenario on each, the simulator beside it.

A ``LiveConfig`` is one server: an engine and its step budget flags. ``measure_rounds`` starts the
servers of one engine side by side where they fit (else one at a time), calibrates the step costs on the
servers marked ``calibrate``, gives each an untimed run of the scenario, and then runs the scenario
(``chunked_prefill.scenario_specs``) in rounds, the servers taking turns and a fresh seed per round, so no
round is served from the prefix cache of another; it keeps every streamed chunk. ``medians`` gives each
config's median round, ``round_ratios`` one ratio of two configs per round. ``predict`` runs the simulator on the same
scenario with each engine's fitted cost model; ``errors`` sets prediction against measurement.
``engine_defaults`` reads the defaults of both engines from their own code (engine-side scripts).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pandas as pd

from servelab.engines import flags
from servelab.engines.engine_side import script
from servelab.machine import engine_envs, models
from servelab.machine.profiles import Profile
from servelab.measure.chunked_prefill.streams import (
    budget_options,
    calibrate,
    scenario_specs,
    stream_tokens,
    token_times,
    window_stats,
)
from servelab.measure.lineup import in_rounds
from servelab.measure.rounds import spread
from servelab.sim.chunked_prefill import LONG, CostModel, Scenario, SchedulerConfig, run_scenario
from servelab.sim.chunked_prefill import window_stats as sim_window_stats

METRICS = ("long_ttft_s", "itl_p50_s", "itl_p90_s", "longest_stall_s")


@dataclass(frozen=True)
class LiveConfig:
    """One server: ``budget`` is vLLM's ``--max-num-batched-tokens`` / SGLang's ``--chunked-prefill-size``."""

    engine: str
    budget: int
    mixed_chunk: bool = False
    long_prefill_token_threshold: int = 0
    calibrate: bool = False

    @property
    def label(self) -> str:
        if self.engine == "vllm":
            thr = f", threshold {self.long_prefill_token_threshold}" if self.long_prefill_token_threshold else ""
            return f"vllm budget {self.budget}{thr}"
        return f"sglang chunk {self.budget}" + (", mixed" if self.mixed_chunk else "")

    def options(self) -> dict[str, int | bool]:
        return budget_options(self.engine, self.budget, mixed_chunk=self.mixed_chunk,
                              long_prefill_token_threshold=self.long_prefill_token_threshold)

    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(engine=self.engine, budget=self.budget, mixed_chunk=self.mixed_chunk,
                               long_prefill_token_threshold=self.long_prefill_token_threshold)


def chapter_configs(sizes: list[int]) -> list[LiveConfig]:
    """Chapter 05's servers for a profile's chunk sizes: vLLM at the largest and smallest budget and the largest
    with the smallest as its long-prefill threshold; SGLang at the smallest chunk without and with mixed chunks,
    and at the largest with them. The first of each engine is calibrated."""
    small, large = sizes[0], sizes[-1]
    return [LiveConfig("vllm", large, calibrate=True), LiveConfig("vllm", small),
            LiveConfig("vllm", large, long_prefill_token_threshold=small),
            LiveConfig("sglang", small, calibrate=True), LiveConfig("sglang", small, mixed_chunk=True),
            LiveConfig("sglang", large, mixed_chunk=True)]


def scenario_for(max_model_len: int, smallest_budget: int, *, streams: int, stream_prompt_tokens: int,
                 long_prompt_fraction: float, warmup_tokens: int = 4, spare_tokens: int = 8) -> Scenario:
    """The scenario sized for a profile: the long prompt is ``long_prompt_fraction`` of the context
    window; the streams generate long enough to decode through their own prefills (the long prompt
    waits for the last stream's warm-up), then through its prefill at the smallest budget (one token
    per step, ``budget - streams`` prompt tokens per step), and ``spare_tokens`` more."""
    if not 0 < long_prompt_fraction < 1:
        raise ValueError(f"long_prompt_fraction must be in (0, 1), got {long_prompt_fraction}")
    if smallest_budget <= streams:
        raise ValueError(f"the smallest budget ({smallest_budget}) must exceed the streams ({streams})")
    long = int(max_model_len * long_prompt_fraction)
    steps = -(-long // (smallest_budget - streams))
    stagger = -(-streams * stream_prompt_tokens // (smallest_budget - streams))
    return Scenario(streams=streams, stream_prompt_tokens=stream_prompt_tokens,
                    stream_output_tokens=warmup_tokens + stagger + steps + spare_tokens, long_prompt_tokens=long,
                    warmup_tokens=warmup_tokens)


VLLM_BUDGET_LOG = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")


def server_info(server: Any) -> dict[str, Any]:
    """What the running server reports about its chunking: SGLang's ``/server_info``; for vLLM, which
    exposes no scheduler config, the budget its ``SchedulerConfig`` logs at start (None if absent)."""
    if server.engine == "vllm":
        found = VLLM_BUDGET_LOG.findall(server.log_path.read_text(errors="replace"))
        return {"max_num_batched_tokens": int(found[-1]) if found else None}
    info = httpx.get(f"{server.url}/server_info", timeout=30).json()
    return {k: info.get(k) for k in ("chunked_prefill_size", "enable_mixed_chunk", "max_prefill_tokens")}


@dataclass(frozen=True)
class LiveRuns:
    """``stats``: one row per config and round (label, round, engine, budget, ..., ``METRICS``, reported settings).
    ``chunks``: every streamed chunk with its config's label. ``calibration``: cost samples per engine."""

    stats: pd.DataFrame
    chunks: pd.DataFrame
    calibration: pd.DataFrame


WARM_UP_SEED = 900  # the untimed run's scenario seed, past any round's (seed + 1 + round)


def prepare(server: Any, cfg: LiveConfig, scenario: Scenario, *, calibration: Mapping[str, Any] | None = None,
            seed: int = 0) -> pd.DataFrame:
    """On a server just started with ``cfg.options()``: the calibration (when ``cfg.calibrate``; its samples,
    else an empty table), then one untimed run of the scenario with a seed no round uses, so the first round
    does not pay the server's one-off costs."""
    if server.engine != cfg.engine:
        raise ValueError(f"config {cfg.label!r} is for {cfg.engine}, the server runs {server.engine}")
    samples = pd.DataFrame()
    if cfg.calibrate:
        if not calibration:
            raise ValueError(f"config {cfg.label!r} asks for calibration: pass calibration=dict(prompt_lengths=..., "
                             "batch_sizes=..., contexts=..., ...)")
        samples = calibrate(server, budget=cfg.budget, seed=seed, progress=False, **calibration).assign(
            engine=cfg.engine, config=cfg.label)
    stream_tokens(server, scenario_specs(scenario, WARM_UP_SEED + seed))
    return samples


def measure_round(server: Any, cfg: LiveConfig, scenario: Scenario, *, round: int, seed: int = 0) -> LiveRuns:
    """The scenario once on a running server, with round ``round``'s seed (``seed + 1 + round``): one row of
    ``stats`` and the streamed chunks, both with the round."""
    if server.engine != cfg.engine:
        raise ValueError(f"config {cfg.label!r} is for {cfg.engine}, the server runs {server.engine}")
    run = stream_tokens(server, scenario_specs(scenario, seed + 1 + round))
    stats = pd.DataFrame([{"config": cfg.label, "round": round, "engine": cfg.engine, "budget": cfg.budget,
                           "mixed_chunk": cfg.mixed_chunk, "threshold": cfg.long_prefill_token_threshold,
                           **window_stats(run), **{f"reported {k}": v for k, v in server_info(server).items()}}])
    chunks = run.chunks.merge(run.requests[["request", "sent_s"]], on="request").assign(config=cfg.label, round=round)
    return LiveRuns(stats, chunks, pd.DataFrame())


def collect(parts: Sequence[LiveRuns]) -> LiveRuns:
    """Several rounds' and servers' results as one (each config once per round)."""
    if not parts:
        raise ValueError("nothing to collect: measure at least one server")
    stats = pd.concat([p.stats for p in parts], ignore_index=True)
    twice = stats.duplicated(["config", "round"])
    if twice.any():
        raise ValueError(f"configs measured twice in one round: {sorted(set(stats.config[twice]))}")
    return LiveRuns(stats, pd.concat([p.chunks for p in parts], ignore_index=True),
                    pd.concat([p.calibration for p in parts], ignore_index=True))


def measure_rounds(configs: Sequence[LiveConfig], servers: Mapping[str, Any], scenario: Scenario, *, rounds: int,
                   together: bool, calibration: Mapping[str, Any] | None = None, seed: int = 0) -> LiveRuns:
    """Every config's server (``servers``: by label, not yet started), engine by engine, in ``rounds`` rounds
    (``servelab.measure.lineup.in_rounds``): the servers of one engine take turns within each round, side by
    side (``together``) or else each started afresh for every round. Each start is ``prepare``d first (its
    calibration, where marked, only on its first start)."""
    labels = [c.label for c in configs]
    if not configs or len(set(labels)) != len(labels) or set(labels) - set(servers):
        raise ValueError(f"configs must be distinct, non-empty and each have a server; got {labels} "
                         f"for servers {sorted(servers)}")
    by_label = {c.label: c for c in configs}
    parts, samples = [], []
    calibrated: set[str] = set()

    def ready(label: str, server: Any) -> None:
        cfg = by_label[label]
        if label in calibrated:  # a restart: only the untimed warm-up run
            cfg = dataclasses.replace(cfg, calibrate=False)
        calibrated.add(label)
        samples.append(prepare(server, cfg, scenario, calibration=calibration, seed=seed))

    for engine in dict.fromkeys(c.engine for c in configs):
        group = {c.label: servers[c.label] for c in configs if c.engine == engine}
        done = in_rounds(group, rounds, together=together, prepare=ready,
                         measure=lambda label, server, r: measure_round(server, by_label[label], scenario, round=r,
                                                                        seed=seed))
        parts += [runs for _, _, runs in done]
    runs = collect(parts)
    return LiveRuns(runs.stats, runs.chunks, pd.concat(samples, ignore_index=True))


def medians(stats: pd.DataFrame) -> pd.DataFrame:
    """One row per config, in the order measured: its settings, the number of rounds and each metric's median
    round (the gaps counted in the window too)."""
    settings = [c for c in stats if c not in (*METRICS, "gaps", "round")]
    middle = stats.groupby("config", sort=False)[[*METRICS, "gaps"]].median()
    count = stats.groupby("config", sort=False)["round"].nunique().rename("rounds")
    first = stats.drop_duplicates("config").set_index("config")[[c for c in settings if c != "config"]]
    return first.join(count).join(middle).reset_index()


def round_ratios(stats: pd.DataFrame, numerator: str, denominator: str, metric: str,
                 denominator_metric: str | None = None) -> pd.Series:
    """Per round, config ``numerator``'s ``metric`` over config ``denominator``'s (``denominator_metric``, else
    the same metric): the two ran in the same round, side by side where the servers fit."""
    missing = {numerator, denominator} - set(stats.config)
    if missing:
        raise ValueError(f"no rounds of {', '.join(sorted(missing))}; "
                         f"measured: {', '.join(dict.fromkeys(stats.config))}")
    below = denominator_metric or metric
    wide = stats.pivot(index="round", columns="config", values=list(dict.fromkeys([metric, below])))
    return (wide[(metric, numerator)] / wide[(below, denominator)]).rename(f"{numerator} / {denominator}")


def predict(configs: Sequence[LiveConfig], scenario: Scenario, costs: Mapping[str, CostModel]) -> pd.DataFrame:
    """The simulator's window statistics for each config, with its engine's cost model."""
    missing = sorted({c.engine for c in configs} - set(costs))
    if missing:
        raise ValueError(f"no cost model for {', '.join(missing)}; given: {', '.join(costs) or 'none'}")
    return pd.DataFrame([{"config": c.label, **sim_window_stats(run_scenario(scenario, c.scheduler(), costs[c.engine]))}
                         for c in configs])


def errors(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """Per config and metric: measured, predicted and the relative error (predicted / measured - 1)."""
    both = measured.merge(predicted, on="config", suffixes=("", " predicted"), validate="one_to_one")
    rows = [{"config": r["config"], "metric": m, "measured_s": r[m], "predicted_s": r[f"{m} predicted"],
             "rel_error": r[f"{m} predicted"] / r[m] - 1} for _, r in both.iterrows() for m in METRICS]
    return pd.DataFrame(rows)


def engine_defaults(profile: Profile) -> dict[str, dict[str, Any]]:
    """Both engines' chunked-prefill defaults on this machine, from their own code (see the two
    engine-side scripts); SGLang's resolved for the profile's model and device."""
    vllm_python = engine_envs.get(profile.vllm_env).require().python
    sglang_python = engine_envs.get(profile.sglang_env).require().python
    flags = dict(zip(profile.sglang_flags[::2], profile.sglang_flags[1::2], strict=False))
    extra = [f"{k.removeprefix('--').replace('-', '_')}={v}" for k, v in flags.items()
             if k in ("--attention-backend", "--sampling-backend")]
    with ThreadPoolExecutor(2) as pool:
        vllm = pool.submit(engine_envs.run_script, vllm_python, script("vllm_scheduler_defaults.py"), "1", "4",
                           timeout=300)
        sglang = pool.submit(engine_envs.run_script, sglang_python, script("sglang_chunk_defaults.py"),
                             models.resolve(profile.model).source, profile.device, *extra, timeout=300)
        return {"vllm": vllm.result(), "sglang": sglang.result()}


def budget_for_itl(cost: CostModel, itl_target_s: float, *, decodes: int, decode_context_tokens: int) -> int:
    """The largest step budget whose full step (``decodes`` decodes over ``decode_context_tokens`` of
    context, the rest prompt tokens) the cost model times within ``itl_target_s``."""
    room = itl_target_s - cost.step_seconds(0, decodes, decode_context_tokens)
    if cost.prefill_token_s <= 0:
        raise ValueError("the cost model charges nothing per prompt token, so any budget fits; "
                         "refit it with prefill samples")
    if room < cost.prefill_token_s:
        raise ValueError(f"a step with {decodes} decodes already takes {itl_target_s - room:.4f} s; "
                         f"the target {itl_target_s:.4f} s leaves no room for a prompt token")
    return decodes + int(room // cost.prefill_token_s)


def defaults_and_checks(profile: Profile, commands: Sequence[tuple[str, str]]
                        ) -> tuple[dict[str, dict[str, Any]], list[flags.FlagCheck]]:
    """``engine_defaults(profile)`` and ``flags.check_commands(commands)``, run at the same time."""
    with ThreadPoolExecutor(2) as pool:
        defaults = pool.submit(engine_defaults, profile)
        checks = pool.submit(flags.check_commands, list(commands))
        return defaults.result(), checks.result()


def late_vs_early(chunks: pd.DataFrame, ttft_s: float, long: str = LONG) -> float:
    """How much longer the streams' gaps are late in the long prompt's prefill than early: the median
    gap ending in the last quarter of the window (send to first token) over the median gap ending in
    its first quarter. ``chunks``: one run's chunks with ``sent_s`` (as in ``LiveRuns.chunks``)."""
    sent = float(chunks.loc[chunks.request == long, "sent_s"].iloc[0])
    times = {n: t for n, t in token_times(chunks).items() if n != long}
    ends = np.concatenate([t[1:] for t in times.values()]) - sent
    gaps = np.concatenate([np.diff(t) for t in times.values()])
    early, late = gaps[(ends > 0) & (ends <= ttft_s / 4)], gaps[(ends > 3 * ttft_s / 4) & (ends <= ttft_s)]
    if early.size == 0 or late.size == 0:
        raise ValueError("no stream gap ends in the first or in the last quarter of the window: the streams stalled "
                         "through it, so there is no growth to measure")
    return float(np.median(late) / np.median(early))


def growth_over_rounds(runs: LiveRuns, labels: Sequence[str]) -> pd.DataFrame:
    """``late_vs_early`` for each config of ``labels`` in each round: the median round with the lowest and
    highest, one row per config."""
    rows = {}
    for label in labels:
        per_round = [late_vs_early(runs.chunks[(runs.chunks.config == label) & (runs.chunks["round"] == r)],
                                   float(stat.long_ttft_s))
                     for r, stat in runs.stats[runs.stats.config == label].set_index("round").iterrows()]
        ratio = spread(per_round)
        rows[label] = {"late gap / early gap": ratio["median"], "lowest round": ratio["lowest"],
                       "highest round": ratio["highest"]}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("config")
