"""Chapter 06's live measurements and set-ups.

Fast: the replay of greedy verification (against the theory and against the from-scratch sampler),
the speedup the counters predict, draft costs, reading engine metrics, the tasks and run lists.
`engine_venv`: SGLang's resolved defaults and CPU ops, every GPU launch command through both
engines' parsers, the layer-agreement script on the cpu model. `server`: one n-gram vLLM server for
the engine-timed measurements.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines import flags
from servelab.engines.metrics import Metrics
from servelab.machine import profiles
from servelab.measure.speculative import gpu, live, setups
from servelab.measure.speculative.verification import SpecDecodeCounts, llama_parameters
from servelab.sim.speculative import expected_tokens, softmax, speculative_step, speedup

# ---------------------------------------------------------------------------------------------- replay


def test_replay_of_hand_made_answers():
    assert live.greedy_verifications("1", 4) == []  # one token: it came with the prompt
    assert live.greedy_verifications("1" * 11, 4) == [4, 4]  # 1 + 5 + 5 tokens
    assert live.greedy_verifications("0" * 4, 2) == [0, 0, 0]  # each verification keeps only the target's token
    assert live.greedy_verifications("10110111", 3) == [0, 2, 3]  # positions 1 | 2,3 (4 rejected) | 5,6,7
    assert live.greedy_verifications("1" * 11, 3) == [3, 3]  # the third runs into the end: left out
    assert live.greedy_verifications("1101", 3) == [1]  # a rejection completes a verification, the end does not
    counts = live.replay_counts(["10110111", "1" * 11], 3)
    assert (counts.drafts, counts.draft_tokens, counts.accepted) == (5, 15, 11)
    assert counts.accepted_per_pos == [4, 4, 3]  # survival: drafts with at least 1, 2, 3 accepted
    with pytest.raises(ValueError, match="string of 0 and 1"):
        live.greedy_verifications("10x", 2)
    with pytest.raises(ValueError, match="no verification"):
        live.replay_counts(["1", "0"], 2)


@given(st.floats(0.05, 0.95), st.integers(1, 6))
@settings(max_examples=25, deadline=None)
def test_replay_of_iid_matches_gives_the_theorys_tokens_per_verification(alpha, k):
    rng = np.random.default_rng(int(alpha * 1000) + k)
    matches = "".join("1" if m else "0" for m in rng.random(60_000) < alpha)
    counts = live.replay_counts([matches], k)
    lengths = np.array(live.greedy_verifications(matches, k)) + 1
    se = lengths.std() / math.sqrt(lengths.size)
    assert abs(counts.mean_acceptance_length - expected_tokens(alpha, k)) < 5 * se + 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_replay_equals_greedy_speculative_decoding_from_scratch(seed):
    """One-hot target and draft: run the from-scratch sampler verification by verification, and replay
    the same answer from which tokens the draft would have proposed."""
    rng = np.random.default_rng(seed)
    vocab, k, length = 7, 3, 80
    target = softmax(rng.normal(size=(vocab, vocab)), 0.0)
    draft = softmax(target + 0.9 * rng.normal(size=(vocab, vocab)), 0.0)  # agrees on some rows only
    answer = [int(rng.integers(vocab))]  # token 0 comes "with the prompt"
    accepted = []
    while len(answer) < length:
        step = speculative_step(target, draft, np.array([answer[-1]]), k, rng)
        accepted.append(int(step.accepted[0]))
        answer += step.tokens[0, :step.emitted[0]].tolist()
    answer = answer[:length]
    matches = "".join("1" if j and np.argmax(draft[answer[j - 1]]) == answer[j] else "0" for j in range(length))
    replayed = live.greedy_verifications(matches, k)
    assert replayed[:-1] == accepted[:len(replayed) - 1]  # the last may be cut by the answer's end
    assert all(np.argmax(target[a]) == b for a, b in zip(answer, answer[1:], strict=False))


def test_counts_agree_within_one_verification_per_answer():
    engine = SpecDecodeCounts(10.0, 40.0, 12.0, [6.0, 3.0, 2.0, 1.0])
    assert live.counts_agree(engine, SpecDecodeCounts(9.0, 36.0, 11.0, [5.0, 3.0, 2.0, 1.0]), answers=1)
    assert not live.counts_agree(engine, SpecDecodeCounts(8.0, 32.0, 12.0, [6.0, 3.0, 2.0, 1.0]), answers=1)
    assert live.counts_agree(engine, SpecDecodeCounts(8.0, 32.0, 12.0, [6.0, 3.0, 2.0, 1.0]), answers=2)
    assert not live.counts_agree(engine, SpecDecodeCounts(10.0, 30.0, 9.0, [6.0, 3.0, 0.0]), answers=4)  # other k


def test_depth_sweep_table():
    sweep = live.DepthSweep(3, [True], {1: ["1000"], 2: ["1100"], 3: ["11111"]})
    table = sweep.table(k=2).set_index("draft layers")
    assert table.loc[3, "acceptance rate"] == 1 and table.loc[3, "tokens per verification"] == 3
    assert table.loc[1, "acceptance rate"] == 0 and table.loc[1, "agreement"] == 0.25
    assert table.loc[3, "alpha (i.i.d. fit)"] == 1 and table.loc[1, "alpha (i.i.d. fit)"] == 0
    assert table.loc[2, "tokens per verification"] == 1.5  # verifications accept 1, then 0


# ---------------------------------------------------------------------------------------------- prediction


@given(st.floats(0.0, 1.0), st.integers(1, 8), st.floats(0.0, 1.0), st.floats(0.5, 3.0))
@settings(max_examples=50, deadline=None)
def test_a_draft_every_step_gives_the_papers_formula(alpha, k, c, v):
    drafts = 1000.0
    accepted = drafts * (expected_tokens(alpha, k) - 1)
    predicted = live.predicted_speedup(1 + drafts + accepted, drafts, accepted, k, c, v)
    assert predicted == pytest.approx(speedup(alpha, k, c, v))


def test_steps_without_a_draft_cost_one_step_each():
    assert live.predicted_speedup(101, 0, 0, 4, 0.0, 1.3) == 1.0
    # 50 verifications, 1.3 steps each, 150 tokens from them; the other 50 tokens took a step each
    assert live.predicted_speedup(201, 50, 100, 4, 0.0, 1.3) == pytest.approx(200 / (50 * 1.3 + 50))
    # the last verification counted tokens past the stop token: 8 verifications, all 4 accepted, 40 tokens
    assert live.predicted_speedup(40, 8, 32, 4, 1.0, 1.0) == pytest.approx(39 / (8 * 5))
    with pytest.raises(ValueError, match="inconsistent counts"):
        live.predicted_speedup(11, 5, 15, 4, 0.0, 1.0)


@given(st.floats(0.0, 1.0), st.integers(1, 8), st.floats(0.0, 1.0), st.floats(0.5, 3.0), st.floats(0.0, 0.5))
@settings(max_examples=50, deadline=None)
def test_the_fitted_cost_inverts_the_prediction(alpha, k, c, v, undrafted_share):
    drafts = 500.0
    accepted = drafts * (expected_tokens(alpha, k) - 1)
    tokens = 1 + (drafts + accepted) / (1 - undrafted_share)
    measured = live.predicted_speedup(tokens, drafts, accepted, k, c, v)
    assert live.fitted_cost(tokens, drafts, accepted, k, v, measured) == pytest.approx(c, abs=1e-9)
    assert math.isnan(live.fitted_cost(tokens, 0, 0, k, v, 1.0))


def test_draft_cost_ratios():
    config = {"hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 1000, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "tie_word_embeddings": True}
    ratios = setups.draft_cost_ratios(config)
    assert list(ratios) == [1, 2, 3, 4] and ratios[4] == 1.0
    assert all(a < b for a, b in zip(list(ratios.values()), list(ratios.values())[1:], strict=False))
    embeddings = 1000 * 64 + 64  # the table (tied head) and the final norm: paid by every draft
    per_layer = (llama_parameters(config) - embeddings) / 4
    assert ratios[1] == pytest.approx((embeddings + per_layer) / llama_parameters(config))


# ---------------------------------------------------------------------------------------------- engine metrics

VLLM_METRICS = """
# TYPE vllm:request_decode_time_seconds histogram
vllm:request_decode_time_seconds_sum{{engine="0",model_name="m"}} {decode}
vllm:request_decode_time_seconds_count{{engine="0",model_name="m"}} {count}
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
"""

SGLANG_METRICS = """
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_sum{{model_name="m"}} {e2e}
sglang:e2e_request_latency_seconds_count{{model_name="m"}} {count}
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{{model_name="m"}} {ttft}
sglang:time_to_first_token_seconds_count{{model_name="m"}} {count}
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{{model_name="m",is_streaming="false"}} {generated}
# TYPE sglang:spec_verify_calls counter
sglang:spec_verify_calls_total{{model_name="m"}} {calls}
"""


def test_vllm_decode_time_and_counters_between_two_scrapes():
    before = Metrics.parse(VLLM_METRICS.format(decode=1.0, count=2, drafts=10, draft_tokens=20, accepted=9,
                                               p0=6, p1=3))
    after = Metrics.parse(VLLM_METRICS.format(decode=3.5, count=3, drafts=20, draft_tokens=40, accepted=21,
                                              p0=13, p1=8))
    assert live.decode_seconds(before, after) == (2.5, 1)
    got = live.accepted(before, after)
    assert got["acceptance rate"] == pytest.approx(12 / 20) and got["tokens per verification"] == 2.2
    assert got["survival 0"] == pytest.approx(0.7) and got["survival 1"] == pytest.approx(0.5)


def test_sglang_decode_time_and_tokens_per_verification():
    before = Metrics.parse(SGLANG_METRICS.format(e2e=2.0, count=1, ttft=0.5, generated=100, calls=40))
    after = Metrics.parse(SGLANG_METRICS.format(e2e=5.0, count=2, ttft=0.7, generated=160, calls=60))
    assert live.decode_seconds(before, after) == (pytest.approx(2.8), 1)
    assert live.accepted(before, after) == {"tokens per verification": 3.0, "drafts": 20}


QUEUE_METRICS = """
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempted}
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_sum{{engine="0",model_name="m"}} {queued}
vllm:request_queue_time_seconds_count{{engine="0",model_name="m"}} {count}
"""


def test_preemptions_and_queue_time_between_two_scrapes():
    before = Metrics.parse(QUEUE_METRICS.format(preempted=1, queued=0.5, count=4))
    after = Metrics.parse(QUEUE_METRICS.format(preempted=3, queued=2.5, count=8))
    assert live._queueing(before, after) == {"preemptions": 2, "queue seconds per request": 0.5}
    assert math.isnan(live._queueing(before, before)["queue seconds per request"])
    sglang = Metrics.parse(SGLANG_METRICS.format(e2e=2.0, count=1, ttft=0.5, generated=100, calls=40))
    assert live._queueing(sglang, sglang) == {}


def test_no_speculation_no_counters():
    plain = Metrics.parse(VLLM_METRICS.split("# TYPE vllm:spec_decode_num_drafts")[0].format(decode=1, count=1))
    assert live.accepted(plain, plain) == {}


# ---------------------------------------------------------------------------------------------- set-ups


def test_tasks_repeat_their_prompts_and_the_control_does_not():
    assert setups.CONTROL in setups.TASKS and setups.CONTROL not in setups.REPETITIVE
    assert set(setups.REPETITIVE) == {"edit code", "extract quotes", "summarise with citations"}
    for name in setups.REPETITIVE:
        assert "\n\n" in setups.TASKS[name]  # an instruction, then the material the answer copies from
    assert "\n\n" not in setups.TASKS[setups.CONTROL]


def test_speculative_configs_and_bad_values():
    assert setups.ngram(4, 2, 4) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                                     "prompt_lookup_max": 4}
    assert setups.draft_model("/m", 3)["method"] == "draft_model"
    with pytest.raises(ValueError, match="lookup_max"):
        setups.ngram(4, 3, 2)
    with pytest.raises(ValueError, match="k"):
        setups.draft_model("/m", 0)


def test_profile_draft_configs_and_vocab_sizes():
    draft = gpu.profile_draft_config("gpu-80g")
    assert draft["use_heterogeneous_vocab"] is True and draft["model"] == setups.QWEN_05B
    assert setups.VOCAB_SIZES[setups.QWEN_05B] % 128 == 0 and setups.VOCAB_SIZES[setups.QWEN_72B] % 256 == 0
    sizes = setups.VOCAB_SIZES
    assert sizes[setups.QWEN_05B] < sizes[setups.QWEN_7B] == sizes[setups.QWEN_72B]


def test_gpu_runs_only_where_there_is_a_gpu():
    assert gpu.gpu_runs(profiles.load("cpu")) == []
    assert {r.label for r in gpu.gpu_runs(profiles.load("gpu-24g"))} < {r.label for r in gpu.all_gpu_runs()}
    runs = gpu.gpu_runs(profiles.load("gpu-80g"))
    assert {r.engine for r in runs} == {"vllm", "sglang"}
    assert {"draft_model", "eagle3"} == {r.options["speculative_config"]["method"] for r in runs if r.engine == "vllm"}
    assert {"STANDALONE", "EAGLE3"} == {r.options["speculative_algorithm"] for r in runs if r.engine == "sglang"}
    with pytest.raises(ValueError, match="only from local models"):
        setups.draft_source(profiles.load("gpu-24g"), 2)


def test_the_warm_up_sends_a_rounds_requests_once_untimed(monkeypatch):
    sent = []
    monkeypatch.setattr(live, "chat_response", lambda server, prompt, max_tokens, **kw: sent.append(
        ("task", prompt, max_tokens, kw)))
    monkeypatch.setattr(live, "run_load", lambda server, prompts, **kw: sent.append(
        ("wave", list(prompts), kw["concurrency"], kw["max_tokens"], kw["extra_body"])))
    live.warm_up("server", {"a": "A?", "b": "B?"}, 48, ["S?"], 2, 26)
    asked = {"logprobs": True, "top_logprobs": live.CANDIDATES, "extra_body": {"return_token_ids": True}}
    assert sent == [("task", "A?", 48, asked), ("task", "B?", 48, asked),
                    ("wave", ["S?", "S?"], 2, 26, {"min_tokens": 26})]  # the tasks asked as answer_tasks asks them
    with pytest.raises(ValueError, match="concurrency"):
        live.warm_up("server", {}, 48, ["S?"], 0, 26)


def test_a_wave_takes_the_prompts_in_turn_each_forced_to_its_length(monkeypatch):
    sent = []
    monkeypatch.setattr(live, "run_load", lambda server, prompts, **kw: sent.append(
        (list(prompts), kw["concurrency"], kw["max_tokens"], kw["extra_body"])))
    live.wave("server", ["a", "b"], 3, 5)
    assert sent == [(["a", "b", "a"], 3, 5, {"min_tokens": 5})]


class _StandInLaunch:
    """A declared server stand-in: `server(profile)` is a server (its name, a str) that notes its starts and stops."""

    def __init__(self, name, log):
        self.name, self.engine, self.log = name, "vllm", log

    def server(self, profile):
        log = self.log

        class _Server(str):
            running = False

            def start(self):
                log.append(("start", str(self)))
                self.running = True
                return self

            def stop(self):
                if self.running:
                    log.append(("stop", str(self)))
                self.running = False

        return _Server(self.name)


def _stand_in_rounds(monkeypatch, rates):
    """live's measurements faked: each server's rates in turn, round by round (tasks: [rate per task]; sweep:
    {b: rate}); the speculative server's counters say 3 tokens per verification."""
    log = []
    given = {(name, kind): iter([r[kind] for r in by_round]) for name, by_round in rates.items()
             for kind in ("tasks", "sweep")}
    monkeypatch.setattr(live, "warm_up", lambda server, *a: log.append(("warm up", server)))

    def answer_tasks(server, tasks, max_tokens):
        log.append(("tasks", server))
        per_task = next(given[server, "tasks"])
        table = pd.DataFrame({"task": list(tasks)[:len(per_task)], "decode tokens/s": per_task,
                              "tokens per verification": 3.0 if server != "plain" else np.nan})
        return SimpleNamespace(table=table, answers=[SimpleNamespace(token_ids=[1, 2])] * len(per_task))

    def sweep(server, prompts, concurrency, max_tokens):
        log.append(("sweep", server))
        per_b = next(given[server, "sweep"])
        return pd.DataFrame({"concurrency": list(concurrency), "decode tokens/s per request":
                             [per_b[b] for b in concurrency], "tokens per verification": 3.0})

    monkeypatch.setattr(live, "answer_tasks", answer_tasks)
    monkeypatch.setattr(live, "sweep", sweep)
    return log


