"""Chapter 08's exercises: the cases each check tries, with the answers the guide's own rules give.

Each function returns `exercise_check` cases: a label, the arguments the reader's answer is called with, and what
it should return, from this run's saved results (`selection_guide.timing_ratios`, chapter 06's summary) and from
fixed made-up values that make every possible answer occur whatever the run measured, so that a stub that always
gives one answer, or ignores the tie, fails.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from servelab.book import selection_guide as sg
from servelab.measure.speculative import load as spec_load

Cases = dict[str, tuple[tuple, str]]


# made-up ratios the exercises' checks try besides this run's: between a 5% and a 10% tie, on both sides of 1
FIXED_LEAN_PROBES = ((0.93, True, 0.05), (0.93, True, 0.10), (0.905, True, 0.10), (0.8, False, 0.10),
                     (1.25, True, 0.10), (1.07, False, 0.05), (1.03, False, 0.05))
FIXED_SPEEDUP_PROBES = ((0.9, 1.1), (1.01, 1.2), (0.8, 0.99), (1.0, 1.2), (0.8, 1.0))
# made-up rows (median, lowest round, highest round, lower is better, tie): the tie decides, whatever the run measured
FIXED_ROW_PROBES = ((0.95, 0.93, 0.97, True, 0.10), (0.93, 0.91, 0.95, True, 0.05), (1.08, 1.06, 1.10, False, 0.05),
                    (0.93, 0.90, 0.96, False, 0.05), (0.8, 0.7, 1.05, True, 0.10))


def lean_cases(ratios: pd.DataFrame, ties: tuple[float, ...] = (sg.TIE, sg.TIE / 2)) -> Cases:
    """Exercise 1: the arguments (ratio, lower_is_better, tie) and the engine the ratio leans to: "vLLM", "SGLang"
    or "either". For each of `ratios`' rows (`timing_ratios`): its median round at each tie, the same
    ratio inverted (SGLang's value over vLLM's), and a ratio half a tie from even."""
    cases: Cases = {}
    for _, row in ratios.iterrows():
        lower = bool(row["lower is better"])
        probes = [(f"tie {tie:.0%}", float(row["median"]), tie) for tie in ties]
        probes += [("inverted", 1 / float(row["median"]), ties[0]), ("near even", 1 + ties[0] / 2, ties[0])]
        for what, ratio, tie in probes:
            cases[f"{row.situation}, {what}"] = ((ratio, lower, tie), sg.lean(ratio, lower, tie).split(" ")[0])
    for ratio, lower, tie in FIXED_LEAN_PROBES:  # whatever this run measured, every answer and both ties occur
        cases[f"ratio {ratio}, {'lower' if lower else 'higher'} is better, tie {tie:.0%}"] = (
            (ratio, lower, tie), sg.lean(ratio, lower, tie).split(" ")[0])
    return cases


def favoured_cases(ratios: pd.DataFrame, ties: tuple[float, ...] = (sg.TIE, sg.TIE / 2)) -> Cases:
    """Exercise 3: the arguments (median, lowest round, highest round, lower_is_better, tie) and the engine
    `lean_over_rounds` favours, as a GPU profile reads it: "vLLM", "SGLang" or "either". For each of `ratios`' rows
    (`timing_ratios`): its rounds at each tie, and the same rounds inverted (SGLang's value over vLLM's); then a row
    made-up rows where the tie decides, and one whose median clears the tie while a round favours the other engine."""
    def expected(median: float, low: float, high: float, lower: bool, tie: float) -> str:
        ahead = [v < 1 if lower else v > 1 for v in (low, high)]
        stats = pd.Series({"median": median, "favoured in every round":
                           "vllm" if all(ahead) else "sglang" if not any(ahead) else ""})
        return sg.lean_over_rounds(stats, lower, tie).split(" ")[0]

    cases: Cases = {}
    for _, row in ratios.iterrows():
        m, low, high, lower = (float(row["median"]), float(row["lowest round"]), float(row["highest round"]),
                               bool(row["lower is better"]))
        probes = [(f"tie {tie:.0%}", (m, low, high, lower, tie)) for tie in ties]
        probes.append(("inverted", (1 / m, 1 / high, 1 / low, lower, ties[0])))
        for what, args in probes:
            cases[f"{row.situation}, {what}"] = (args, expected(*args))
    for args in FIXED_ROW_PROBES:  # the last: a median beyond the tie, one round the other way
        cases["made-up row " + ", ".join(map(str, args))] = (args, expected(*args))
    return cases


def speculation_cases(folder: Path) -> Cases:
    """Exercise 2: for each method and load in chapter 06's summary, its lowest and highest round's speedup and
    what the guide says of it: "helps", "hurts" or "not resolved"."""
    cases: Cases = {}
    summary = sg.saved_table(folder, "speculative_summary", ("method",))
    for at in ([] if summary is None else
               [m.group(1) for c in summary.columns if (m := sg.SPEEDUP_COLUMN.match(str(c)))]):
        for _, row in summary.dropna(subset=[f"lowest round, {at}", f"highest round, {at}"]).iterrows():
            low, high = float(row[f"lowest round, {at}"]), float(row[f"highest round, {at}"])
            said = spec_load.spread_verdict(low, high, 1)
            cases[f"{row.method}, {at}"] = ((low, high), sg.SPEEDUP_WORDS.get(said, "not resolved"))
    for low, high in FIXED_SPEEDUP_PROBES:  # whatever this run measured: every answer, and rounds at exactly 1
        said = spec_load.spread_verdict(low, high, 1)
        cases[f"rounds from {low} to {high}"] = ((low, high), sg.SPEEDUP_WORDS.get(said, "not resolved"))
    return cases
