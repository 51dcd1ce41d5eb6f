"""A chapter's core path: the prose a reader meets who skips the evidence layer.

The convention (CONTRIBUTING.md, "Core path and evidence layer"): evidence prose sits in a MyST dropdown,

    :::{dropdown} How we know: <what>
    ...
    :::

rendered collapsed in the book and read as plain text in Jupyter. Everything else in a markdown cell is
core path (a cell tag would not do: the book renders a tagged markdown cell like any other). `measure`
counts the core words the way `../shared/tools/chapter-budget` does (a code span is one word, link targets
are not read) and finds the "What to remember" heading and any engine source line number (which rots with
every pin).

`python -m servelab.book.core_path [notebooks/NN_name.py ...]` prints one line per chapter.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(`{3,}|:{3,})\s*\{([\w-]+)\}")
WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")
LINE_REF = re.compile(r"\blines? \d{2,}|\.py:\d+|\bL\d{3,}\b")
REMEMBER = re.compile(r"^#+ What to remember\s*$", re.M)
# the issue on teachable chapters: ~2,000 core words a chapter, ~800 for the set-up check
BUDGET = {"00_setup_check": 800}
DEFAULT_BUDGET = 2000


def split(text: str) -> tuple[str, str]:
    """(core, evidence) prose of one markdown cell: dropdown blocks (and what they nest) are evidence."""
    core: list[str] = []
    evidence: list[str] = []
    stack: list[tuple[str, bool]] = []  # open fences: (marker, inside a dropdown)
    for line in text.splitlines():
        m = FENCE.match(line.strip())
        inside = any(drop for _, drop in stack)
        if m:
            stack.append((m.group(1), inside or m.group(2).lower() in ("dropdown", "toggle")))
            (evidence if stack[-1][1] else core).append(line)
            continue
        if stack and line.strip() == stack[-1][0]:
            _, drop = stack.pop()
            (evidence if drop else core).append(line)
            continue
        (evidence if inside else core).append(line)
    return "\n".join(core), "\n".join(evidence)


def words(text: str) -> int:
    text = re.sub(r"`[^`]*`", " x ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return len(WORD.findall(text))


@dataclass(frozen=True)
class CorePath:
    chapter: str
    core_words: int
    evidence_words: int
    largest_cell: int  # core words of the longest core markdown cell
    line_refs: list[str]
    remember: bool

    @property
    def budget(self) -> int:
        return BUDGET.get(self.chapter, DEFAULT_BUDGET)


def measure(source: Path) -> CorePath:
    """The core path of the chapter whose jupytext source is `source`."""
    import jupytext

    core_words, evidence_words, largest, refs, remember = 0, 0, 0, [], False
    for cell in jupytext.read(source).cells:
        if cell.cell_type != "markdown":
            continue
        core, evidence = split(cell.source)
        n = words(core)
        core_words, evidence_words, largest = core_words + n, evidence_words + words(evidence), max(largest, n)
        refs += LINE_REF.findall(cell.source)
        remember = remember or bool(REMEMBER.search(core))
    return CorePath(source.stem, core_words, evidence_words, largest, refs, remember)


def main(argv: list[str]) -> int:
    from servelab.book import chapters

    paths = [Path(a) for a in argv] or chapters.sources()
    for p in paths:
        c = measure(p)
        print(f"{c.chapter}: core {c.core_words} words (budget {c.budget}), evidence {c.evidence_words}, "
              f"largest core cell {c.largest_cell}, line refs {len(c.line_refs)}, "
              f"What to remember: {'yes' if c.remember else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
