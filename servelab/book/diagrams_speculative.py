"""Speculative decoding as a token strip: one row per verification, what happened to each drafted token.

A verification of k drafted tokens keeps them up to the first rejection and adds one token of the
target's own: at the rejected position a correction, or after k kept drafts a bonus token. Drafts
after a rejection were proposed but never count. Input: the accepted drafts of each verification
(0..k), as ``servelab.sim.speculative.sample_accepted`` draws them or an engine's counters give them.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib import pyplot as plt
from matplotlib.patches import Patch, Rectangle

from servelab.book.i18n import N_
from servelab.book.plots import label

KINDS = {"kept": ("tab:green", N_("draft kept")),
         "correction": ("tab:orange", N_("draft rejected: the target's token")),
         "discarded": ("0.85", N_("drafted after a rejection, discarded")),
         "bonus": ("tab:blue", N_("bonus token"))}
CELL_GID = "token-cell"  # the gid of every drawn token, so a test can count them


def strip_cells(accepted: Sequence[int], k: int) -> list[list[str]]:
    """Each verification's k + 1 positions as kinds (``KINDS`` keys), '' where nothing was drafted or emitted."""
    rows = []
    for a in accepted:
        if not 0 <= a <= k:
            raise ValueError(f"a verification of {k} drafts keeps 0 to {k} of them, got {a}")
        cells = ["kept"] * a + (["correction"] + ["discarded"] * (k - a - 1) + [""] if a < k else ["bonus"])
        rows.append(cells)
    return rows


def draw_token_strip(accepted: Sequence[int], k: int, *, title: str = "", ax: plt.Axes | None = None) -> plt.Axes:
    """Draw one row per verification of k drafts, ``accepted[i]`` of them kept; on the right, the tokens it emitted."""
    rows = strip_cells(accepted, k)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 0.45 * len(rows) + 1.2))
    for i, cells in enumerate(rows):
        y = len(rows) - 1 - i
        for j, kind in enumerate(cells):
            if kind:
                ax.add_patch(Rectangle((j, y), 0.92, 0.8, facecolor=KINDS[kind][0], edgecolor="0.3", lw=0.6,
                                       gid=CELL_GID))
        ax.text(k + 1.3, y + 0.4, f"+{accepted[i] + 1}", va="center", fontsize=9)
    ax.set_xlim(-0.2, k + 2.2)
    ax.set_ylim(-0.3, len(rows) + 0.2)
    ax.set_xticks([j + 0.46 for j in range(k + 1)], [*(str(j + 1) for j in range(k)), "k+1"])
    ax.set_yticks([len(rows) - 1 - i + 0.4 for i in range(len(rows))], [str(i + 1) for i in range(len(rows))])
    ax.set_xlabel(label("position in the verification (k drafts, then one more)"))
    ax.set_ylabel(label("verification"))
    ax.text(k + 1.3, len(rows) + 0.05, label("emitted"), fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(label(title))
    ax.legend(handles=[Patch(facecolor=c, edgecolor="0.3", label=label(text)) for c, text in KINDS.values()],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax
