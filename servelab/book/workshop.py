"""Workshop agendas computed from the chapters themselves: how long each chapter takes, and which fit a plan.

A chapter's slot is its run, its reading and its exercises, each rounded up to whole minutes:

- run: the seconds its last recorded run took (the executed notebook's `servelab` metadata, `seconds`), which
  must be a run on the cpu profile (`PROFILE`), the one the committed notebooks record;
- reading: its core path's words (`core_path.measure`) at `READING_WPM`;
- an exercise: the minutes it is tagged with (`servelab/data/exercises.toml`, read by `exercise_data`; the same
  tag the reader sees in the exercise's text). A take-home exercise goes into no plan.

A plan (`PLANS`) has a length in minutes, wall clock, and breaks at fractions of its teaching time. `plan` fills
it: chapters in `PRIORITY` order, each with its shortest exercise done in class, as long as they fit; then the remaining
exercises, shortest first; the minutes left over go to the closing questions. Breaks fall on the chapter
boundaries nearest their fractions. `python -m servelab.book.workshop_page` writes book/workshop.md.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from servelab.book import chapters, core_path, execution_key, exercise_data

PROFILE = "cpu"  # the profile whose recorded runs give the run times (the committed notebooks' profile)
READING_WPM = 200  # words a minute: reading the core path and an exercise's question
WELCOME_MINUTES = 5  # the opening: the machines, the banner, where results go
MIN_CLOSING_MINUTES = 5  # questions at the end; a plan's spare minutes are added to them
BREAKS = {"break": 15, "lunch": 60}  # minutes
# Which chapters a short plan keeps first. 00 checks every machine and 01 defines the words every later chapter
# uses; 04 shows the two engines' caches differing on workloads participants recognise; the memory chapters
# 02 and 03 come next, then time (05), deployment (07), the guide built from them (08, seconds to run on the saved
# results) and speculative decoding (06), whose recorded run is the longest and whose cpu lesson (speculation losing
# on a CPU) needs the most context.
PRIORITY = ("00_setup_check", "01_serving_basics", "04_prefix_caching", "02_kv_cache_memory", "03_paged_attention",
            "05_chunked_prefill", "07_choosing_and_deploying", "08_selection_guide", "06_speculative_decoding")
_ITEM = re.compile(r"^(\d+)\.\s")
_SOLUTION = re.compile(r"^#\s*Solution\s+(\d+)\b")


@dataclass(frozen=True)
class PlanSpec:
    name: str
    title: str  # the page's heading for it
    minutes: int  # wall clock, breaks included
    breaks: tuple[tuple[str, float], ...]  # (kind, fraction of the teaching time it follows)


PLANS = {p.name: p for p in (
    PlanSpec("90min", "Short session", 90, ()),
    PlanSpec("half-day", "Half day", 210, (("break", 0.5),)),
    PlanSpec("full-day", "Full day", 390, (("break", 0.25), ("lunch", 0.5), ("break", 0.75))),
)}


@dataclass(frozen=True)
class Exercise:
    number: int
    minutes: int  # as tagged: reading it, writing the answer, any run it needs
    take_home: bool = False  # longer than a session's slot: no plan does it in class


@dataclass(frozen=True)
class ChapterTime:
    chapter: str  # "03_paged_attention"
    run_seconds: float
    core_words: int
    exercises: tuple[Exercise, ...]

    @property
    def run_minutes(self) -> int:
        return math.ceil(self.run_seconds / 60)

    @property
    def read_minutes(self) -> int:
        return math.ceil(self.core_words / READING_WPM)

    @property
    def base_minutes(self) -> int:
        return self.run_minutes + self.read_minutes

    def exercise(self, number: int) -> Exercise:
        return next(e for e in self.exercises if e.number == number)

    def by_length(self) -> list[Exercise]:
        """The exercises a session can do in class, shortest first."""
        return sorted((e for e in self.exercises if not e.take_home), key=lambda e: (e.minutes, e.number))


def exercises(notebook: dict, name: str = "the notebook", chapter: str | None = None) -> tuple[Exercise, ...]:
    """The exercises of an executed notebook: the numbered items after its `## Exercises` heading, each with a
    hidden solution cell that starts `# Solution N`, and their tagged minutes (`exercise_data`, for `chapter`)."""
    cells = notebook["cells"]
    start = next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
                  and re.search(r"^## Exercises\s*$", "".join(c["source"]), re.M)), None)
    if start is None:
        return ()
    words: dict[int, int] = {}
    text = "".join(cells[start]["source"]).split("## Exercises", 1)[1]
    current = None
    for line in core_path.split(text)[0].splitlines():
        if m := _ITEM.match(line):
            current = int(m.group(1))
            words[current] = core_path.words(line[m.end():])
        elif current is not None and line.startswith((" ", "\t")) and line.strip():
            words[current] += core_path.words(line)  # the item's continuation
        elif line.strip():
            current = None  # a paragraph after the list
    solutions = {int(m.group(1)) for c in cells[start:]
                 if c["cell_type"] == "code" and (m := _SOLUTION.match("".join(c["source"])))}
    if sorted(words) != sorted(solutions):
        raise ValueError(f"{name}: exercises {sorted(words)} but solutions {sorted(solutions)}: each numbered exercise "
                         "needs one hidden cell starting '# Solution N'")
    facts = {f.number: f for f in exercise_data.load().get(chapter or "", ())}
    if chapter is not None and sorted(facts) != sorted(words):
        raise ValueError(f"{name}: exercises {sorted(words)} but {exercise_data.FILE} tags {sorted(facts)}")
    return tuple(Exercise(n, facts[n].minutes, facts[n].take_home) if n in facts else Exercise(n, 0)
                 for n in sorted(words))


def chapter_time(source: Path) -> ChapterTime:
    """The timing of one chapter, from its executed notebook beside `source` and its core path."""
    notebook = source.with_suffix(".ipynb")
    meta = execution_key.recorded(notebook) or {}
    if meta.get("profile") != PROFILE or not meta.get("seconds"):
        raise ValueError(f"{notebook.name} records no run on the {PROFILE} profile (found "
                         f"{meta.get('profile') or 'none'}): run python -m servelab notebooks --profile {PROFILE} "
                         f"{source.stem}")
    parsed = json.loads(notebook.read_text(encoding="utf-8"))
    return ChapterTime(source.stem, float(meta["seconds"]), core_path.measure(source).core_words,
                       exercises(parsed, notebook.name, source.stem))


def chapter_meta(chapter: str) -> dict:
    """The `servelab` metadata of a chapter's executed notebook ({} when it records none)."""
    return execution_key.recorded(chapters.NOTEBOOKS / f"{chapter}.ipynb") or {}


