"""`python -m servelab plan --profile P`: every server the book starts on a profile, checked before anything runs.

Per chapter: each launch command (from the chapter's own declarations, servelab.measure.chapter_servers, with
the parameters its notebook's `parameters` cell sets), the hub models it downloads and their size, the disk
they need, how many engine starts, and an estimate of the time. Each launch is then checked as the engine of
the pinned release would check it, without a GPU and without starting anything:

- parsed by the engine's own argument parser (servelab.engines.flags);
- a draft/target pair by each engine's own rule (servelab.engines.draft_rules: vocabulary, method);
- its memory on every GPU class the profile names, by each engine's own formula (servelab.engines.memory_fit);
- gated models named with what the user must do (servelab.machine.hub);
- nothing a GPU profile's machine lacks: a cpu profile's local model or a cpu engine venv.

A problem is one line; `plan` exits non-zero when there is any.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jupytext

from servelab.book import chapters
from servelab.engines import draft_rules, flags, launch, memory_fit
from servelab.machine import gpu_checks, hardware, hub, models, profiles
from servelab.machine.profiles import Profile
from servelab.measure import chapter_servers
from servelab.measure.chapter_servers import Launch

GIB = 2**30
# An estimate, not a measurement: one engine start on a GPU reads the weights (at LOAD_GIB_PER_S from a local
# NVMe disk) and then profiles memory and captures CUDA graphs (START_OVERHEAD_S; vLLM also compiles with
# torch.compile on its first start). A recorded run replaces it (`recorded_minutes`).
LOAD_GIB_PER_S = 1.0
START_OVERHEAD_S = {"vllm": 90.0, "sglang": 60.0}
CPU_START_S = 30.0  # SmolLM2-135M with --enforce-eager on the cpu profile: 20-40 s a start on 2 cores
# Server keyword arguments that are not engine flags.
NOT_FLAGS = ("env",)


@dataclass(frozen=True)
class PlannedLaunch:
    chapter: str
    launch: Launch
    argv: list[str]
    models: list[str]  # every hub model the server reads (target and draft)
    target: str  # the model it serves: the launch's, else the profile's (a hub id or local:NAME)

    @property
    def flags(self) -> dict[str, Any]:
        """The launch's options that become engine flags (not the Server's own, such as env)."""
        return engine_flags(self.launch.options)

    @property
    def needs_cpu_model(self) -> bool:
        return self.target.startswith("local:")


@dataclass
class ChapterPlan:
    chapter: str  # "03_paged_attention"
    launches: list[PlannedLaunch]
    minutes: float  # estimated wall time of the chapter's engine starts (and, where recorded, its whole run)
    recorded: bool  # minutes come from a recorded run of this profile

    @property
    def starts(self) -> int:
        return sum(p.launch.starts for p in self.launches)

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(m for p in self.launches for m in p.models))


@dataclass
class Plan:
    profile: Profile
    chapters: list[ChapterPlan]
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the user must do that is not a defect (a token)

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(m for c in self.chapters for m in c.models))


def parameters(source: Any) -> dict[str, Any]:
    """The literal assignments of a chapter's `parameters` cell (what papermill would override)."""
    notebook = jupytext.read(source)
    cell = next((c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])), None)
    if cell is None:
        raise ValueError(f"{source}: no cell tagged parameters")
    found = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return found


def model_ref(profile: Profile, model: str | None) -> models.ModelRef:
    """The model as servelab launches it, without requiring it here: a local model's folder need not exist."""
    spec = model or profile.model
    if spec.startswith("local:"):
        name = spec.removeprefix("local:")
        return models.ModelRef(source=str(models.local_dir(name)), served_name=name, local=True)
    return models.ModelRef(source=spec, served_name=spec, local=False)


def hub_models(target: models.ModelRef, options: dict[str, Any]) -> list[str]:
    """The hub models one server reads: its target and any draft its speculative options name."""
    spec = options.get("speculative_config") or {}
    drafts = [spec.get("model"), options.get("speculative_draft_model_path")]
    return [m for m in [None if target.local else target.source, *drafts] if m and flags._HUB_ID.match(m)]


# Chapters that start no engine server: they read what the other chapters saved (chapter 08's selection guide).
READS_ONLY = ("08_selection_guide",)


