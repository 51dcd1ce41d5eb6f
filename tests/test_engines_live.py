"""Both engines live on the cpu profile: greedy agreement with transformers, and clean teardown."""

from __future__ import annotations

import pytest

from servelab.engines import server
from servelab.engines.guard import still_running
from servelab.measure.setup_check import agreement, greedy_answers, reference_answers
from servelab.measure.workloads import QUESTIONS
from tests.conftest import pinned_version

pytestmark = pytest.mark.server  # every test here reads what the `live` servers answered


@pytest.fixture(scope="module")
def live(cpu, require_engine) -> dict[str, dict]:
    """Start each engine once, ask the fixed questions, stop it; keep what the tests need."""
    out = {}
    for engine in ("vllm", "sglang"):
        require_engine(engine)
        with server.running(engine, cpu) as srv:
            pids = srv.pids()
            out[engine] = {"answers": greedy_answers(srv, list(QUESTIONS)), "pids": pids, "version": srv.version()}
        out[engine]["alive_after"] = still_running(pids)
    return out


def test_greedy_outputs_of_both_engines_and_transformers_are_identical(live, cpu):
    questions = list(QUESTIONS)
    table = agreement(questions, {"vLLM": live["vllm"]["answers"], "SGLang": live["sglang"]["answers"],
                                  "transformers": reference_answers(cpu, questions)})
    assert table.identical.all(), table[~table.identical].to_dict("records")
    assert "Paris" in table.loc[0, "vLLM"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_context_manager_stops_the_whole_group(live, cpu, engine):
    assert len(live[engine]["pids"]) >= 3  # guard, server, engine core / scheduler (and more)
    assert live[engine]["alive_after"] == []
    version = live[engine]["version"]  # the vLLM CPU alias adds a local version part, "+cpu"
    assert version.split("+")[0] == pinned_version(cpu.engine_env(engine)), version
