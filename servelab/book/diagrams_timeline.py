"""Step timelines: which request occupies each step of an engine, and with how many tokens.

One row per request, time left to right. Each step a request takes part in is a box spanning the
step's start to its end: a prefill chunk (labelled with its tokens when the box is wide enough) or a
decode (one token). A stream's row shows its stalls as long boxes (hatched when over ``STALL_FACTOR`` times the median
decode step) or as gaps; rows are in the same (natural) order in every panel; the highlighted
request's row shows how its prompt was cut. Input: a frame with the columns of
``servelab.sim.chunked_prefill.simulate.STEP_COLUMNS`` (step, start_s, end_s, request, kind, tokens),
simulated or reconstructed from a measurement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd
from matplotlib import pyplot as plt
from matplotlib.patches import Patch

from servelab.book.plots import axes, label

COLORS = {"prefill": "tab:orange", "decode": "tab:blue"}
REQUIRED = ("step", "start_s", "end_s", "request", "kind", "tokens")
STALL_FACTOR = 2.0  # a decode box longer than this times the median decode step is hatched: a stall
MIN_LABEL_WIDTH = 0.06  # fraction of the window a prefill box needs before its token count is written in it


def _natural(name: str) -> list:
    """Sort key that puts "stream 2" before "stream 10"."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _checked(steps: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in REQUIRED if c not in steps]
    if missing:
        raise ValueError(f"a step timeline needs the columns {', '.join(REQUIRED)}; missing: {', '.join(missing)}")
    unknown = set(steps["kind"]) - set(COLORS)
    if unknown:
        raise ValueError(f"unknown step kinds {sorted(unknown)}; accepted: {', '.join(COLORS)}")
    return steps


def draw_timeline(steps: pd.DataFrame, *, highlight: str | None = None, window: tuple[float, float] | None = None,
                  title: str = "Who runs in each step", ax: plt.Axes | None = None, legend: bool = True,
                  xlabel: str = "time (s)") -> plt.Axes:
    """Draw one run's timeline on ``ax`` (a new one if None); ``highlight`` goes on the top row.

    ``window`` (seconds) keeps the steps that overlap it and sets the x limits.
    """
    steps = _checked(steps)
    if window is not None:
        steps = steps[(steps.end_s > window[0]) & (steps.start_s < window[1])]
    if steps.empty:
        raise ValueError(f"no step in the window {window}")
    lo, hi = window if window is not None else (steps.start_s.min(), steps.end_s.max())
    order = sorted((r for r in set(steps["request"]) if r != highlight), key=_natural)  # same order in every panel
    if highlight is not None and highlight in set(steps["request"]):
        order.append(highlight)  # last drawn = top row
    rows = {r: i for i, r in enumerate(order)}
    ax = axes(title, xlabel, "request", ax=ax)
    decode_s = steps.loc[steps.kind == "decode", "end_s"] - steps.loc[steps.kind == "decode", "start_s"]
    stall_s = STALL_FACTOR * float(decode_s.median()) if len(decode_s) else float("inf")
    for kind, color in COLORS.items():
        part = steps[steps.kind == kind]
        long = (part.end_s - part.start_s > stall_s) if kind == "decode" else pd.Series(False, index=part.index)
        for sel, hatch in ((~long, None), (long, "////")):
            ax.barh([rows[r] for r in part.request[sel]], (part.end_s - part.start_s)[sel], left=part.start_s[sel],
                    height=0.7, color=color, edgecolor="white", linewidth=0.5, hatch=hatch)
    for row in steps[steps.kind == "prefill"].itertuples():
        start, end = max(row.start_s, lo), min(row.end_s, hi)  # only the visible part, away from the y ticks
        if end - start >= MIN_LABEL_WIDTH * (hi - lo):
            ax.text((start + end) / 2, rows[row.request], str(row.tokens), ha="center", va="center",
                    fontsize=7, color="black")
    ax.set_yticks(range(len(order)), [label("long prompt") if r == highlight else r for r in order])
    ax.set_xlim(lo, hi)
    ax.grid(axis="y", visible=False)
    if legend:
        ax.legend(handles=[Patch(color=c, label=label(k)) for k, c in COLORS.items()], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return ax


def timeline_comparison(runs: Mapping[str, pd.DataFrame], *, highlight: str | None = None,
                        window: tuple[float, float] | None = None, xlabel: str = "time (s)") -> plt.Figure:
    """One timeline per run, stacked, on a shared time axis; ``runs`` maps a panel title to its steps."""
    if not runs:
        raise ValueError("runs is empty; give at least one title -> steps frame")
    fig, panels = plt.subplots(len(runs), 1, sharex=True, squeeze=False,
                               figsize=(7, 1.2 + 0.25 * sum(s["request"].nunique() for s in runs.values())))
    for ax, (title, steps) in zip(panels[:, 0], runs.items(), strict=True):
        draw_timeline(steps, highlight=highlight, window=window, title=title, ax=ax, legend=ax is panels[0, 0],
                      xlabel=xlabel)
        if ax is not panels[-1, 0]:
            ax.set_xlabel("")
    fig.tight_layout()
    return fig