def test_a_gpu_run_starts_and_warms_both_servers_up_in_every_round(monkeypatch):
    plain = [{"tasks": [10.0, 10.0], "sweep": {1: 10.0, 4: 8.0}}] * 3
    spec = [{"tasks": [15.0, 15.0], "sweep": {1: 15.0, 4: 7.0}},  # 1.5x, 0.875x
            {"tasks": [12.0, 14.0], "sweep": {1: 11.0, 4: 9.0}},  # 1.3x, 1.125x
            {"tasks": [20.0, 16.0], "sweep": {1: 16.0, 4: 6.0}}]  # 1.8x, 0.75x
    log = _stand_in_rounds(monkeypatch, {"plain": plain, "spec": spec})
    frame = gpu.measure_run(_StandInLaunch("plain", log), _StandInLaunch("spec", log), profiles.load("gpu-80g"),
                            48, [1, 4], 26, rounds=3)
    turn = [("start", "plain"), ("warm up", "plain"), ("tasks", "plain"), ("sweep", "plain"), ("stop", "plain")]
    spec_turn = [(what, "spec") for what, _ in turn]
    assert log == turn + spec_turn + spec_turn + turn + turn + spec_turn  # every round starts both, turns rotate
    assert list(frame.columns) == gpu.GPU_COLUMNS and (frame.rounds == 3).all() and frame.run.eq("spec").all()
    tasks = frame[frame.workload == "tasks"].iloc[0]
    assert [tasks.speedup, tasks["speedup lowest"], tasks["speedup highest"]] == pytest.approx([1.5, 1.3, 1.8])
    assert tasks["against 1"] == "faster" and tasks["same tokens"] and tasks["tokens per verification"] == 3.0
    waves = frame[frame.workload == "waves"].set_index("concurrency")
    assert waves.loc[4, ["speedup", "speedup lowest", "speedup highest"]].tolist() == pytest.approx(
        [0.875, 0.75, 1.125])
    assert waves.loc[4, "against 1"] == "not resolved with 3 rounds" and waves.loc[1, "against 1"] == "faster"


