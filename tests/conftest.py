"""Shared fixtures and the markers' check.

Markers (declared in pyproject.toml; --strict-markers rejects any other):
  engine_venv  needs an engine venv under $SERVELAB_HOME/envs or the cpu profile's converted model,
               starts no server
  server       starts a real engine server (and so needs the venv and the model too)
  book         builds the HTML book
Every other test is fast and needs none of these: `./test.sh --fast` runs them alone.

Scripts run inside engine venvs (`engine_envs.run_script`) go through fork servers that import the engine once
(servelab.machine.warm_scripts; tests/test_warm_scripts.py shows they answer as a fresh interpreter does).
SERVELAB_COLD_SCRIPTS=1 runs each in a fresh interpreter, as the chapters do.

That the markers tell the truth is tested, not trusted: with SERVELAB_FAST=1 the whole session
runs with SERVELAB_HOME pointed at an empty temporary folder, so an unmarked test that needs an
engine venv or the model fails (`./test.sh --fast` sets it). And a test that asks for the
`require_engine` fixture must carry `engine_venv` or `server`, or collection stops.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servelab.machine import engine_envs, locks, models, profiles, warm_scripts

ENGINE_MARKERS = ("engine_venv", "server")
_fast_home: str | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reexecuted-in-lanes", default="", metavar="CHAPTERS",
                     help="comma-separated chapters ./test.sh re-executes under nbval in jobs of their own, beside "
                          "this session or after it; their exit status is the run's (tests/test_notebooks.py takes "
                          "them as re-executed)")


def pytest_configure(config: pytest.Config) -> None:
    global _fast_home
    if os.environ.get("SERVELAB_COLD_SCRIPTS") != "1":
        warm_scripts.install()
    if os.environ.get("SERVELAB_FAST") == "1":
        _fast_home = tempfile.mkdtemp(prefix="servelab-fast-home-")
        os.environ["SERVELAB_HOME"] = _fast_home
    # Every engine start of the session (tests and the notebooks' kernels, which inherit it) is noted here.
    if "SERVELAB_START_LOG" not in os.environ:
        fd, os.environ["SERVELAB_START_LOG"] = tempfile.mkstemp(prefix="servelab-starts-", suffix=".jsonl")
        os.close(fd)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    from servelab.book.start_log import start_summary

    path = os.environ.get("SERVELAB_START_LOG", "")
    terminalreporter.write_line(start_summary([Path(path)] if os.path.isfile(path) else []))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _fast_home:
        shutil.rmtree(_fast_home, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items if "require_engine" in getattr(item, "fixturenames", ())
                and not any(item.get_closest_marker(m) for m in ENGINE_MARKERS)]
    if unmarked:
        raise pytest.UsageError(
            f"tests that use require_engine must be marked {' or '.join(ENGINE_MARKERS)}: {', '.join(unmarked)}")
    # The `books` fixture (tests/test_book.py) builds the whole book, over a minute: only `book` sessions may pay it.
    building = [item.nodeid for item in items if "books" in getattr(item, "fixturenames", ())
                and not item.get_closest_marker("book")]
    if building:
        raise pytest.UsageError(f"tests that build the book (fixture books or html) must be marked book: "
                                f"{', '.join(building)}")


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


PARTIAL_BUDGET = 5000  # KV tokens: 39.06 of vLLM's 128-token CPU blocks, so the rounding to whole blocks shows


# The token-id requests the shared servers also answer, after the questions, with their KV cache events recorded:
# the first three of servelab.measure.kv_events' workload (a document, its blocks and a question, its blocks again).
LIVE_EVENT_REQUESTS = 3


def hit_chats() -> dict:
    """The chats whose prefix-cache hits tests/test_measure_prefix_caching.py predicts, which the shared servers
    answer last: three turns of one conversation, and one short request sent twice."""
    from servelab.measure.prefix_cache.scenarios import repeat_requests
    from servelab.measure.prefix_cache.workloads import make

    return {"multi_turn": make("multi_turn", 0, conversations=1, turns=3, user_words=40, assistant_words=30),
            "short_repeat": repeat_requests(0, words=30, times=2)}


@pytest.fixture(scope="session")
def live(cpu: profiles.Profile, require_engine: Callable[[str], None],
         tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The session's shared servers: each engine started once with a KV budget of PARTIAL_BUDGET tokens, asked
    the fixed questions, then stopped; what the tests read of them. SGLang serves with a recorder round its
    sgl_kernel stand-in (tests/sgl_recorder.py), which changes no computation. Both publish their KV cache events
    to a subscriber started before them (servelab.measure.kv_events.Recorder; the engine's socket connects to it,
    so the engine listens on no more ports), and after the questions answer LIVE_EVENT_REQUESTS token-id requests
    whose events are kept (`kv_events`, a Trace's dict). Both report cached tokens and serve a cache flush
    (servelab.measure.prefix_cache.live.cache_options), and last answer `hit_chats` as token ids (vLLM's chat
    template: `hit_tokens`), each with the hit their cache's model predicts (`hits`, measured_hits' two tables). A test
    that needs other options, or must kill its server, starts its own."""
    from servelab.engines import server
    from servelab.engines.guard import still_running
    from servelab.engines.listening import listening
    from servelab.measure.kv_events import Recorder, record_workload, workload
    from servelab.measure.kv_memory.capacity import engine_capacity
    from servelab.measure.prefix_cache.live import cache_options, chat_token_ids, measured_hits
    from servelab.measure.setup.check import greedy_answers
    from servelab.measure.workloads import QUESTIONS
    from tests import sgl_recorder

    record_env, record = sgl_recorder.server_env(tmp_path_factory.mktemp("sgl-record"))
    events_dir = tmp_path_factory.mktemp("kv-events")
    out: dict = {}
    for engine in ("vllm", "sglang"):  # vLLM first: its /tokenize makes the token ids both answer
        require_engine(engine)
        options = cache_options(engine)
        env = {**options.pop("env", {}), **(record_env if engine == "sglang" else {})}
        with Recorder(engine, cpu, out=events_dir / f"{engine}.jsonl") as events, \
                server.running(engine, cpu, kv_cache_tokens=PARTIAL_BUDGET, env=env, **options,
                               **events.options()) as srv:
            pids = srv.pids()
            out[engine] = {"answers": greedy_answers(srv, list(QUESTIONS)), "pids": pids, "version": srv.version(),
                           "capacity": engine_capacity(srv), "port": srv.port,
                           "listening": listening(srv.pids())}
            requests = workload(2, 2).head(LIVE_EVENT_REQUESTS)
            out[engine]["kv_events"] = record_workload(srv, events, requests, flush_first=False).to_dict()
            if engine == "vllm":
                out["hit_tokens"] = {n: [chat_token_ids(srv, r.messages) for r in reqs]
                                     for n, reqs in hit_chats().items()}
            out[engine]["hits"] = measured_hits(srv, out["hit_tokens"])
        out[engine]["alive_after"] = still_running(pids)
    out["sglang"]["stand_in_record"] = sgl_recorder.read_record(record)
    return out