def starts_engines(source: Path) -> bool:
    """Whether the chapter at `source` starts engine servers (declared in servelab.measure.chapter_servers)."""
    return Path(source).stem not in READS_ONLY


def plan_launches(profile: Profile, sources: Iterable[Any] | None = None,
                  overrides: dict[str, Any] | None = None) -> list[PlannedLaunch]:
    """Every declared launch of the chapters at `sources` (default: all) with their notebooks' parameters, and
    `overrides` over them (what papermill was given)."""
    out = []
    for source in sources or chapters.sources():
        if not starts_engines(source):
            continue
        chapter = source.stem[:2]
        given = {k: v for k, v in {**parameters(source), **(overrides or {})}.items() if k != "profile"}
        out += [planned(profile, source.stem, item) for item in chapter_servers.of(chapter, profile, **given).values()]
    return out


def engine_flags(options: dict[str, Any]) -> dict[str, Any]:
    """A launch's options that become engine flags (not the Server's own, such as env)."""
    return {k: v for k, v in options.items() if k not in NOT_FLAGS}


def planned(profile: Profile, chapter: str, item: Launch) -> PlannedLaunch:
    """One declared launch on `profile`: the command servelab would run (port 8000) and the hub models it reads."""
    ref = model_ref(profile, item.model)
    flags_only = engine_flags(item.options)
    argv = launch.command(item.engine, profile, ref, 8000, flags_only).argv
    return PlannedLaunch(chapter, item, argv, hub_models(ref, flags_only), item.model or profile.model)


def _start_seconds(profile: Profile, planned: PlannedLaunch) -> float:
    if profile.is_cpu:
        return CPU_START_S
    weights = sum(gpu_checks.model_bytes(m) for m in planned.models) / GIB
    return weights / LOAD_GIB_PER_S + START_OVERHEAD_S[planned.launch.engine]


def problems(profile: Profile, launches: list[PlannedLaunch]) -> tuple[list[str], list[str]]:
    """(problems, notes) of every launch: the engines' parsers, pair rules, memory fit, gated models, artifacts."""
    found, notes = [], []

    def where(p: PlannedLaunch) -> str:
        return f"{profile.name} {p.chapter} '{p.launch.name}'"

    if not profile.is_cpu:
        found += [f"{where(p)}: needs the local model {p.target}, which only the cpu profile converts"
                  for p in launches if p.needs_cpu_model]
        for engine in launch.ENGINES:
            if profile.engine_env(engine).endswith("-cpu"):
                found.append(f"{profile.name}: its {engine} venv {profile.engine_env(engine)} is a cpu build")
    # On the profile's own machine its own venvs parse; elsewhere (CI, a laptop) the same release's build that can
    # run there: a CUDA build's vLLM cannot even parse where no GPU is found ("Failed to infer device type").
    own = {e: profile.engine_env(e) for e in launch.ENGINES} if profile.is_cpu or hardware.gpus() else None
    unique = list(dict.fromkeys((p.launch.engine, tuple(p.argv)) for p in launches))  # chapters share servers
    checked = dict(zip(unique, flags.check_commands([(e, list(a)) for e, a in unique], env_names=own), strict=True))
    verdicts = [checked[(p.launch.engine, tuple(p.argv))] for p in launches]
    for p, verdict in zip(launches, verdicts, strict=True):
        if not verdict.ok:
            found.append(f"{where(p)}: {verdict.checked_with} refuses it at {verdict.stage}: {verdict.error}")
        found += [f"{where(p)}: {line}" for line in
                  draft_rules.pair_problems(p.launch.engine, p.target, p.flags)
                  + draft_rules.context_problems(p.launch.engine, p.flags, profile.max_model_len,
                                                 p.launch.options.get("env", {}))]
    if not profile.is_cpu:
        gpus = memory_fit.gpu_classes(profile.name)
        sized = [p for p in launches if not p.needs_cpu_model]  # a problem above already
        keys = list(dict.fromkeys((p.launch.engine, tuple(p.argv), gpu) for p in sized for gpu in gpus))
        fitted = dict(zip(keys, memory_fit.fit_many([(e, list(a), g) for e, a, g in keys]), strict=True))
        found += [f"{where(p)}: {fit.problem}" for p in sized for gpu in gpus
                  if not (fit := fitted[(p.launch.engine, tuple(p.argv), gpu)]).fits]
    for model in hub.needs_token(dict.fromkeys(m for p in launches for m in p.models)):
        users = sorted({p.chapter for p in launches if model in p.models})
        notes.append(f"{model} is gated on the Hugging Face hub ({', '.join(users)}): accept its licence on the "
                     "model page and set HF_TOKEN, or those runs are skipped with the reason printed")
    return found, notes


