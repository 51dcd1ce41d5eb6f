"""Chapter 04 on both engines: one server per scheduler setting, the scenario on each, the simulator beside it.

A ``LiveConfig`` is one server: an engine and its step budget flags. ``measure_configs`` starts each in
turn, runs the scenario once (``chunked_prefill.scenario_specs``), calibrates the step costs on the
servers marked ``calibrate``, and keeps every streamed chunk. ``predict`` runs the simulator on the same
scenario with each engine's fitted cost model; ``errors`` sets prediction against measurement.
``engine_defaults`` reads the defaults of both engines from their own code (engine-side scripts).
"""

from __future__ import annotations

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
from servelab.engines.server import running
from servelab.machine import engine_envs, models
from servelab.machine.profiles import Profile
from servelab.measure.chunked_prefill import (
    budget_options,
    calibrate,
    scenario_specs,
    stream_tokens,
    token_times,
    window_stats,
)
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
    """Chapter 04's servers for a profile's chunk sizes: vLLM at the largest and smallest budget and the largest
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
    """``stats``: one row per config (label, engine, budget, ..., ``METRICS``, reported settings).
    ``chunks``: every streamed chunk with its config's label. ``calibration``: cost samples per engine."""

    stats: pd.DataFrame
    chunks: pd.DataFrame
    calibration: pd.DataFrame


def measure_one(server: Any, cfg: LiveConfig, scenario: Scenario, *, calibration: Mapping[str, Any] | None = None,
                seed: int = 0) -> LiveRuns:
    """On a running server started with ``cfg.options()``: the calibration (when ``cfg.calibrate``), then
    the scenario once. One row of ``stats``; ``collect`` joins the results of several servers."""
    if server.engine != cfg.engine:
        raise ValueError(f"config {cfg.label!r} is for {cfg.engine}, the server runs {server.engine}")
    reported = server_info(server)
    samples = pd.DataFrame()
    if cfg.calibrate:
        if not calibration:
            raise ValueError(f"config {cfg.label!r} asks for calibration: pass calibration=dict(prompt_lengths=..., "
                             "batch_sizes=..., contexts=..., ...)")
        samples = calibrate(server, budget=cfg.budget, seed=seed, progress=False, **calibration).assign(
            engine=cfg.engine, config=cfg.label)
    run = stream_tokens(server, scenario_specs(scenario, seed))
    stats = pd.DataFrame([{"config": cfg.label, "engine": cfg.engine, "budget": cfg.budget,
                           "mixed_chunk": cfg.mixed_chunk, "threshold": cfg.long_prefill_token_threshold,
                           **window_stats(run), **{f"reported {k}": v for k, v in reported.items()}}])
    chunks = run.chunks.merge(run.requests[["request", "sent_s"]], on="request").assign(config=cfg.label)
    return LiveRuns(stats, chunks, samples)


def collect(parts: Sequence[LiveRuns]) -> LiveRuns:
    """Several servers' results as one (configs must be distinct)."""
    if not parts:
        raise ValueError("nothing to collect: measure at least one server")
    stats = pd.concat([p.stats for p in parts], ignore_index=True)
    if stats.config.duplicated().any():
        raise ValueError(f"configs measured twice: {sorted(set(stats.config[stats.config.duplicated()]))}")
    return LiveRuns(stats, pd.concat([p.chunks for p in parts], ignore_index=True),
                    pd.concat([p.calibration for p in parts], ignore_index=True))


def measure_configs(configs: Sequence[LiveConfig], profile: Profile, scenario: Scenario, *,
                    calibration: Mapping[str, Any], seed: int = 0) -> LiveRuns:
    """Start one server per config, ``measure_one`` on it, stop it; ``collect`` the results."""
    labels = [c.label for c in configs]
    if not configs or len(set(labels)) != len(labels):
        raise ValueError(f"configs must be distinct and non-empty, got {labels}")
    parts = []
    for cfg in configs:
        with running(cfg.engine, profile, **cfg.options()) as server:
            parts.append(measure_one(server, cfg, scenario, calibration=calibration, seed=seed))
    return collect(parts)


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