def pinned_version(env_name: str, dist: str | None = None) -> str:
    """The version the engine env's pins file fixes for `dist` (default: the env's engine itself)."""
    env = engine_envs.get(env_name)
    pinned = locks.pins(env.requirements)
    for name in [dist] if dist else engine_envs.ENGINE_DISTS[env.engine]:
        if locks.canonical(name) in pinned:
            return pinned[locks.canonical(name)]
    raise LookupError(f"{env.requirements} pins none of {[dist] if dist else engine_envs.ENGINE_DISTS[env.engine]}")


GPU_SMI = """#!/bin/sh
case "$*" in
  *driver_version*) echo "{driver}" ;;
  *) echo "{name}, {mib}" ;;
esac
"""


@pytest.fixture
def gpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """`gpu_machine(gpu="NVIDIA L4", mib=23034)`: this machine as a GPU profile's would be after its setup.

    Only the absent hardware is faked, at the lowest layer: an `nvidia-smi` on PATH that answers as the GPU
    would. SERVELAB_HOME is empty but for the GPU profiles' engine venvs, which are the cpu venvs of the same
    engine release under the GPU envs' names (same parsers and defaults; marked built for the GPU envs' locks);
    no local model is converted; the hub cache holds config-only snapshots of the hub models the profiles name.
    """
    from servelab.engines import flags
    from servelab.machine import hardware

    real_envs = {(env := engine_envs.get(n)).engine: env.require().path
                 for n in engine_envs.names() if n.endswith("-cpu")}

    def make(gpu: str = "NVIDIA L4", mib: int = 23034, driver: str = "580.65.06") -> Path:
        home, hub, bin_dir = tmp_path / "home", tmp_path / "hub", tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(GPU_SMI.format(name=gpu, mib=mib, driver=driver))
        smi.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        monkeypatch.setenv("SERVELAB_HOME", str(home))
        monkeypatch.setenv("HF_HUB_CACHE", str(hub))
        for name in (n for n in engine_envs.names() if n.endswith("-gpu")):
            env = engine_envs.get(name)
            env.path.mkdir(parents=True)
            for entry in real_envs[env.engine].iterdir():
                if entry.name != engine_envs.MARKER:
                    (env.path / entry.name).symlink_to(entry)
            (env.path / engine_envs.MARKER).write_text(json.dumps({"spec_hash": env.spec_hash(), "name": name}))
        from servelab.book import launch_plan

        wanted = {m for n in profiles.names() if n != "cpu"
                  for m in launch_plan.build(n, check=False).models}
        for model in sorted(wanted):  # what setup would have downloaded; config.json is what servelab reads
            repo = hub / f"models--{model.replace('/', '--')}"
            snap = repo / "snapshots" / "config-only"
            snap.mkdir(parents=True, exist_ok=True)
            (repo / "refs").mkdir(exist_ok=True)
            (repo / "refs" / "main").write_text("config-only")  # as a download leaves it (servelab.machine.hub)
            (snap / "config.json").write_text(json.dumps(flags.stand_in_config(model)))
        hardware.gpus.cache_clear()
        return home

    yield make
    hardware.gpus.cache_clear()
