"""The book page book/workshop.md: three workshop agendas and instructor notes per chapter, all computed.

`python -m servelab.book.workshop_page` writes it; `--check` fails (one line, with the command) when it is out of
date; `--plan NAME` prints one agenda. Lengths come from `workshop` (the executed notebooks), measured values from
`workshop_results` (results/), the GPU estimates from `launch_plan`, the prose from servelab/data/workshop.toml.
Numbers sit in table cells of their own, so a new run changes no translated sentence (a cell without words needs
no translator: `catalogs.verbatim`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from servelab.book import launch_plan, workshop, workshop_results
from servelab.book.workshop import Agenda, ChapterTime
from servelab.machine import datafiles, profiles
from servelab.machine.paths import REPO

PAGE = REPO / "book" / "workshop.md"
DATA_FILE = "workshop.toml"
COMMAND = "python -m servelab.book.workshop_page"
SLOT_NAMES = {"welcome": "Welcome: the machines, the banner, where results go", "break": "Break", "lunch": "Lunch",
              "closing": "Questions and wrap-up"}
NO_RUN = "no run yet"


def _link(chapter: str) -> str:
    return f"[](../notebooks/{chapter}.ipynb)"


def _clock(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}"


def _gpu_profiles() -> list[str]:
    return [n for n in profiles.names() if not profiles.load(n).is_cpu]


def _hardware(timing: dict[str, ChapterTime]) -> dict[str, Any]:
    """Where the recorded runs ran: the provenance of a result the first chapter saved."""
    meta = workshop.chapter_meta(next(iter(timing)))
    saved = next((s for s in meta.get("saves", []) if s.endswith(".meta.json")), None)
    return json.loads((workshop_results.RESULTS / saved.removeprefix("results/")).read_text()) if saved else {}


def timing_section(timing: dict[str, ChapterTime], gpu: dict[str, dict[str, launch_plan.ChapterPlan]]) -> list[str]:
    where = _hardware(timing)
    out = ["## How long each chapter takes", "",
           "A chapter's slot is the time its notebook takes to run, the time to read its core path (the prose "
           "outside the \"How we know\" dropdowns) and the time of the exercises done in it, each rounded up to "
           "whole minutes. The assumptions:", "",
           "| assumption | value |", "| --- | --- |",
           f"| run time: each chapter's last recorded run, on the profile | `{workshop.PROFILE}` |",
           f"| the machine of those runs: processor | {where.get('cpu', '?')} |",
           f"| the machine of those runs: CPU cores | {where.get('cpu_cores', '?')} |",
           f"| reading the core path (words a minute) | {workshop.READING_WPM} |",
           "| an exercise | the minutes it is tagged with in the chapter; a take-home exercise is in no plan |", ""]
    head = ["chapter", "run on cpu", "reading", "exercises", "each exercise (minutes)",
            *[f"{p}: engine starts" for p in gpu]]
    out += ["All times in minutes.", "", "| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for name, t in timing.items():
        gpu_cells = [f"{c.minutes:.0f}" if c.recorded else f"≥ {c.minutes:.0f}"
                     for c in (plans[name] for plans in gpu.values())]
        out.append(f"| {_link(name)} | {t.run_minutes} | {t.read_minutes} | {len(t.exercises)} | "
                   f"{', '.join(str(e.minutes) for e in t.exercises)} | {' | '.join(gpu_cells)} |")
    recorded = any(c.recorded for plans in gpu.values() for c in plans.values())
    out += ["", ("The times and agendas on this page are the cpu profile's. No chapter has a recorded run on a GPU "
                 "profile yet: the GPU columns are `python -m servelab plan`'s estimate of the engine starts alone "
                 "(loading the weights, capturing CUDA graphs), so a chapter's own work comes on top (≥). Rehearse "
                 "on the room's hardware with `python -m servelab notebooks --profile P` before planning a GPU room "
                 "from them; see {doc}`cloud_gpu`.") if not recorded else
            ("The times and agendas on this page are the cpu profile's. A GPU column without ≥ is the chapter's "
             "recorded run on that profile; one with ≥ is `python -m servelab plan`'s estimate of the engine starts "
             "alone, so a chapter's own work comes on top. See {doc}`cloud_gpu`."), ""]
    return out


def agenda_table(agenda: Agenda) -> list[str]:
    out = ["| start | slot | run | reading | exercises | exercise time | minutes |",
           "| ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    for s in agenda.slots:
        if s.chapter is None:
            out.append(f"| {_clock(s.start)} | {SLOT_NAMES[s.kind]} | | | | | {s.minutes} |")
            continue
        ex = ", ".join(map(str, s.exercises))
        out.append(f"| {_clock(s.start)} | {_link(s.chapter.chapter)} | {s.chapter.run_minutes} | "
                   f"{s.chapter.read_minutes} | {ex} | {s.exercise_minutes if ex else ''} | {s.minutes} |")
    out.append(f"| | **total** | | | | | **{sum(s.minutes for s in agenda.slots)}** |")
    if agenda.left_out:
        out += ["", "Not in this plan, for lack of time:", "", *[f"- {_link(n)}" for n in agenda.left_out]]
    return out


def agendas_section(agendas: list[Agenda]) -> list[str]:
    out = ["## Three agendas", "",
           f"Each plan opens with a welcome of {workshop.WELCOME_MINUTES} minutes and ends with questions of at least "
           f"{workshop.MIN_CLOSING_MINUTES}; a break takes {workshop.BREAKS['break']} minutes and lunch "
           f"{workshop.BREAKS['lunch']}. In between it takes the chapters in the order below, "
           "each with its shortest exercise, as long as they fit; then the remaining exercises of those chapters, "
           "shortest first; the minutes left over go to the closing questions. The chapters run in the book's order, "
           "and the breaks fall at the chapter boundaries nearest a quarter, half or three quarters of the teaching "
           "time. The exercise columns name the exercises by their number in the chapter.", "",
           *[f"{i}. {_link(n)}" for i, n in enumerate(workshop.PRIORITY, 1)], ""]
    for agenda in agendas:
        out += [f"### {agenda.spec.title} ({agenda.spec.minutes} minutes)", "", *agenda_table(agenda), ""]
    return out


def notes_section(timing: dict[str, ChapterTime], agendas: list[Agenda], notes: dict[str, Any]) -> list[str]:
    gpus = _gpu_profiles()
    out = ["## Instructor notes", "",
           "For each chapter: the message to land; what participants should see, as the range the saved runs show "
           "on each profile (\"no run yet\" where a profile has none); what usually goes wrong and the fix; two "
           "questions for discussion; and which exercises each plan has time for.", "",
           "### Any chapter", ""]
    out += [f"- **{t['problem']}.** {t['fix']}" for t in notes["trouble"]]
    for name, t in timing.items():
        note = notes["chapters"].get(name)
        if note is None:
            raise ValueError(f"{name} has no notes in servelab/data/{DATA_FILE}")
        out += ["", f"### {workshop.title(name)}", "", f"[Open the chapter](../notebooks/{name}.ipynb)", "",
                f"**Message.** {note['message']}", "",
                "| what to look for | cpu | " + " | ".join(gpus) + " | saved in |",
                "| --- | ---: |" + " ---: |" * len(gpus) + " --- |"]
        for obs in workshop_results.observations(name):
            cells = [obs.seen(p) or NO_RUN for p in ("cpu", *gpus)]
            out.append(f"| {obs.label} | {' | '.join(cells)} | `results/<profile>/{obs.file}` |")
        out += ["", "What usually goes wrong:", ""]
        out += [f"- **{x['problem']}.** {x['fix']}" for x in note["trouble"]]
        out += ["", "For discussion:", "", *[f"{i}. {q}" for i, q in enumerate(note["questions"], 1)], ""]
        if not t.exercises:
            out.append("This chapter has no exercises: in every plan it is run and read.")
            continue
        out += ["| exercise | minutes | " + " | ".join(a.spec.title for a in agendas) + " |",
                "| ---: | ---: |" + " :---: |" * len(agendas)]
        out += [f"| {e.number} | {e.minutes} | " + " | ".join("✓" if e.number in a.chosen(name) else ""
                                                            for a in agendas) + " |" for e in t.by_length()]
    return out


def render() -> str:
    """The Markdown page book/workshop.md, computed from the notebooks, results/ and the notes file."""
    timing = workshop.times()
    notes = datafiles.load(DATA_FILE)
    agendas = [workshop.plan(name, timing) for name in workshop.PLANS]
    gpu = {p: {c.chapter: c for c in launch_plan.build(p, check=False).chapters} for p in _gpu_profiles()}
    out = ["# Running a workshop", "",
           f"Generated from the executed notebooks, `results/` and `servelab/data/{DATA_FILE}` by `{COMMAND}`; do not "
           "edit this page by hand.", "",
           "This page is for instructors who teach the book in a room: three agendas and notes for each chapter. "
           "Every length and every measured value on it is computed from the chapters' last recorded runs and the "
           "results they saved, so when a chapter changes the page is regenerated from it.", "",
           "## Before the day", "",
           "- Have every participant run `./lab.sh` (or `python -m servelab setup`) the day before: building the "
           "engine environments is the slow part of setup, and the times below assume it is done. {doc}`running` "
           "has the details.",
           "- Collect a pre-flight of every machine: `./doctor.sh --json` prints one result per check, and its exit "
           "status is 1 on any problem; `--lang ja` (or `ko`, `de`, `es`) words it in the participant's language.",
           "- Hand out the notebooks in the room's language: `.venv/bin/python -m servelab translations notebooks ja` "
           "writes them to `notebooks/ja/`. Japanese and Korean plot labels need a CJK font (`fonts-noto-cjk`).",
           "- On rented GPUs, check the plan first (`python -m servelab plan --profile gpu-24g`) and read "
           "{doc}`cloud_gpu`.", ""]
    out += timing_section(timing, gpu) + agendas_section(agendas) + notes_section(timing, agendas, notes)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if book/workshop.md is not up to date")
    parser.add_argument("--plan", help=f"print one agenda: {', '.join(workshop.PLANS)}")
    args = parser.parse_args(argv)
    try:
        if args.plan:
            print("\n".join(agenda_table(workshop.plan(args.plan))))
            return 0
        page = render()
    except ValueError as err:
        print(f"{COMMAND}: error: {err}", file=sys.stderr)
        return 2
    if args.check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(REPO)} is out of date; regenerate it: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(REPO)}: {', '.join(workshop.PLANS)}, notes for every chapter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
