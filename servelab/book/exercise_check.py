"""Checking a participant's answer to a chapter's exercise against this run's data.

A chapter's exercise gives a stub (a function that raises `NotImplementedError`, or a variable set to `...`) and a
check cell: `exercise_check.check(answer, cases)`. `cases` maps a label ("block size 16") to the arguments the
answer is called with and the value it should give, computed from this run's data by the package code the hidden
solution uses (`servelab/measure/exercises/cNN.py`, or the chapter's own analysis module). The check prints one
line per case, right or what was expected, and never raises: an unanswered stub prints "not answered yet", so a
notebook run top to bottom (nbval) passes through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

REL = 0.02  # a number within 2 % of the expected one is right (this run's data, rounded by the reader)
NOT_ANSWERED = "not answered yet: fill in the stub above, run its cell, then run this one again."

Cases = Mapping[str, tuple[tuple[Any, ...], Any]]  # label -> (arguments of the answer, expected value)


@dataclass(frozen=True)
class Verdict:
    label: str
    right: bool
    line: str


class _Unanswered(Exception):
    pass


def _show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value) if hasattr(value, "__float__") and not isinstance(value, str) else None
    except (TypeError, ValueError):
        return None


def same(expected: Any, got: Any, rel: float = REL) -> bool:
    """Whether `got` matches `expected`: numbers within `rel`, sequences element by element, anything else equal."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return bool(expected) == bool(got) and isinstance(got, bool | int)
    e, g = _number(expected), _number(got)
    if e is not None:
        return g is not None and math.isclose(e, g, rel_tol=rel, abs_tol=1e-9)
    if isinstance(expected, Sequence) and not isinstance(expected, str):
        if isinstance(got, str) or not isinstance(got, Sequence) or len(got) != len(expected):
            return False
        return all(same(a, b, rel) for a, b in zip(expected, got, strict=True))
    return bool(expected == got)


def _unanswered(value: Any) -> bool:
    return value is None or value is Ellipsis


def _facets(label: str, expected: Any, got: Any) -> list[tuple[str, Any, Any]]:
    """A dict (or dataclass) answer is checked key by key, each as its own line."""
    if is_dataclass(expected) and not isinstance(expected, type):
        expected = asdict(expected)
        got = asdict(got) if is_dataclass(got) and not isinstance(got, type) else got
    if not isinstance(expected, Mapping):
        return [(label, expected, got)]
    if not isinstance(got, Mapping):
        return [(label, expected, got)]
    return [(f"{label}, {key}" if label else str(key), value, got.get(key)) for key, value in expected.items()]


def _got(answer: Any, label: str, args: tuple[Any, ...]) -> Any:
    if callable(answer):
        try:
            value = answer(*args)
        except NotImplementedError:
            raise _Unanswered from None
    elif isinstance(answer, Mapping) and label in answer:
        value = answer[label]
    else:
        value = answer
    if _unanswered(value):
        raise _Unanswered
    return value


def verdicts(answer: Any, cases: Cases, rel: float = REL) -> list[Verdict] | None:
    """One verdict per case (and per key of a dict answer); None while the stub is not answered."""
    out: list[Verdict] = []
    for label, (args, expected) in cases.items():
        try:
            got = _got(answer, label, args)
        except _Unanswered:
            return None
        except Exception as err:  # the participant's code: report it, never stop the notebook
            out.append(Verdict(label, False, f"{label}: your answer raised {type(err).__name__}: {err}"))
            continue
        for name, want, have in _facets(label, expected, got):
            if _unanswered(have):
                out.append(Verdict(name, False, f"{name}: no answer given"))
            elif same(want, have, rel):
                out.append(Verdict(name, True, f"{name}: right"))
            else:
                out.append(Verdict(name, False, f"{name}: expected {_show(want)}, got {_show(have)}"))
    return out


def check(answer: Any, cases: Cases, *, title: str = "Your answer", rel: float = REL,
          out: Callable[[str], None] = print) -> None:
    """Print what is right in `answer` and what is not, one line per case; never raises."""
    if not cases:
        out(f"{title}: nothing to check on this profile (its run measured nothing this exercise asks about).")
        return
    found = verdicts(answer, cases, rel)
    if found is None:
        out(f"{title}: {NOT_ANSWERED}")
        return
    right = sum(v.right for v in found)
    verdict = "all right" if right == len(found) else f"{right} of {len(found)} right"
    out(f"{title}: {verdict} (numbers count as right within {rel:.0%} of this run's)")
    for v in found:
        out(f"  {v.line}")
