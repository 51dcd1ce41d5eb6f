"""Every chapter's exercises: their tags agree with servelab/data/exercises.toml, each code exercise has a stub and a
check beside its hidden solution, and the check prints what is right and what is not without ever raising."""

from __future__ import annotations

import re
from dataclasses import dataclass

import jupytext
import pytest

from servelab.book import chapters, exercise_check, exercise_data

SOURCES = chapters.sources()
FACTS = exercise_data.load()
HIDDEN = {"source_hidden": True, "outputs_hidden": True}


def _exercise_cells(source):
    cells = jupytext.read(source).cells
    start = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"
                  and re.search(r"^## Exercises\s*$", c.source, re.M)), None)
    return (None, []) if start is None else (cells[start].source.split("## Exercises", 1)[1], cells[start + 1:])


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_the_tags_in_the_text_are_the_data(source):
    text, _ = _exercise_cells(source)
    facts = FACTS.get(source.stem, ())
    if text is None:
        assert not facts, f"{source.stem} has no '## Exercises' but {exercise_data.FILE} lists exercises for it"
        return
    assert facts, f"{source.stem}: its exercises are not in servelab/data/{exercise_data.FILE}"
    tags = exercise_data.tags_in(text)
    assert tags == {f.number: f.tag for f in facts}, (
        f"{source.stem}: the exercises' text says {tags}; {exercise_data.FILE} says "
        f"{ {f.number: f.tag for f in facts} }: change one to agree with the other")


@pytest.mark.parametrize("source", [s for s in SOURCES if s.stem in FACTS], ids=lambda p: p.stem)
def test_each_code_exercise_has_a_visible_stub_and_check_before_its_hidden_solution(source):
    _, cells = _exercise_cells(source)
    code = [c for c in cells if c.cell_type == "code"]
    for fact in FACTS[source.stem]:
        solution = next(i for i, c in enumerate(code) if re.match(rf"#\s*Solution {fact.number}\b", c.source))
        assert "hide-cell" in code[solution].metadata.get("tags", []), f"Solution {fact.number} is not hide-cell"
        assert code[solution].metadata.get("jupyter") == HIDDEN, f"Solution {fact.number} is not collapsed"
        if fact.kind != "code":
            continue
        before = code[:solution]
        stub = [c for c in before if c.source.startswith(f"# Exercise {fact.number}: your answer")]
        check = [c for c in before if f'title="Exercise {fact.number}"' in c.source]
        assert stub and check, f"{source.stem} exercise {fact.number}: no stub or no check cell before its solution"
        for c in stub + check:
            assert "hide-cell" not in c.metadata.get("tags", []), "stubs and checks stay visible"
        assert "NotImplementedError" in stub[0].source or "= ..." in stub[0].source, "the stub gives no answer"


def test_the_data_file_rejects_what_it_does_not_know():
    with pytest.raises(ValueError, match="needs 'a GPU'"):
        exercise_data._fact({"chapter": "x", "number": 1, "minutes": 5, "needs": "a GPU", "kind": "code"})
    with pytest.raises(ValueError, match="kind"):
        exercise_data._fact({"chapter": "x", "number": 1, "minutes": 5, "needs": "nothing", "kind": "essay"})
    fact = exercise_data._fact({"chapter": "x", "number": 2, "minutes": 30, "needs": "a server restart",
                                "kind": "reasoning", "take_home": True})
    assert fact.tag == "(30 min, take-home, server restart)"
    assert exercise_data.tags_in("1. (5 min, no engine) Why?\n   more\n2. (10 min, server restart) How?") == {
        1: "(5 min, no engine)", 2: "(10 min, server restart)"}


def _printed(answer, cases, **kw) -> list[str]:
    lines: list[str] = []
    exercise_check.check(answer, cases, out=lines.append, **kw)
    return lines


CASES = {"block size 16": ((16,), 0.5), "block size 128": ((128,), 0.71)}


def test_a_right_answer_passes():
    lines = _printed(lambda b: {16: 0.5, 128: 0.709}[b], CASES)
    assert "all right" in lines[0] and lines[1:] == ["  block size 16: right", "  block size 128: right"]


def test_a_wrong_answer_is_named_with_what_was_expected():
    lines = _printed(lambda b: {16: 0.5, 128: 0.65}[b], CASES, title="Exercise 1")
    assert lines[0].startswith("Exercise 1: 1 of 2 right")
    assert lines[2] == "  block size 128: expected 0.71, got 0.65"


def test_a_stub_is_not_answered_yet_and_nothing_raises():
    def stub(block_size: int) -> float:
        raise NotImplementedError

    def body_only(block_size: int) -> float: ...

    for answer in (stub, body_only, ..., None):
        assert _printed(answer, CASES) == [f"Your answer: {exercise_check.NOT_ANSWERED}"]
    broken = _printed(lambda b: 1 / 0, CASES)
    assert "0 of 2 right" in broken[0] and "raised ZeroDivisionError" in broken[1]
    assert "nothing to check" in _printed(stub, {})[0]


def test_dicts_dataclasses_and_lists_are_checked_part_by_part():
    @dataclass(frozen=True)
    class Cost:
        step_s: float
        decode_s: float

    lines = _printed(lambda: Cost(0.02, 0.003), {"vLLM": ((), Cost(0.02, 0.002))})
    assert lines[1:] == ["  vLLM, step_s: right", "  vLLM, decode_s: expected 0.002, got 0.003"]
    lines = _printed(lambda: {"a": 1.0}, {"x": ((), {"a": 1.0, "b": 2.0})})
    assert lines[2] == "  x, b: no answer given"
    assert exercise_check.same([16, 32], [16, 32]) and not exercise_check.same([16, 32], [16])
    assert not exercise_check.same(True, 1.0) and exercise_check.same(True, True)
    assert exercise_check.same(100, 101.5) and not exercise_check.same(100, 103)
