"""Both engines live on the cpu profile: greedy agreement with transformers, the KV pool each built for a
budget of partial blocks, and clean teardown. The servers are the session's shared ones (`live` in conftest)."""

from __future__ import annotations

import pytest

from servelab.engines.listening import unexplained
from servelab.measure.setup.check import agreement, reference_answers
from servelab.measure.workloads import QUESTIONS
from servelab.sim.kv_memory import tokens_held
from tests.conftest import PARTIAL_BUDGET, pinned_version

pytestmark = pytest.mark.server  # every test here reads what the `live` servers answered


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


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_engine_builds_the_kv_pool_the_planner_predicts_for_the_same_budget(live, cpu, engine):
    """One budget in tokens for both engines: vLLM gets it as bytes and carves whole blocks from them with
    its own per-token size; SGLang gets it as --max-total-tokens and pages by one token."""
    built = live[engine]["capacity"]
    assert built["blocks"] * built["block_size"] == built["tokens"]
    assert built["tokens"] == tokens_held(PARTIAL_BUDGET, built["block_size"])
    if engine == "sglang":
        assert built["block_size"] == 1  # SGLang's --page-size resolves to 1 on this profile: token granularity


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_socket_beyond_loopback_is_named_with_its_reason(live, engine):
    """While it served: the HTTP port on 127.0.0.1, and nothing on another interface that
    servelab.engines.listening.BEYOND_LOOPBACK does not name."""
    sockets = live[engine]["listening"]
    assert [s for s in sockets if s.port == live[engine]["port"]] and all(
        s.address == "127.0.0.1" for s in sockets if s.port == live[engine]["port"]), sockets
    assert unexplained(engine, sockets) == [], sockets
