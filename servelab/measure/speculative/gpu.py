"""Chapter 06's GPU runs: draft pairs and EAGLE-3 heads each engine accepts, measured against the same target
without speculation, one server at a time; runs that need a gated model are skipped, with the reason, when no
Hugging Face token is set.

The heads are the ones the installed engines name themselves: ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`` in a
comment of vLLM's ``vllm/config/speculative.py``, ``lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B`` as SGLang's
``DEFAULT_DRAFT_MODEL_EAGLE3`` (``sglang/test/test_utils.py``), both for Llama-3.1-8B-Instruct (gated on the hub).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from servelab.engines import launch
from servelab.machine import hub, models, profiles
from servelab.machine.profiles import Profile
from servelab.measure.lineup import in_rounds
from servelab.measure.speculative import live, load
from servelab.measure.speculative.setups import EAGLE3_HEADS, LLAMA_8B, QWEN_05B, QWEN_3B, QWEN_7B, REPETITIVE, TASKS


@dataclass(frozen=True)
class Run:
    """One speculative configuration of one engine, measured against the same engine without it."""

    label: str
    engine: str  # "vllm" or "sglang"
    model: str  # the target, a hub id
    options: dict = field(default_factory=dict)  # engine options: vLLM's speculative_config, SGLang's flags
    profiles: tuple[str, ...] = ()  # the GPU profiles it runs on
    env: dict = field(default_factory=dict)  # environment the speculative server needs besides its flags


def all_gpu_runs(k: int = 4) -> list[Run]:
    """The GPU runs, each on the profiles whose GPUs it fits (`python -m servelab plan` checks that, and each pair
    with both engines' own rules, servelab.engines.draft_rules). Qwen2.5-0.5B drafts for the 3B on both engines
    (one vocabulary); for the 7B, the articles' pair, only vLLM can (use_heterogeneous_vocab); SGLang's STANDALONE
    refuses unequal vocabularies. EAGLE-3 heads for Llama-3.1-8B need the 80 GB profile on SGLang."""
    chain = {"speculative_num_steps": k - 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": k}
    both, large = ("gpu-24g", "gpu-80g"), ("gpu-80g",)
    return [
        Run("vLLM draft_model: Qwen2.5-0.5B -> 7B", "vllm", QWEN_7B,
            {"speculative_config": {"method": "draft_model", "model": QWEN_05B, "num_speculative_tokens": k,
                                    "use_heterogeneous_vocab": True}}, both),
        # (gpu-24g serves the 3B, and its chapter already runs this pair as the profile's draft)
        Run("vLLM draft_model: Qwen2.5-0.5B -> 3B", "vllm", QWEN_3B,
            {"speculative_config": {"method": "draft_model", "model": QWEN_05B, "num_speculative_tokens": k}}, large),
        Run("SGLang STANDALONE: Qwen2.5-0.5B -> 3B", "sglang", QWEN_3B,
            {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": QWEN_05B, **chain}, both),
        Run("vLLM EAGLE-3 head -> Llama-3.1-8B", "vllm", LLAMA_8B,
            {"speculative_config": {"method": "eagle3", "model": EAGLE3_HEADS["vllm"], "num_speculative_tokens": k}},
            large),
        # The head's config.json says max_position_embeddings 2048; SGLang gives its draft worker the target's
        # context length and ModelConfig._derive_context_length (sglang/srt/configs/model_config.py) refuses a longer
        # one unless this variable is set, as SGLang's own test fixture for this head does
        # (sglang/test/server_fixtures/spec_eagle_fixture.py).
        Run("SGLang EAGLE3 head -> Llama-3.1-8B (SGLang's own steps/top-k/draft tokens)", "sglang", LLAMA_8B,
            {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": EAGLE3_HEADS["sglang"]}, large,
            {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}),
    ]


def run_models(run: Run) -> list[str]:
    """Every hub model a run reads: its target and its draft or head."""
    spec = run.options.get("speculative_config") or {}
    return [m for m in (run.model, spec.get("model"), run.options.get("speculative_draft_model_path")) if m]


def profile_draft_config(profile_name: str) -> dict:
    """The vLLM draft configuration a profile names (servelab/data/profiles.toml)."""
    return dict(profiles.load(profile_name).speculative.get("vllm", {}))


def gpu_runs(profile: Profile, k: int = 4) -> list[Run]:
    """The runs this profile makes (none where there is no GPU)."""
    return [run for run in all_gpu_runs(k) if profile.name in run.profiles]


def run_command(run: Run, profile: Profile, port: int = 8000) -> list[str]:
    """The launch command of ``run`` on ``profile``, as servelab starts it (the model is not looked up)."""
    ref = models.ModelRef(source=run.model, served_name=run.model, local=False)
    return launch.command(run.engine, profile, ref, port, dict(run.options)).argv


def gpu_commands(k: int = 4) -> pd.DataFrame:
    """Each GPU profile's runs and their launch commands, as one would type them."""
    rows = []
    for name in (n for n in profiles.names() if profiles.load(n).device == "cuda"):
        profile = profiles.load(name)
        rows += [{"profile": name, "run": run.label, "engine": run.engine,
                  "command": shlex.join(run_command(run, profile))} for run in gpu_runs(profile, k)]
    return pd.DataFrame(rows)


def _over_rounds(rates: pd.DataFrame, by: Sequence[str], value: str, rounds: int) -> pd.DataFrame:
    """Per ``by``: the speculative server's speedup over plain in each round, as its median, lowest and highest
    round, and whether every round agrees (``against 1``)."""
    got = load.paired_speedups(rates, by, value)
    return got.rename(columns={"lowest": "speedup lowest", "highest": "speedup highest"}).assign(**{
        "against 1": [load.spread_verdict(lo, hi, rounds) for lo, hi in zip(got.lowest, got.highest, strict=True)]})


def measure_run(plain: Any, speculative: Any, profile: Profile, task_tokens: int, concurrency: Sequence[int],
                sweep_tokens: int, rounds: int = 1) -> pd.DataFrame:
    """One GPU run (two declared servers, servelab.measure.chapter_servers.Launch: the target plain and with
    speculation), one server at a time in ``rounds`` rounds, each round starting both afresh in turn
    (:func:`servelab.measure.lineup.in_rounds`) and warming each start up untimed: the decode
    speedup (median of the rounds, with the lowest and highest round) and tokens per verification on the greedy
    tasks (one request at a time, the mean over the tasks in each round, with whether every answer kept its tokens)
    and per concurrency on the sweep's waves. The counters and tokens are the first round's (greedy: every round
    gives the same)."""
    prompts = [TASKS[name] for name in REPETITIVE]
    done = in_rounds({"plain": plain.server(profile), "speculative": speculative.server(profile)}, rounds,
                     together=False,
                     prepare=lambda _, server: live.warm_up(server, TASKS, task_tokens, prompts, min(concurrency),
                                                            sweep_tokens),
                     measure=lambda _, server, r: (live.answer_tasks(server, TASKS, task_tokens),
                                                   live.sweep(server, prompts, concurrency, sweep_tokens)))
    got = {label: [result for _, name, result in done if name == label] for label in ("plain", "speculative")}
    per_task = pd.concat([t.table.assign(method=label, round=r) for label, runs in got.items()
                          for r, (t, _) in enumerate(runs)], ignore_index=True)
    per_b = pd.concat([w.assign(method=label, round=r) for label, runs in got.items()
                       for r, (_, w) in enumerate(runs)], ignore_index=True)
    task_mean = per_task.groupby(["method", "round"])["decode tokens/s"].mean().reset_index().assign(workload="tasks")
    (plain_tasks, _), (spec_tasks, spec_waves) = got["plain"][0], got["speculative"][0]
    one = _over_rounds(task_mean, ["workload"], "decode tokens/s", rounds).assign(
        concurrency=1, **{"tokens per verification": spec_tasks.table["tokens per verification"].mean(),
                          "same tokens": all(a.token_ids == b.token_ids for a, b in
                                             zip(plain_tasks.answers, spec_tasks.answers, strict=True))})
    waves = _over_rounds(per_b, ["concurrency"], "decode tokens/s per request", rounds).merge(
        spec_waves[["concurrency", "tokens per verification"]], on="concurrency", validate="one_to_one")
    frame = pd.concat([one, waves.assign(workload="waves")], ignore_index=True)
    return frame.assign(run=speculative.name, engine=speculative.engine)[GPU_COLUMNS]


GPU_COLUMNS = ["run", "engine", "workload", "concurrency", "speedup", "speedup lowest", "speedup highest", "rounds",
               "against 1", "tokens per verification", "same tokens"]


def measure_gpu_runs(runs: Sequence[Run], servers: Mapping[str, Any], profile: Profile, task_tokens: int,
                     concurrency: Sequence[int], sweep_tokens: int, rounds: int = 1) -> tuple[pd.DataFrame, list[str]]:
    """Every GPU run that can run here (:func:`measure_run`, ``rounds`` rounds each), with the chapter's declared
    servers (`servers[run.label]` and `servers[run.label + ": plain"]`); a run whose models are gated and no token
    is set is skipped, and the second value says which and why, one line each."""
    parts, skipped = [], []
    for run in runs:
        if reason := hub.skip_reason(run_models(run)):
            skipped.append(f"{run.label}: skipped: {reason}")
            continue
        parts.append(measure_run(servers[f"{run.label}: plain"], servers[run.label], profile, task_tokens,
                                 concurrency, sweep_tokens, rounds))
    return (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=GPU_COLUMNS)), skipped