def test_a_gpu_run_of_one_round_is_its_own_lowest_and_highest(monkeypatch):
    log = _stand_in_rounds(monkeypatch, {"plain": [{"tasks": [10.0], "sweep": {1: 10.0}}],
                                         "spec": [{"tasks": [5.0], "sweep": {1: 20.0}}]})
    frame = gpu.measure_run(_StandInLaunch("plain", log), _StandInLaunch("spec", log), profiles.load("gpu-80g"),
                            48, [1], 26)
    assert frame["speedup"].tolist() == pytest.approx([0.5, 2.0]) and frame["against 1"].tolist() == ["slower",
                                                                                                     "faster"]
    assert log.count(("warm up", "spec")) == 1 and log.count(("tasks", "spec")) == 1


# ---------------------------------------------------------------------------------------------- engine venvs


def _stand_in_head(hub, model_id: str) -> None:
    """A config-only EAGLE-3 head in a Hugging Face cache: SGLang reads a draft's architectures while it
    resolves the arguments (`_resolve_speculative_algorithm_alias`); nothing here reaches the hub."""
    folder = hub / f"models--{model_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("stand-in")
    (folder / "snapshots" / "stand-in").mkdir(parents=True)
    config = {**flags.stand_in_config(setups.LLAMA_8B), "architectures": ["LlamaForCausalLMEagle3"],
              "num_hidden_layers": 1}
    (folder / "snapshots" / "stand-in" / "config.json").write_text(json.dumps(config))


