"""Check launch commands with the engines' own argument parsers, without starting an engine.

The kernel never imports an engine: each check runs servelab/engine_side/check_{vllm,sglang}_args.py
with the engine venv's python, one subprocess per engine for a whole list of commands (importing
vLLM takes ~5-8 s, SGLang ~5 s). What is checked:

- vLLM: the real `vllm serve` entry point (or the module's `__main__` for `python -m ...`):
  FlexibleArgumentParser + the serve parser, `validate_parsed_serve_args` and the serve command's
  own checks, then `AsyncEngineArgs.from_cli_args`, plus the keys of `--speculative-config`. No
  model config is built, so hub ids need no network.
- SGLang: the real `sglang serve` / `python -m sglang.launch_server` entry point up to
  `prepare_server_args`, then `ServerArgs.resolve_once()`, which reads the model's config.json.
  For a hub id that is not in the local Hugging Face cache, the check gives SGLang a config-only
  stand-in built from servelab/data/model_shapes.toml (offline; the result's warnings say so).

Each engine's commands are checked in a venv of the release every profile pins (`engine_envs.parser_env`):
the cpu profile's venvs in CI, the GPU profile's own on a rented GPU; the CPU and CUDA builds of one release
share their parsers. Parsing does not need a GPU, and SGLang's device detection is answered with
`--device cuda` (reported).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from servelab.engines import launch
from servelab.engines.engine_side import script
from servelab.machine import datafiles, engine_envs, model_shapes, models, profiles

SCRIPTS = {"vllm": "check_vllm_args.py", "sglang": "check_sglang_args.py"}

# `python -m MODULE` forms each engine accepts, and what they are checked as.
VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.launchers.api_server.entry")
SGLANG_MODULES = ("sglang.launch_server",)
VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"  # `python -m vllm.entrypoints.cli.main serve ...` is `vllm serve`
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Flags whose value SGLang resolves as a model (it reads that model's config.json).
SGLANG_MODEL_FLAGS = ("--model-path", "--model", "--speculative-draft-model-path", "--tokenizer-path")
# Stand-in configs: the family a hub id belongs to, and ids the hub renamed (it redirects the old ones).
_FAMILIES = (("meta-llama/", "llama", "LlamaForCausalLM"), ("Qwen/Qwen2.5-", "qwen2", "Qwen2ForCausalLM"))
_RENAMED = (("meta-llama/Meta-Llama-3.1-", "meta-llama/Llama-3.1-"),)


class FlagCheckFailed(RuntimeError):
    """The checker itself failed (not the command): its last lines of stderr say why."""


@dataclass
class FlagCheck:
    """One command's verdict from the engine's own parser."""

    ok: bool
    error: str = ""  # the engine's own error, one line ("" when ok)
    warnings: list[str] = field(default_factory=list)  # what the engine warned about while parsing
    argv: list[str] = field(default_factory=list)  # the command as checked (normalised)
    stage: str = ""  # where it failed: parse, validate, engine_args, speculative_config, resolve
    checked_with: str = ""  # the engine and version whose parser judged it, e.g. "vllm 0.32.0+cpu"


@dataclass(frozen=True)
class Command:
    """A launch command split into how it is started (`form`, `prefix`) and the engine's arguments."""

    engine: str
    form: str  # "serve" or "module" (vLLM), "serve" or "launch_server" (SGLang)
    prefix: tuple[str, ...]  # e.g. ("vllm", "serve") or ("python", "-m", "sglang.launch_server")
    args: tuple[str, ...]
    module: str = ""
    ignored: tuple[str, ...] = ()  # leading VAR=value assignments, not part of the check

    def request(self) -> dict:
        out = {"form": self.form, "args": list(self.args)}
        if self.module:
            out["module"] = self.module
        return out


def normalise(engine: str, argv: Sequence[str] | str) -> Command:
    """Accept a command as a user types it, or as servelab.engines builds it (absolute venv path)."""
    if engine not in SCRIPTS:
        raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(SCRIPTS)}")
    tokens = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv]
    ignored: list[str] = []
    while tokens and _ENV_ASSIGNMENT.match(tokens[0]):
        ignored.append(tokens.pop(0))
    if tokens and Path(tokens[0]).name == "env":
        tokens.pop(0)
        while tokens and _ENV_ASSIGNMENT.match(tokens[0]):
            ignored.append(tokens.pop(0))
    usage = (f"not a {engine} launch command: {shlex.join(tokens)!r}; expected "
             + ("`vllm serve ...` or `python -m vllm.entrypoints.openai.api_server ...`" if engine == "vllm"
                else "`sglang serve ...` or `python -m sglang.launch_server ...`"))
    if not tokens:
        raise ValueError(usage)
    prog = Path(tokens[0]).name
    if prog == engine and tokens[1:2] == ["serve"]:
        return Command(engine, "serve", (engine, "serve"), tuple(tokens[2:]), ignored=tuple(ignored))
    if _PYTHON.match(prog):
        i = 1
        while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
            i += 1  # interpreter options such as -u
        if tokens[i:i + 1] == ["-m"] and i + 1 < len(tokens):
            module, rest = tokens[i + 1], tokens[i + 2:]
            shown = ("python", "-m", module)
            if engine == "vllm" and module == VLLM_CLI_MODULE and rest[:1] == ["serve"]:
                return Command(engine, "serve", (engine, "serve"), tuple(rest[1:]), ignored=tuple(ignored))
            if engine == "vllm" and module in VLLM_MODULES:
                return Command(engine, "module", shown, tuple(rest), module=module, ignored=tuple(ignored))
            if engine == "sglang" and module in SGLANG_MODULES:
                return Command(engine, "launch_server", shown, tuple(rest), ignored=tuple(ignored))
    raise ValueError(usage)