def title(chapter: str) -> str:
    """The chapter's title: the first heading of its executed notebook."""
    cells = json.loads((chapters.NOTEBOOKS / f"{chapter}.ipynb").read_text(encoding="utf-8"))["cells"]
    first = next(c for c in cells if c["cell_type"] == "markdown")
    return "".join(first["source"]).splitlines()[0].removeprefix("# ").strip()


def times() -> dict[str, ChapterTime]:
    return {s.stem: chapter_time(s) for s in chapters.sources()}


@dataclass(frozen=True)
class Slot:
    kind: str  # "welcome", "chapter", "break", "lunch", "closing"
    start: int  # minutes from the plan's start
    minutes: int
    chapter: ChapterTime | None = None
    exercises: tuple[int, ...] = ()

    @property
    def exercise_minutes(self) -> int:
        return sum(self.chapter.exercise(n).minutes for n in self.exercises) if self.chapter else 0


@dataclass(frozen=True)
class Agenda:
    spec: PlanSpec
    slots: tuple[Slot, ...]
    left_out: tuple[str, ...]  # chapters that did not fit

    def chosen(self, chapter: str) -> tuple[int, ...]:
        """The exercises of `chapter` this plan does (none when the chapter is left out)."""
        return next((s.exercises for s in self.slots if s.chapter and s.chapter.chapter == chapter), ())


def check_plan(name: str) -> PlanSpec:
    if name not in PLANS:
        raise ValueError(f"unknown workshop plan {name!r}; accepted: {', '.join(PLANS)}")
    return PLANS[name]


def _choose(timing: dict[str, ChapterTime], teaching: int) -> dict[str, list[int]]:
    missing = sorted(set(timing) - set(PRIORITY))
    if missing:
        raise ValueError(f"chapter(s) {', '.join(missing)} have no place in servelab.book.workshop.PRIORITY")
    chosen: dict[str, list[int]] = {}
    used = 0
    for name in (n for n in PRIORITY if n in timing):
        first = timing[name].by_length()[:1]
        cost = timing[name].base_minutes + sum(e.minutes for e in first)
        if used + cost <= teaching:
            chosen[name], used = [e.number for e in first], used + cost
    extra = sorted((e.minutes, PRIORITY.index(name), e.number, name) for name in chosen
                   for e in timing[name].by_length() if e.number not in chosen[name])
    for minutes, _, number, name in extra:
        if used + minutes <= teaching:
            chosen[name].append(number)
            used += minutes
    return chosen


def plan(name: str, timing: dict[str, ChapterTime] | None = None) -> Agenda:
    """The agenda of plan `name` (`PLANS`) from the chapters' timing (default: the committed notebooks)."""
    spec = check_plan(name)
    timing = timing if timing is not None else times()
    breaks = sum(BREAKS[kind] for kind, _ in spec.breaks)
    teaching = spec.minutes - WELCOME_MINUTES - MIN_CLOSING_MINUTES - breaks
    chosen = _choose(timing, teaching)
    order = sorted(chosen)  # the book's order
    lengths = [timing[n].base_minutes + sum(timing[n].exercise(e).minutes for e in chosen[n]) for n in order]
    after: dict[int, str] = {}  # chapter index -> the break that follows it
    ends = [sum(lengths[:i + 1]) for i in range(len(lengths) - 1)]
    for kind, fraction in spec.breaks:
        free = [i for i in range(len(ends)) if i not in after and all(i > j for j in after)]
        if not free:
            raise ValueError(f"plan {spec.name}: {len(order)} chapters leave no boundary for its {kind}")
        after[min(free, key=lambda i: abs(ends[i] - fraction * sum(lengths)))] = kind
    slots, clock = [Slot("welcome", 0, WELCOME_MINUTES)], WELCOME_MINUTES
    for i, (n, minutes) in enumerate(zip(order, lengths, strict=True)):
        slots.append(Slot("chapter", clock, minutes, timing[n], tuple(sorted(chosen[n]))))
        clock += minutes
        if i in after:
            slots.append(Slot(after[i], clock, BREAKS[after[i]]))
            clock += BREAKS[after[i]]
    slots.append(Slot("closing", clock, spec.minutes - clock))
    return Agenda(spec, tuple(slots), tuple(n for n in PRIORITY if n in timing and n not in chosen))
