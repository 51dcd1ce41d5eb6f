"""Chapter 00's helpers: parsing greedy answers, comparing them token by token, and the verdict per dtype."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.machine import profiles
from servelab.measure.setup import check as setup_check
from servelab.measure.setup.check import Answer, answer_from_choice, compare, first_divergence, near_tie


def _choice(ids, tokens, finish="stop", key="token_ids"):
    """A chat-completion choice as vLLM (`token_ids`) or SGLang (`response_token_ids`) returns it."""
    content = [{"token": t, "logprob": -0.1, "top_logprobs": [{"token": t, "logprob": -0.1},
                                                             {"token": "x", "logprob": -2.0}]} for t in tokens]
    return {"message": {"content": "".join(tokens[:-1] if finish == "stop" else tokens)},
            "finish_reason": finish, "logprobs": {"content": content}, key: ids}


def _answer(ids, tokens=None, alternatives=None, gap=0.2, third=None):
    """An engine answer: `alternatives` maps a position to its runner-up token, `gap` nats behind the chosen
    one; `third` maps a position to a third candidate (rank 3), 0.01 nats behind the runner-up."""
    tokens = tokens or [f"t{i}" for i in ids]
    alternatives, third = alternatives or {}, third or {}
    cands = tuple(((t, -0.1), (alternatives.get(i, "zz"), -0.1 - gap), (third.get(i, "yy"), -0.11 - gap))
                  for i, t in enumerate(tokens))
    return Answer("".join(tokens), tuple(ids), tuple(tokens), cands)


@pytest.mark.parametrize("key", ["token_ids", "response_token_ids"])
def test_an_answer_leaves_out_the_stop_token_but_keeps_its_candidates(key):
    answer = answer_from_choice(_choice([5, 6, 2], ["The", " sea", "<|im_end|>"], key=key))
    assert answer.token_ids == (5, 6)
    assert answer.tokens == ("The", " sea", "<|im_end|>")
    assert answer.candidates[0] == (("The", -0.1), ("x", -2.0))
    assert answer.text == "The sea"


def test_an_answer_cut_by_max_tokens_keeps_every_token():
    assert answer_from_choice(_choice([5, 6, 7], ["a", "b", "c"], finish="length")).token_ids == (5, 6, 7)


def test_an_answer_without_token_ids_is_one_clear_error():
    choice = _choice([1], ["a"])
    del choice["token_ids"]
    with pytest.raises(ValueError, match="no token ids.*return_token_ids"):
        answer_from_choice(choice)


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # one stopped where the other went on
    assert first_divergence([], [4]) == 0


def test_a_near_tie_needs_each_token_second_in_the_others_candidates_and_close():
    a = _answer([1, 2], alternatives={1: "t3"})
    b = _answer([1, 3], alternatives={1: "t2"})
    assert near_tie(a, b, 1) is True
    c = _answer([1, 4])  # t4 is in neither's candidates at position 1
    assert near_tie(a, c, 1) is False
    third = _answer([1, 2], third={1: "t3"})  # t3 among the candidates, but third: not a swap of the top two
    assert near_tie(third, b, 1) is False
    far = _answer([1, 2], alternatives={1: "t3"}, gap=setup_check.NEAR_TIE_NATS + 0.1)
    assert near_tie(far, b, 1) is False, "a runner-up further behind than rounding moves logits is no tie"
    at_bound = _answer([1, 2], alternatives={1: "t3"}, gap=setup_check.NEAR_TIE_NATS)
    assert near_tie(at_bound, b, 1) is True
    assert near_tie(a, Answer("", (1, 3)), 1) is False  # without candidates it cannot be judged a tie


def test_fp32_claims_identical_tokens_and_fails_on_any_difference():
    same = compare(["q"], {"vLLM": [_answer([1, 2])], "SGLang": [_answer([1, 2])]}, exact=True)
    assert same.holds and same.rates["SGLang vs vLLM"] == 1.0
    tie = compare(["q"], {"vLLM": [_answer([1, 2], alternatives={1: "t3"})],
                          "SGLang": [_answer([1, 3], alternatives={1: "t2"})]}, exact=True)
    assert not tie.holds, "where exactness is claimed even a near tie is a failure"


def test_bf16_reports_the_divergence_and_accepts_only_near_ties():
    questions = ["q1", "q2"]
    base = [_answer([1, 2, 5], alternatives={1: "t3"}), _answer([7, 8])]
    other = [_answer([1, 3, 6], alternatives={1: "t2"}), _answer([7, 8])]
    result = compare(questions, {"vLLM": base, "SGLang": other}, exact=False)
    assert result.holds
    assert result.rates["SGLang vs vLLM"] == 0.5
    row = result.table.iloc[0]
    assert row["first divergence"] == 1 and row["tokens there"] == "'t2' / 't3'"
    assert row["margin (nats)"] == pytest.approx(0.2) and row["near tie"]
    assert pd.isna(result.table.iloc[1]["first divergence"])
    broken = compare(questions, {"vLLM": base, "SGLang": [_answer([9, 9]), _answer([7, 8])]}, exact=False)
    assert not broken.holds, "a divergence to a token outside the top candidates is not rounding"


def test_a_divergence_without_candidates_shows_ids_and_fails():
    result = compare(["q"], {"vLLM": [_answer([1, 2])], "transformers": [Answer("", (1, 4))]}, exact=False)
    assert result.table.iloc[0]["tokens there"] == "'t2' / id 4"
    assert not result.holds, "a divergence that cannot be judged is not accepted as rounding"
    same = compare(["q"], {"vLLM": [_answer([1, 2])], "transformers": [Answer("", (1, 2))]}, exact=True)
    assert same.holds
    assert not compare(["q"], {"vLLM": [_answer([1, 2])], "transformers": [Answer("", (1, 4))]}, exact=True).holds


def test_compare_rejects_bad_input():
    with pytest.raises(ValueError, match="at least two sources, got 1: vLLM"):
        compare(["q"], {"vLLM": [_answer([1])]}, exact=True)
    with pytest.raises(ValueError, match="SGLang has 0 answers for 1 questions"):
        compare(["q"], {"vLLM": [_answer([1])], "SGLang": []}, exact=True)


def test_exactness_is_decided_by_dtype():
    assert setup_check.exact_expected("float32")
    assert not setup_check.exact_expected("bfloat16") and not setup_check.exact_expected("float16")
    assert setup_check.rounding_step("float32") == 2.0 ** -23
    assert setup_check.rounding_step("bfloat16") == 2.0 ** -7
    with pytest.raises(ValueError, match="unknown dtype 'fp33'; accepted: float32, float16, bfloat16"):
        setup_check.exact_expected("fp33")


@pytest.mark.parametrize("name", [n for n in profiles.names() if n != "cpu"])
def test_no_reference_runs_where_the_profile_dtype_is_not_exact(name):
    profile = profiles.load(name)
    assert not setup_check.exact_expected(profile.dtype)
    assert setup_check.references(profile, ["What is the capital of France?"]) == {}  # starts nothing


def test_every_profile_dtype_is_known():
    for name in profiles.names():
        setup_check.rounding_step(profiles.load(name).dtype)


def test_smallest_margins():
    answer = Answer("", (1, 2), ("a", "b"), ((("a", -0.1), ("x", -0.5)), (("b", -1.0), ("y", -1.05))))
    assert setup_check.smallest_margins([answer, Answer("", ())]) == [pytest.approx(0.05), None]


def test_article_commands_text_lists_article_and_corrected_commands_only():
    launch = pd.DataFrame([
        {"command": "servelab, profile cpu, plain", "accepted": True, "checked": "vllm serve m"},
        {"command": "article: one", "accepted": False, "checked": "vllm serve m --bad"},
        {"command": "corrected: one", "accepted": True, "checked": "vllm serve m"},
    ])
    assert setup_check.article_commands_text(launch) == (
        "# article: one -> rejected\nvllm serve m --bad\n\n# corrected: one -> accepted\nvllm serve m")


def test_frontend_programs_source_is_the_marked_part_of_the_script():
    text = setup_check.frontend_programs_source()
    assert text.startswith("@sgl.function") and "multi_turn_agent" in text
    assert setup_check.PROGRAMS_START not in text and setup_check.PROGRAMS_END not in text


@pytest.mark.engine_venv
def test_the_fp32_reference_gives_token_ids_and_the_fact(cpu, require_engine):
    require_engine("vllm")
    [answer] = setup_check.references(cpu, ["What is the capital of France?"])["transformers"]
    assert "Paris" in answer.text and answer.token_ids and not answer.candidates


def test_answers_table_has_each_sources_text_and_the_first_sources_margin():
    a = Answer("Paris.", (1,), ("Paris.",), ((("Paris.", -0.1), ("Lyon.", -0.4)),))
    table = setup_check.answers_table(["q"], {"vLLM": [a], "transformers": [Answer("Paris.", (1,))]})
    assert list(table.columns) == ["question", "vLLM", "transformers", "smallest margin, vLLM (nats)"]
    assert table.iloc[0, -1] == pytest.approx(0.3)


def test_the_other_dtype_differs_in_mantissa_on_every_profile():
    for name in profiles.names():
        dtype = profiles.load(name).dtype
        other = setup_check.other_dtype(dtype)
        assert setup_check.MANTISSA_BITS[other] != setup_check.MANTISSA_BITS[dtype], (name, dtype, other)
    with pytest.raises(ValueError, match="unknown dtype 'int8'; accepted: float32"):
        setup_check.other_dtype("int8")


def test_vllm_omp_threads_are_the_core_ids_its_log_lists():
    log = ("(EngineCore pid=1) INFO [ompmultiprocessing.py:185] \tlocal_world_size=1, reserve_cpu_num=1\n"
           "(EngineCore pid=1) INFO [ompmultiprocessing.py:185] \tlocal_rank=0, core ids=[0, 1, 2]\n")
    assert setup_check.vllm_omp_threads(log) == 3
    assert setup_check.vllm_omp_threads("local_rank=0, core ids=[0]") == 1
    with pytest.raises(ValueError, match="lists no 'core ids"):
        setup_check.vllm_omp_threads("no binding here")