def check(engine: str, argv: Sequence[str] | str, env_name: str | None = None, timeout: float = 300) -> FlagCheck:
    """Check one launch command with `engine`'s own parser (one subprocess; prefer check_many)."""
    return check_many(engine, [argv], env_name=env_name, timeout=timeout)[0]


def check_many(engine: str, commands: Iterable[Sequence[str] | str], env_name: str | None = None,
               timeout: float = 300) -> list[FlagCheck]:
    """Check several commands for one engine in a single subprocess, in order."""
    return check_commands([(engine, argv) for argv in commands], env_names={engine: env_name} if env_name else None,
                          timeout=timeout)


def check_commands(items: Iterable[tuple[str, Sequence[str] | str]], env_names: dict[str, str] | None = None,
                   timeout: float = 300) -> list[FlagCheck]:
    """Check (engine, argv) pairs: one subprocess per engine, the engines in parallel; results in order."""
    items = list(items)
    parsed = [normalise(engine, argv) for engine, argv in items]
    by_engine: dict[str, list[int]] = {}
    for i, cmd in enumerate(parsed):
        by_engine.setdefault(cmd.engine, []).append(i)
    # fail before starting any
    pythons = {engine: engine_envs.parser_env(engine, (env_names or {}).get(engine)).python for engine in by_engine}
    results: list[FlagCheck | None] = [None] * len(parsed)
    with tempfile.TemporaryDirectory(prefix="servelab-flagcheck-") as tmp:
        jobs = []
        for engine, idx in by_engine.items():
            cmds = [parsed[i] for i in idx]
            env, notes = _engine_environment(engine, cmds, Path(tmp))
            jobs.append((engine, idx, cmds, notes, env))
        with ThreadPoolExecutor(max_workers=len(jobs) or 1) as pool:
            answers = list(pool.map(lambda job: _run_checker(job[0], pythons[job[0]], job[2], job[4], tmp, timeout),
                                    jobs))
        for (_, idx, cmds, notes, _), answer in zip(jobs, answers, strict=True):
            for i, cmd, note, res in zip(idx, cmds, notes, answer["results"], strict=True):
                ignored = [f"ignored environment assignment {a} (checked without it)" for a in cmd.ignored]
                results[i] = FlagCheck(ok=res["ok"], error=res["error"], warnings=ignored + note + res["warnings"],
                                       argv=[*cmd.prefix, *res["args"]], stage=res["stage"],
                                       checked_with=f"{answer['engine']} {answer['version']}")
    return [r for r in results if r is not None]


def _run_checker(engine: str, python: Path, cmds: list[Command], env: dict[str, str], cwd: str,
                 timeout: float) -> dict:
    """Run one engine's checker script on `cmds`; its JSON answer."""
    request = json.dumps({"commands": [c.request() for c in cmds]})
    try:
        return engine_envs.run_script(python, script(SCRIPTS[engine]), stdin=request, env=env, cwd=cwd,
                                      timeout=timeout)
    except engine_envs.ScriptFailed as err:
        raise FlagCheckFailed(str(err)) from None


def _engine_environment(engine: str, cmds: list[Command], tmp: Path) -> tuple[dict[str, str], list[list[str]]]:
    """The checker's environment and per-command notes about it.

    vLLM's checks never read a model, but with HF_HUB_OFFLINE set EngineArgs.__post_init__ swaps a
    hub id for its local snapshot and fails when there is none, so vLLM runs without it. SGLang's
    resolution reads config.json: it runs offline against a hub cache made for the check.
    """
    drop = ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    notes: list[list[str]] = [[] for _ in cmds]
    if engine == "sglang":
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        hub = tmp / "hub"
        hub.mkdir()
        env["HF_HUB_CACHE"] = str(hub)
        for note, cmd in zip(notes, cmds, strict=True):
            for model_id in sglang_hub_ids(cmd):
                note += _provide(model_id, hub)
    return env, notes


