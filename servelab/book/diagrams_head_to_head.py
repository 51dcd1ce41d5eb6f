"""The head-to-head sweeps as figures: TTFT and ITL (p50 line, p90 band, largest value) and a rate, per engine.

One figure per sweep: requests in flight (closed loop) or requests per second (open loop) on the x axis,
one line per engine, every point the median of the rounds. ``caveat`` writes a sentence across the top of
the figure, for what the figure must not be read as (on the cpu profile: an engine ranking).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib import pyplot as plt

from servelab.book.i18n import N_
from servelab.book.plots import axes, label

COLORS = {"vllm": "tab:blue", "sglang": "tab:orange"}
LATENCY = {"ttft": N_("Time to first token"), "itl": N_("Inter-token latency")}


def draw_sweep(rows: pd.DataFrame, x: str, rate: tuple[str, str, str], xlabel: str, *,
               sent: Sequence[float] | None = None, caveat: str | None = None) -> plt.Figure:
    """Three panels over ``x``: p50/p90/max TTFT and ITL, and ``rate`` = (column, title, unit label).

    ``rows`` has one row per engine and run, with ``p50_/p90_/max_{ttft,itl}_ms``; ``sent`` draws the rate
    sent as a dotted line on the third panel.
    """
    column, title, unit = rate
    fig, panels = plt.subplots(1, 3, figsize=(12, 3.9 if caveat else 3.6), constrained_layout=True)
    for engine, group in rows.groupby("engine", sort=False):
        group = group.sort_values(x)
        color = COLORS.get(engine)
        for ax, metric in zip(panels[:2], LATENCY, strict=True):
            ax.plot(group[x], group[f"p50_{metric}_ms"], "-o", color=color, label=engine)
            ax.fill_between(group[x], group[f"p50_{metric}_ms"], group[f"p90_{metric}_ms"], color=color, alpha=0.2)
            ax.plot(group[x], group[f"max_{metric}_ms"], "x", color=color)
        panels[2].plot(group[x], group[column], "-o", color=color, label=engine)
    if sent is not None:
        panels[2].plot(sent, sent, ":", color="grey", label=label("sent"))
    for ax, metric in zip(panels[:2], LATENCY, strict=True):
        axes(LATENCY[metric], xlabel, "ms (p50 line, p90 band, largest x)", ax=ax)
    axes(title, xlabel, unit, ax=panels[2])
    ticks = sorted(rows[x].dropna().unique())
    for ax in panels:
        ax.set_ylim(bottom=0)
        ax.set_xticks(ticks)
    panels[2].legend()
    if caveat:
        fig.suptitle(label(caveat), fontsize=9, color="tab:red")
    return fig
