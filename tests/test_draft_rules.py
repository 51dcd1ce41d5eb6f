"""servelab.engines.draft_rules: each engine's own draft/target vocabulary rules.

The rules applied in the kernel are pinned to the installed engines twice (tests marked engine_venv):
every rule's key lines must still be in its function's source, and the engines' own two comparisons,
run on stand-in objects, must refuse exactly the pairs that pair_problems refuses.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from servelab.engines import draft_rules
from servelab.machine import engine_envs, model_shapes

QWEN_7B, QWEN_05B = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
LLAMA_8B, LLAMA_1B = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
EAGLE3_HEADS = {"vllm": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "sglang": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"}


def standalone(draft: str, **more) -> dict:
    return {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": draft, **more}


def vllm_draft(draft: str, **more) -> dict:
    return {"speculative_config": {"method": "draft_model", "model": draft, "num_speculative_tokens": 4, **more}}


def test_sglang_standalone_refuses_qwen_05b_for_7b():
    [line] = draft_rules.pair_problems("sglang", QWEN_7B, standalone(QWEN_05B))
    assert "151936" in line and "152064" in line and QWEN_05B in line and QWEN_7B in line
    assert draft_rules.SGL_STANDALONE.where in line
    assert draft_rules.SGL_STANDALONE.where == ("sglang/srt/speculative/standalone_worker_v2.py::"
                                                "StandaloneWorkerV2._validate_vocab_compatibility")


def test_vllm_draft_model_needs_heterogeneous_vocab_for_the_same_pair():
    [line] = draft_rules.pair_problems("vllm", QWEN_7B, vllm_draft(QWEN_05B))
    assert "151936" in line and "152064" in line and "use_heterogeneous_vocab" in line
    assert "vllm/config/speculative.py::SpeculativeConfig.verify_equal_vocab_size_if_draft_model" in line
    assert draft_rules.pair_problems("vllm", QWEN_7B, vllm_draft(QWEN_05B, use_heterogeneous_vocab=True)) == []
    no_method = {"speculative_config": {"model": QWEN_05B, "num_speculative_tokens": 4}}  # vLLM's default method
    assert len(draft_rules.pair_problems("vllm", QWEN_7B, no_method)) == 1


def test_heterogeneous_vocab_only_with_draft_model_and_greedy_drafts():
    [line] = draft_rules.pair_problems("vllm", QWEN_7B, {"speculative_config": {
        "method": "ngram", "num_speculative_tokens": 4, "use_heterogeneous_vocab": True}})
    assert "only method='draft_model'" in line and "SpeculativeConfig._verify_args" in line
    [line] = draft_rules.pair_problems("vllm", QWEN_7B, vllm_draft(QWEN_05B, use_heterogeneous_vocab=True,
                                                                   draft_sample_method="probabilistic"))
    assert "greedy" in line and "151936" in line


def test_llama_32_1b_drafts_for_llama_31_8b_on_both_engines():
    assert draft_rules.pair_problems("sglang", LLAMA_8B, standalone(LLAMA_1B)) == []
    assert draft_rules.pair_problems("vllm", LLAMA_8B, vllm_draft(LLAMA_1B)) == []


def test_eagle3_heads_are_not_compared():
    sglang = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": EAGLE3_HEADS["sglang"]}
    assert draft_rules.pair_problems("sglang", LLAMA_8B, sglang) == []
    vllm = {"speculative_config": {"method": "eagle3", "model": EAGLE3_HEADS["vllm"], "num_speculative_tokens": 4}}
    assert draft_rules.pair_problems("vllm", LLAMA_8B, vllm) == []
    named_only = {"speculative_config": {"model": EAGLE3_HEADS["vllm"], "num_speculative_tokens": 4}}
    assert draft_rules.pair_problems("vllm", LLAMA_8B, named_only) == [], "vLLM takes the method from the name"


def test_rejection_sampling_refuses_a_reduced_draft_vocabulary():
    options = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": EAGLE3_HEADS["sglang"],
               "speculative_use_rejection_sampling": True}
    [line] = draft_rules.pair_problems("sglang", LLAMA_8B, options)
    assert "32000" in line and "128256" in line and draft_rules.SGL_REJECTION.where in line


def test_ngram_has_no_draft_to_compare():
    assert draft_rules.pair_problems("sglang", QWEN_7B, {"speculative-algorithm": "NGRAM"}) == []
    assert draft_rules.pair_problems("vllm", QWEN_7B, {"speculative_config": {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}) == []
    assert draft_rules.pair_problems("vllm", QWEN_7B, {}) == []
    assert draft_rules.pair_problems("sglang", QWEN_7B, {}) == []


def test_unknown_model_is_one_clear_line():
    [line] = draft_rules.pair_problems("sglang", QWEN_7B, standalone("nobody/unknown-draft"))
    assert "'nobody/unknown-draft'" in line and "model_shapes.toml" in line and "\n" not in line
    [line] = draft_rules.pair_problems("vllm", "nobody/unknown-target", vllm_draft(QWEN_05B))
    assert "'nobody/unknown-target'" in line


def test_a_model_folder_is_read_from_its_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 151936}))
    assert draft_rules.pair_problems("vllm", QWEN_05B, vllm_draft(str(tmp_path))) == []
    assert len(draft_rules.pair_problems("vllm", QWEN_7B, vllm_draft(str(tmp_path)))) == 1


def test_unknown_engine_or_algorithm_raises():
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        draft_rules.pair_problems("tgi", QWEN_7B, {})
    with pytest.raises(ValueError, match="known: EAGLE, EAGLE3, STANDALONE, NGRAM"):
        draft_rules.pair_problems("sglang", QWEN_7B, {"speculative_algorithm": "DFLASH"})


def test_gated_models():
    assert draft_rules.gated_models([QWEN_7B, LLAMA_8B, EAGLE3_HEADS["vllm"], LLAMA_1B]) == [LLAMA_8B, LLAMA_1B]


# ----------------------------------------------------------------------------- the installed engines

def _site(engine: str, cpu) -> Path:
    site = engine_envs.get(cpu.engine_env(engine)).require().site_packages()
    assert site is not None
    return site


@pytest.mark.engine_venv
@pytest.mark.parametrize("rule", draft_rules.RULES, ids=lambda r: r.where)
def test_the_rule_is_still_in_the_installed_engine(rule, require_engine, cpu):
    require_engine(rule.engine)
    site = _site(rule.engine, cpu)
    assert draft_rules.rule_source(rule, site) is not None, f"{rule.where} is gone from {site}"
    missing = draft_rules.missing_key_lines(rule, site)
    assert missing == [], f"{rule.where} changed ({missing} are gone): update servelab/engines/draft_rules.py"


KNOWN = [name for name, shape in model_shapes.known_shapes().items() if shape.vocab_size]


@pytest.mark.engine_venv
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_engines_own_check_refuses_the_same_pairs(engine, require_engine, cpu):
    require_engine(engine)
    drafts = [m for m in KNOWN if "eagle" not in m.lower()]  # vLLM runs a name with "eagle" in it as a head
    pairs = list(itertools.product(KNOWN, drafts))
    python = engine_envs.get(cpu.engine_env(engine)).require().python
    errors = draft_rules.engine_verdicts(engine, pairs, python)
    for (target, draft), error in zip(pairs, errors, strict=True):
        options = vllm_draft(draft) if engine == "vllm" else standalone(draft)
        ours = draft_rules.pair_problems(engine, target, options)
        assert bool(error) == bool(ours), f"{draft} -> {target}: the engine says {error!r}, servelab {ours}"
        sizes = model_shapes.vocabulary(target).vocab_size, model_shapes.vocabulary(draft).vocab_size
        if error and sizes[0] != sizes[1]:
            assert all(str(s) in error for s in sizes), error
    assert any(errors) and not all(errors)


def test_a_changed_rule_is_found_missing(tmp_path):
    rule = draft_rules.SGL_STANDALONE
    path = tmp_path / rule.file
    path.parent.mkdir(parents=True)
    body = "        if target_vocab_size != draft_vocab_size:\n            raise ValueError('x')\n"
    path.write_text(f"class StandaloneWorkerV2:\n    def _validate_vocab_compatibility(self):\n{body}")
    assert draft_rules.missing_key_lines(rule, tmp_path) == [rule.key_lines[1]]
    path.write_text("class StandaloneWorkerV2:\n    def renamed(self):\n        pass\n")
    assert draft_rules.rule_source(rule, tmp_path) is None
    assert draft_rules.missing_key_lines(rule, tmp_path) == list(rule.key_lines)


def test_sglang_refuses_a_draft_with_a_shorter_context_unless_told():
    """lmsys's EAGLE-3 head allows 2048 positions; gpu-80g's target context is 16384 (chapter 06's run sets the
    variable SGLang's own test fixture sets for this head)."""
    head = {"speculative_algorithm": "EAGLE3",
            "speculative_draft_model_path": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"}
    (line,) = draft_rules.context_problems("sglang", head, 16384, {})
    assert "2048 positions" in line and "16384" in line and "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in line
    assert draft_rules.context_problems("sglang", head, 16384, {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}) == []
    assert draft_rules.context_problems("sglang", head, 2048, {}) == []
    vllm_head = {"speculative_config": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}
    assert draft_rules.context_problems("vllm", vllm_head, 16384, {}) == []