def sglang_hub_ids(cmd: Command) -> list[str]:
    """Hub ids among the values SGLang resolves as models (not local paths)."""
    args = list(cmd.args)
    values = [args[0]] if cmd.form == "serve" and args and not args[0].startswith("-") else []
    for i, arg in enumerate(args):
        if arg in SGLANG_MODEL_FLAGS and i + 1 < len(args):
            values.append(args[i + 1])
        elif "=" in arg and arg.split("=", 1)[0] in SGLANG_MODEL_FLAGS:
            values.append(arg.split("=", 1)[1])
    return list(dict.fromkeys(v for v in values if _HUB_ID.match(v) and not Path(v).exists()))


def _provide(model_id: str, hub: Path) -> list[str]:
    """Make `model_id` resolvable offline in the checker's hub cache; return what to tell the reader."""
    folder = f"models--{model_id.replace('/', '--')}"
    target = hub / folder
    if target.exists():
        return [] if target.is_symlink() else [_stand_in_note(model_id)]
    real = models.hub_cache() / folder
    if (real / "snapshots").is_dir():
        target.symlink_to(real)
        return []
    config = stand_in_config(model_id)
    if config is None:
        return [f"{model_id}: no config.json here (not in the Hugging Face cache, not in "
                f"servelab/data/model_shapes.toml) and no hub access, so SGLang cannot resolve it"]
    (target / "refs").mkdir(parents=True)
    (target / "refs" / "main").write_text("servelab-stand-in")
    (target / "snapshots" / "servelab-stand-in").mkdir(parents=True)
    (target / "snapshots" / "servelab-stand-in" / "config.json").write_text(json.dumps(config, indent=1))
    return [_stand_in_note(model_id)]


def _stand_in_note(model_id: str) -> str:
    return (f"{model_id}: resolved against a config-only stand-in (shape from servelab/data/model_shapes.toml; "
            "not in the Hugging Face cache and no hub access here)")


def stand_in_config(model_id: str) -> dict | None:
    """A config.json with the model's family and shape, or None when the shape is not known."""
    shapes = model_shapes.known_shapes()
    name = model_id
    for old, new in _RENAMED:
        if name.startswith(old):
            name = new + name.removeprefix(old)
    raw = datafiles.load("model_shapes.toml").get(name, {})
    family = next(((mt, arch) for prefix, mt, arch in _FAMILIES if name.startswith(prefix)), None)
    if raw.get("architectures"):  # an EAGLE-3 head: a Llama layer with its own architecture name
        family = ("llama", raw["architectures"][0])
    if name not in shapes or family is None:
        return None
    shape = {k: v for k, v in dataclasses.asdict(shapes[name]).items()
             if k not in ("name", "params_b", "gated", "tokenizer", "draft_vocab_size", "architectures") and v}
    extra = {"draft_vocab_size": raw["draft_vocab_size"]} if "draft_vocab_size" in raw else {}
    return {"architectures": [family[1]], "model_type": family[0], "torch_dtype": "bfloat16", **shape, **extra}


def profile_commands(port: int = 8000) -> dict[tuple[str, str, str], list[str]]:
    """The launch commands servelab runs, keyed (profile, engine, "plain" | "speculative"), for every profile
    whose model needs nothing this machine lacks: GPU profiles name hub models (not resolved: no network needed
    to build or check them); the cpu profile's local model counts only where setup converted it. A GPU machine
    never converts it, so there the cpu profile's commands are left out (`unchecked_profiles` names them)."""
    out = {}
    for name in profiles.names():
        prof = profiles.load(name)
        model = _profile_model(prof)
        if model is None:
            continue
        for engine in launch.ENGINES:
            out[(name, engine, "plain")] = launch.command(engine, prof, model, port, {}).argv
            if spec := prof.speculative.get(engine):
                options = {"speculative_config": spec} if engine == "vllm" else dict(spec)
                out[(name, engine, "speculative")] = launch.command(engine, prof, model, port, options).argv
    return out


def unchecked_profiles() -> dict[str, str]:
    """Profiles `profile_commands` leaves out here, each with why."""
    return {name: f"its model {prof.model} is not converted on this machine (python -m servelab setup "
                  f"--profile {name} converts it)"
            for name in profiles.names() if _profile_model(prof := profiles.load(name)) is None}


def _profile_model(prof: profiles.Profile) -> models.ModelRef | None:
    if not prof.model.startswith("local:"):
        return models.ModelRef(source=prof.model, served_name=prof.model, local=False)
    try:
        return models.resolve(prof.model)
    except models.ModelMissing:
        return None


def article_commands() -> list[dict]:
    """The launch commands of the source articles and their corrected forms (data/article_commands.toml)."""
    return datafiles.load("article_commands.toml")["command"]