@pytest.mark.engine_venv
def test_every_gpu_command_is_accepted_by_its_engine(require_engine, tmp_path, monkeypatch):
    require_engine("vllm")
    require_engine("sglang")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    _stand_in_head(tmp_path, setups.EAGLE3_HEADS["sglang"])
    items = [(run.engine, gpu.run_command(run, profiles.load(name)))
             for name in ("gpu-24g", "gpu-80g") for run in gpu.all_gpu_runs()]
    for (engine, argv), verdict in zip(items, flags.check_commands(items), strict=True):
        assert verdict.ok, (engine, argv, verdict.error)
        if engine == "sglang":
            assert "--speculative-algorithm" in verdict.argv


@pytest.mark.engine_venv
def test_sglang_fills_in_steps_top_k_and_draft_tokens(require_engine, cpu):
    require_engine("sglang")
    from servelab.machine import models

    result = setups.sglang_defaults({"cpu": models.resolve(cpu.model).source, "qwen": setups.QWEN_7B})
    table = result.table
    assert (table.error == "").all() and len(table) == 8
    assert (table["max running requests"] > 0).all()
    chains = table[table["top-k"] == 1]
    assert (chains["draft tokens"] == chains.steps + 1).all()  # a chain: one more token than draft steps
    eagle = table[table.algorithm != "NGRAM"]
    assert eagle["decided by"].str.endswith("auto_params").all()
    ngram = table[table.algorithm == "NGRAM"]
    assert (ngram.steps == ngram["draft tokens"] // ngram["top-k"]).all()
    assert set(table.loc[table.algorithm == "STANDALONE", "steps"]) == {3}
    # what differs by architecture (SmolLM2 is a Llama) for the EAGLE family
    by_arch = table[table.algorithm == "EAGLE"].set_index("target")
    assert by_arch.loc["cpu", "architecture"] == "LlamaForCausalLM" and by_arch.loc["cpu", "top-k"] > 1
    assert by_arch.loc["qwen", "top-k"] == 1
    assert all(v != "registered" for v in result.cpu_ops.values()), result.cpu_ops  # why it is GPU-only here
    assert (table.device == "cuda").all() and (ngram["top-k"] == ngram["n-gram BFS breadth"]).all()
    assert (table["accept threshold single"] == 1.0).all() and (table["accept threshold acc"] == 1.0).all()


@pytest.mark.engine_venv
def test_the_articles_standalone_call_fails_and_vllm_defaults_are_read(require_engine, cpu):
    require_engine("sglang")
    require_engine("vllm")
    from servelab.machine import models

    table = setups.sglang_defaults({"cpu": models.resolve(cpu.model).source}, algorithms=("STANDALONE",),
                                   articles_call_on="cpu").table
    assert len(table) == 2 and table.error.iloc[0] == ""
    assert table.error.iloc[1].startswith("AssertionError") and "speculative_hook.py" in table.error.iloc[1]
    defaults = setups.vllm_spec_defaults()
    assert defaults["field defaults"]["draft_sample_method"] == "greedy"
    assert defaults["field defaults"]["rejection_sample_method"] == "standard"
    resolved = defaults["ngram, k = 4, nothing else given"]
    assert resolved["prompt_lookup_min"] == resolved["prompt_lookup_max"] >= 1


@pytest.mark.engine_venv
def test_layer_agreement_on_the_cpu_model(require_engine, cpu):
    """The full model reproduces its own greedy answer at every position and not an answer of other
    tokens; a draft of a few layers agrees far less often; depth_sweep reads the same script."""
    require_engine("vllm")
    from servelab.engines.engine_side import script
    from servelab.machine import engine_envs, models

    python = engine_envs.get(cpu.vllm_env).require().python
    prompt = list(range(2000, 2040))
    other = list(range(3000, 3016))
    request = {"sequences": [{"prompt": prompt, "generate": 16}, {"prompt": prompt, "answer": other}],
               "dtype": "float32"}
    report = engine_envs.run_script(python, script("layer_agreement.py"), models.resolve(cpu.model).source,
                                    stdin=json.dumps(request))
    layers = report["layers"]
    assert layers == setups.target_layers(cpu) and sorted(map(int, report["matches"])) == list(range(1, layers + 1))
    assert report["target_agrees"] == [True, False]
    assert report["matches"][str(layers)][0] == "1" * 16
    assert report["matches"]["1"][0].count("1") < 16
    sweep = live.depth_sweep(cpu, [prompt], [report["answers"][0]])
    assert sweep.target_agrees == [True] and sweep.matches[2] == [report["matches"]["2"][0]]


# ---------------------------------------------------------------------------------------------- live


@pytest.fixture(scope="module")
def ngram_server(require_engine, cpu):
    require_engine("vllm")
    from servelab.engines.server import running

    with running("vllm", cpu, kv_cache_tokens=4096, speculative_config=setups.ngram(3, 2, 3)) as server:
        yield server


@pytest.mark.server
def test_engine_timed_measurements_on_an_ngram_server(ngram_server):
    from servelab.measure.kv_memory.capacity import engine_capacity

    block = engine_capacity(ngram_server)["block_size"]
    costs = live.forward_costs(ngram_server, block, [1, 8], repeats=2, seed=3)
    assert len(costs) == 4 and (costs.cached_tokens == costs.prefix_tokens).all()
    assert (costs.prefix_tokens == 2 * block).all() and (costs.seconds > 0).all()

    tasks = {name: setups.TASKS[name] for name in ("extract quotes", setups.CONTROL)}
    live.warm_up(ngram_server, tasks, 8, [setups.TASKS["edit code"]], 1, 8)
    got = live.answer_tasks(ngram_server, tasks, 24, repeats=2)
    assert list(got.table.task) == list(tasks) and (got.table.tokens > 1).all() and (got.table.repeats == 2).all()
    assert (got.table["decode tokens/s"] > 0).all() and (got.table["slowest / fastest repeat"] >= 1).all()
    assert [len(g) for g in got.generated] == list(got.table.tokens)
    assert all(len(p) > 20 for p in got.prompts)  # the chat template was applied around the task
    quotes = got.table.set_index("task").loc["extract quotes"]
    assert quotes.drafts > 0 and 0 < quotes["acceptance rate"] <= 1
    assert got.counts.k == 3 and got.counts.drafts == got.table.drafts.sum()

    waves = live.sweep(ngram_server, [setups.TASKS["edit code"]], [1, 3], 8, repeats=2)
    assert list(waves.concurrency) == [1, 3] and list(waves.requests) == [1, 3] and (waves.waves == 2).all()
    assert (waves["slowest / fastest wave"] >= 1).all()
    assert (waves.drafts * waves["tokens per verification"] >= 2 * waves.requests * 7).all()  # both waves counted

    assert (waves.preemptions == 0).all() and (waves["queue seconds per request"] >= 0).all()
    assert (waves["decode tokens/s per request"] > 0).all() and (waves["tokens per verification"] >= 1).all()
