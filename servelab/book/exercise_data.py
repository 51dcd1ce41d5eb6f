"""The facts of every chapter's exercises, from servelab/data/exercises.toml: minutes, what it needs, its kind.

One place that the book (each exercise's tag, "(10 min, no engine)") and the workshop agenda read.
`python -m servelab.book.exercise_data` prints them; `tests/test_exercises.py` holds each chapter's
`## Exercises` text to them.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from servelab.machine import datafiles

FILE = "exercises.toml"
# what an exercise needs beyond the kernel -> the words its tag shows the reader
NEEDS = {
    "nothing": "no engine",  # arithmetic, a simulator, or this run's measurements already in the kernel
    "an engine's parser": "parser, no server",  # an engine venv's own argument parser; no server starts
    "the chapter's running servers": "servers running",  # servers the chapter still has up
    "a server restart": "server restart",  # starts a server with other options
}
KINDS = ("code", "reasoning")  # code: a stub and a check cell; reasoning: a written answer
TAG = re.compile(r"^(\d+)\.\s+\((\d+) min, ([^)]+)\)")


@dataclass(frozen=True)
class ExerciseFacts:
    chapter: str  # "03_paged_attention"
    number: int
    minutes: int  # reading, writing the answer and any run it needs
    needs: str  # a key of NEEDS
    kind: str  # one of KINDS
    take_home: bool = False  # longer than a session's slot: done after it

    @property
    def tag(self) -> str:
        """The tag the exercise's text starts with, after its number."""
        home = ", take-home" if self.take_home else ""
        return f"({self.minutes} min{home}, {NEEDS[self.needs]})"


def _fact(row: dict) -> ExerciseFacts:
    where = f"{FILE}: {row.get('chapter')} exercise {row.get('number')}"
    if set(row) - {"chapter", "number", "minutes", "needs", "kind", "take_home"}:
        raise ValueError(f"{where}: unknown keys {sorted(set(row) - set(ExerciseFacts.__annotations__))}")
    fact = ExerciseFacts(str(row["chapter"]), int(row["number"]), int(row["minutes"]), str(row["needs"]),
                         str(row["kind"]), bool(row.get("take_home", False)))
    if fact.needs not in NEEDS:
        raise ValueError(f"{where}: needs {fact.needs!r}; accepted: {', '.join(NEEDS)}")
    if fact.kind not in KINDS:
        raise ValueError(f"{where}: kind {fact.kind!r}; accepted: {', '.join(KINDS)}")
    if fact.minutes < 1:
        raise ValueError(f"{where}: minutes must be at least 1")
    return fact


def load() -> dict[str, tuple[ExerciseFacts, ...]]:
    """Every chapter's exercises, in number order, keyed by chapter ("03_paged_attention")."""
    by_chapter: dict[str, list[ExerciseFacts]] = {}
    for row in datafiles.load(FILE).get("exercise", []):
        fact = _fact(row)
        by_chapter.setdefault(fact.chapter, []).append(fact)
    out = {}
    for chapter, facts in by_chapter.items():
        facts.sort(key=lambda f: f.number)
        if [f.number for f in facts] != list(range(1, len(facts) + 1)):
            raise ValueError(f"{FILE}: {chapter} numbers its exercises {[f.number for f in facts]}, not 1..n")
        out[chapter] = tuple(facts)
    return out


def tags_in(text: str) -> dict[int, str]:
    """The tags of the numbered exercises in a chapter's `## Exercises` markdown: number -> "(10 min, ...)"."""
    return {int(m.group(1)): f"({m.group(2)} min, {m.group(3)})"
            for line in text.splitlines() if (m := TAG.match(line))}


def main() -> int:
    for chapter, facts in load().items():
        for f in facts:
            print(f"{chapter} {f.number}: {f.tag} {f.kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
