"""Pictures of how an engine serves requests: prefill against decode, and static against continuous batching.

`draw_prefill_decode` is a schematic (no measurement): one request's tokens, forward pass by forward pass.
`draw_batching` draws what `servelab.sim.batching` computed: one row per request, waiting, prefill and
decode as bars, one panel per scheduler on a shared time axis.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pandas as pd
from matplotlib import pyplot as plt
from matplotlib.patches import Patch, Rectangle

from servelab.book.i18n import N_
from servelab.book.plots import axes, label
from servelab.integers import int_at_least
from servelab.sim.batching import Served

COLORS = {"prefill": "tab:orange", "decode": "tab:blue", "cached": "0.85", "waiting": "0.75"}


def draw_prefill_decode(prompt_tokens: int = 5, output_tokens: int = 4, ax: plt.Axes | None = None) -> plt.Axes:
    """One request as the engine runs it: a column per forward pass, a row per token position. The first pass
    (prefill) computes every prompt token at once and gives the first output token; each later pass (a decode
    step) computes one new token and reads the keys and values of all earlier tokens from the KV cache."""
    prompt = int_at_least("prompt_tokens", prompt_tokens, 1)
    out = int_at_least("output_tokens", output_tokens, 2)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    rows = prompt + out - 1  # the last output token is sampled but never fed back within this picture
    for step in range(out):
        computed = range(prompt) if step == 0 else [prompt + step - 1]
        for row in range(prompt + step):
            kind = "prefill" if step == 0 else "decode" if row in computed else "cached"
            ax.add_patch(Rectangle((step + 0.08, rows - row - 1 + 0.08), 0.84, 0.84, color=COLORS[kind]))
        ax.text(step + 0.5, rows + 0.25, f"→ {label('token')} {step + 1}", ha="center", fontsize=8)
    ax.set_xlim(0, out)
    ax.set_ylim(0, rows + 0.7)
    ax.set_xticks([s + 0.5 for s in range(out)],
                  [label("prefill")] + [f"{label('decode')} {s}" for s in range(1, out)])
    ax.set_yticks([rows - r - 0.5 for r in range(rows)],
                  [f"{label('prompt')} {r + 1}" for r in range(prompt)]
                  + [f"{label('output')} {r + 1}" for r in range(out - 1)], fontsize=8)
    ax.set_title(label("One request, forward pass by forward pass"))
    ax.set_xlabel(label("forward pass (one engine step)"))
    ax.grid(False)
    ax.legend(handles=[Patch(color=COLORS["prefill"], label=label("computed: the whole prompt in one pass")),
                       Patch(color=COLORS["decode"], label=label("computed: one new token")),
                       Patch(color=COLORS["cached"], label=label("read from the KV cache, not recomputed"))],
              loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, fontsize=8)
    return ax


def _natural(name: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def draw_batching(runs: Mapping[str, Sequence[Served]], axs: Sequence[plt.Axes] | None = None) -> list[plt.Axes]:
    """One panel per scheduler (`runs`: its title -> what the simulator served), the same requests in the same
    rows on a shared time axis: grey while a request waits, orange for its prefill step, blue while it decodes."""
    if not runs or any(not served for served in runs.values()):
        raise ValueError("draw_batching needs at least one scheduler, each with at least one served request")
    names = [{s.request.name for s in served} for served in runs.values()]
    if any(n != names[0] for n in names):
        raise ValueError("every panel must serve the same requests")
    order = sorted(names[0], key=_natural, reverse=True)  # first request on top
    if axs is None:
        _, axs = plt.subplots(len(runs), 1, figsize=(7, 1.6 + 1.9 * len(runs)), sharex=True, squeeze=False)
        axs = list(axs[:, 0])
    for ax, (title, served) in zip(axs, runs.items(), strict=True):
        axes(title, "", "request", ax=ax)
        for s in served:
            y = order.index(s.request.name)
            for kind, start, end in (("waiting", s.request.arrival_s, s.admitted_s),
                                     ("prefill", s.admitted_s, s.first_token_s),
                                     ("decode", s.first_token_s, s.finished_s)):
                if end > start:
                    ax.barh(y, end - start, left=start, height=0.7, color=COLORS[kind])
        ax.set_yticks(range(len(order)), order, fontsize=7)
        ax.grid(axis="y", visible=False)
    axs[-1].set_xlabel(label("time (s)"))
    kinds = (N_("waiting"), N_("prefill"), N_("decode"))
    axs[-1].legend(handles=[Patch(color=COLORS[k], label=label(k)) for k in kinds],
                   loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=3, fontsize=8)
    return list(axs)


def engine_panels(table: pd.DataFrame, x: str, panels: Sequence[tuple[str, str, str]], xlabel: str
                  ) -> list[plt.Axes]:
    """Panels side by side, one line per engine of `table` in each: `panels` holds (column, title, y label);
    every y axis starts at 0."""
    if not panels:
        raise ValueError("engine_panels needs at least one (column, title, y label)")
    missing = [c for c in [x, "engine", *(p[0] for p in panels)] if c not in table]
    if missing:
        raise ValueError(f"the table has no column {', '.join(missing)}; it has {', '.join(table.columns)}")
    _, axs = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    axs = list(axs[0])
    for ax, (column, title, ylabel) in zip(axs, panels, strict=True):
        for engine, rows in table.groupby("engine", sort=False):
            ax.plot(rows[x], rows[column], marker="o", label=engine)
        axes(title, xlabel, ylabel, ax=ax)
        ax.set_ylim(bottom=0)
        ax.legend()
    return axs
