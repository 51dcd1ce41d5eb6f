"""Shared fixtures and the markers' check.

Markers (declared in pyproject.toml; --strict-markers rejects any other):
  engine_venv  needs an engine venv under $SERVELAB_HOME/envs or the cpu profile's converted model,
               starts no server
  server       starts a real engine server (and so needs the venv and the model too)
  book         builds the HTML book
Every other test is fast and needs none of these: `./test.sh --fast` runs them alone.

That the markers tell the truth is tested, not trusted: with SERVELAB_FAST=1 the whole session
runs with SERVELAB_HOME pointed at an empty temporary folder, so an unmarked test that needs an
engine venv or the model fails (`./test.sh --fast` sets it). And a test that asks for the
`require_engine` fixture must carry `engine_venv` or `server`, or collection stops.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable

import pytest

from servelab.machine import engine_envs, models, profiles

ENGINE_MARKERS = ("engine_venv", "server")
_fast_home: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _fast_home
    if os.environ.get("SERVELAB_FAST") == "1":
        _fast_home = tempfile.mkdtemp(prefix="servelab-fast-home-")
        os.environ["SERVELAB_HOME"] = _fast_home
    # Every engine start of the session (tests and the notebooks' kernels, which inherit it) is noted here.
    os.environ.setdefault("SERVELAB_START_LOG", tempfile.mkstemp(prefix="servelab-starts-", suffix=".jsonl")[1])


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    path = os.environ.get("SERVELAB_START_LOG", "")
    noted = [json.loads(line) for line in open(path)] if os.path.isfile(path) else []
    envs = str(engine_envs.get(profiles.load("cpu").vllm_env).path.parent)
    starts = [s for s in noted if s["argv"][0].startswith(envs)]  # not the lifecycle tests' stand-in engine
    by_engine = Counter(s["engine"] for s in starts)
    by_file = Counter(s["by"].split("::")[0] for s in starts)
    terminalreporter.write_line(
        f"engine starts: {len(starts)} real, {len(noted) - len(starts)} stand-in; real ({', '.join(f'{e} {n}' for e, n in sorted(by_engine.items())) or 'none'})"
        + "".join(f"\n  {n:3d}  {who}" for who, n in by_file.most_common()))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _fast_home:
        shutil.rmtree(_fast_home, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items if "require_engine" in getattr(item, "fixturenames", ())
                and not any(item.get_closest_marker(m) for m in ENGINE_MARKERS)]
    if unmarked:
        raise pytest.UsageError(
            f"tests that use require_engine must be marked {' or '.join(ENGINE_MARKERS)}: {', '.join(unmarked)}")


@pytest.fixture(scope="session")
def cpu() -> profiles.Profile:
    return profiles.load("cpu")


@pytest.fixture(scope="session")
def require_engine(cpu: profiles.Profile) -> Callable[[str], None]:
    """`require_engine("vllm")`: the cpu profile's venv for that engine and its model must be set up.

    It fails (raises), never skips, when they are missing: CI must never pass by testing nothing.
    """

    def require(engine: str) -> None:
        engine_envs.get(cpu.engine_env(engine)).require()
        models.resolve(cpu.model)

    return require


def pinned_version(env_name: str, dist: str | None = None) -> str:
    """The version the engine env's pins file fixes for `dist` (default: the env's engine itself)."""
    env = engine_envs.get(env_name)
    wanted = {_canonical(d) for d in ([dist] if dist else engine_envs.ENGINE_DISTS[env.engine])}
    for line in env.requirements.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", line)
        if m and _canonical(m.group(1)) in wanted:
            return m.group(2)
    raise LookupError(f"{env.requirements} pins none of {sorted(wanted)}")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
