"""A script run through a fork server answers as it does in a fresh interpreter (servelab.machine.warm_scripts)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from servelab.engines.engine_side import script
from servelab.machine import engine_envs, warm_scripts

COLD = warm_scripts._cold_run_script
PROBE = """
import json, os, sys
data = sys.stdin.read()
print("noise on stdout")
print("noise on stderr", file=sys.stderr)
code = int(os.environ.get("PROBE_EXIT", "0"))
if os.environ.get("PROBE_RAISE"):
    raise ValueError("the probe was told to raise")
if os.environ.get("PROBE_SLEEP"):
    import time
    time.sleep(float(os.environ["PROBE_SLEEP"]))
print(json.dumps({"argv": sys.argv[1:], "stdin": data, "cwd": os.getcwd(), "path0": sys.path[0],
                  "name": __name__, "var": os.environ.get("PROBE_VAR"), "main": sys.modules["__main__"].__file__}))
sys.exit(code)
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "probe.py"
    path.parent.mkdir()
    path.write_text(PROBE)
    return path


def _both(probe: Path, tmp_path: Path, **env: str):
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    answers = []
    for run in (COLD, warm_scripts.run_script, warm_scripts.run_script):  # a second call is the first one warm
        try:
            answers.append(run(Path(sys.executable), probe, "a", "b c", stdin="é\nline", env=environment,
                               cwd=tmp_path, timeout=20))
        except engine_envs.ScriptFailed as err:
            answers.append(f"ScriptFailed: {err}")
    return answers


def test_the_answer_is_a_fresh_interpreters(probe: Path, tmp_path: Path) -> None:
    cold, first, warm = _both(probe, tmp_path, PROBE_VAR="x")
    assert cold == first == warm
    assert warm["argv"] == ["a", "b c"] and warm["stdin"] == "é\nline" and warm["var"] == "x"
    assert warm["cwd"] == str(tmp_path) and warm["path0"] == str(probe.parent) and warm["name"] == "__main__"


@pytest.mark.parametrize("env", [{"PROBE_EXIT": "3"}, {"PROBE_RAISE": "1"}], ids=["exit code", "exception"])
def test_a_failure_is_the_same_message(probe: Path, tmp_path: Path, env: dict[str, str]) -> None:
    cold, first, warm = _both(probe, tmp_path, **env)
    assert cold == first == warm
    assert warm.startswith("ScriptFailed: probe.py failed with exit code")


def test_a_script_past_its_timeout_is_killed_and_named(probe: Path, tmp_path: Path) -> None:
    environment = {**os.environ, "PROBE_SLEEP": "30"}
    warm_scripts.run_script(Path(sys.executable), probe, env={**environment, "PROBE_SLEEP": "0"}, cwd=tmp_path)
    with pytest.raises(engine_envs.ScriptFailed, match=r"probe.py took longer than 1 s"):
        warm_scripts.run_script(Path(sys.executable), probe, env=environment, cwd=tmp_path, timeout=1)
    assert warm_scripts._server(Path(sys.executable), environment, str(tmp_path)).ready == []  # it was warm
    # and the server goes on answering
    assert warm_scripts.run_script(Path(sys.executable), probe, env={**environment, "PROBE_SLEEP": "0"},
                                   cwd=tmp_path)["argv"] == []


def test_only_the_most_recently_used_servers_are_kept(probe: Path, tmp_path: Path) -> None:
    for i in range(warm_scripts.KEEP + 2):
        env = {**os.environ, "PROBE_VAR": str(i)}
        assert [warm_scripts.run_script(Path(sys.executable), probe, env=env, cwd=tmp_path)["var"]
                for _ in range(2)] == [str(i)] * 2
    kept = list(warm_scripts._SERVERS.values())
    assert len(kept) == warm_scripts.KEEP and all(s.proc.poll() is None for s in kept)


def test_the_tests_run_scripts_warm() -> None:
    assert engine_envs.run_script is warm_scripts.run_script or os.environ.get("SERVELAB_COLD_SCRIPTS") == "1"


@pytest.mark.engine_venv
def test_an_engine_script_answers_the_same_warm_and_imports_its_engine_once(require_engine) -> None:
    require_engine("vllm")
    python = engine_envs.parser_env("vllm").python
    cold = COLD(python, script("vllm_cache_defaults.py"), timeout=300)
    warm = [warm_scripts.run_script(python, script("vllm_cache_defaults.py"), timeout=300) for _ in range(3)]
    assert warm == [cold, cold, cold]
    server = warm_scripts._server(python, {**os.environ, "HF_HUB_OFFLINE": "1"}, os.getcwd())
    assert server.ready == ["vllm.engine.arg_utils"], json.dumps(server.ready)