def recorded_minutes(source: Any, profile: Profile) -> float | None:
    """The wall time of this chapter's last recorded run on this profile (its executed notebook's metadata)."""
    from servelab.book import execution_key

    meta = execution_key.recorded(source.with_suffix(".ipynb")) or {}
    if meta.get("profile") == profile.name and meta.get("seconds"):
        return float(meta["seconds"]) / 60
    return None


def build(profile_name: str, *, check: bool = True) -> Plan:
    """The plan of every chapter on a profile; with `check`, every launch checked (engine venvs needed)."""
    profile = profiles.load(profile_name)
    sources = chapters.sources()
    launches = plan_launches(profile, sources)
    plans = []
    for source in sources:
        mine = [p for p in launches if p.chapter == source.stem]
        recorded = recorded_minutes(source, profile)
        estimate = sum(_start_seconds(profile, p) * p.launch.starts for p in mine) / 60
        plans.append(ChapterPlan(source.stem, mine, recorded if recorded is not None else estimate,
                                 recorded is not None))
    found, notes = problems(profile, launches) if check else ([], [])
    return Plan(profile, plans, found, notes)


def disk_bytes(plan: Plan) -> int:
    """Disk the profile needs: its engine venvs (measured where built, else their recorded size) and every hub
    model's download, with a tenth more for the caches engines write (compiled kernels, CUDA graphs)."""
    envs = {plan.profile.engine_env(e) for e in launch.ENGINES}
    total = sum(gpu_checks.env_bytes(e) for e in envs) + sum(gpu_checks.model_bytes(m) for m in plan.models)
    return int(total * 1.1)


def table_rows(plan: Plan) -> list[dict[str, Any]]:
    """One row per chapter, and a total."""
    rows = []
    for c in plan.chapters:
        gib = sum(gpu_checks.model_bytes(m) for m in c.models) / GIB
        rows.append({"chapter": c.chapter, "engine starts": c.starts, "hub models": len(c.models),
                     "downloads (GiB)": round(gib, 1),
                     "minutes": f"{c.minutes:.0f}" + ("" if c.recorded else " (est., starts only)")})
    total_gib = sum(gpu_checks.model_bytes(m) for m in plan.models) / GIB
    minutes = sum(c.minutes for c in plan.chapters)
    rows.append({"chapter": "all (each model downloaded once)", "engine starts": sum(c.starts for c in plan.chapters),
                 "hub models": len(plan.models), "downloads (GiB)": round(total_gib, 1),
                 "minutes": f"{minutes:.0f} ({minutes / 60:.1f} GPU-hours)" if not plan.profile.is_cpu
                 else f"{minutes:.0f}"})
    return rows


def markdown(plan: Plan) -> str:
    """The plan as Markdown: the chapter table, the models, the problems and what the user must do."""
    rows = table_rows(plan)
    head = list(rows[0])
    lines = [f"Profile `{plan.profile.name}`: {plan.profile.summary}", "",
             f"Disk: {disk_bytes(plan) / GIB:.0f} GiB (engine venvs, hub models and a tenth more for engine caches). "
             "Minutes marked est. count engine starts only (loading weights, CUDA graphs); a chapter's own "
             "work comes on top, and a recorded run of this profile replaces the estimate.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    if plan.models:
        lines += ["", "Hub models, downloaded by setup before any engine starts:", ""]
        lines += [f"- `{m}`: {gpu_checks.model_bytes(m) / GIB:.1f} GiB" for m in plan.models]
    if not plan.profile.is_cpu:
        gpus = ", ".join(g.name for g in memory_fit.gpu_classes(plan.profile.name))
        lines += ["", f"Memory checked on: {gpus} (servelab/data/gpu_classes.toml)."]
    lines += ["", "Problems: " + ("none" if not plan.problems else "")]
    lines += [f"- {p}" for p in plan.problems]
    if plan.notes:
        lines += ["", "Before you start:", ""] + [f"- {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"
