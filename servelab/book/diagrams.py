"""Pictures drawn from recorded state: block tables of a `BlockAllocator`, and a KV-pressure run.

`draw_block_tables` draws every block-table entry (sequence, logical block) on the left and the pool of physical blocks
on the right, an arrow for every block-table entry, each physical block with its reference count and
how many of its slots hold tokens (fill/size), shared blocks in one colour, and the copies made by copy-on-write
as dashed arrows from the source block to its copy. Everything comes from the allocator's public
queries, so the picture cannot disagree with the state it shows.

`plot_pressure` and `plot_request_lanes` draw a `servelab.measure.paging.pressure.PressureRun`: the
engine's gauges over time with each eviction marked where the evicted request's own stream paused,
and one lane per request (queued, generating, paused).
"""

from __future__ import annotations

import pandas as pd
from matplotlib import pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Rectangle

from servelab.book.i18n import N_
from servelab.book.plots import axes, label
from servelab.measure.paging.pressure import PressureRun, gauges_catch_up_s
from servelab.sim.paging import BlockAllocator

FREE, PRIVATE, SHARED, LOGICAL = "#f2f2f2", "#9ecae1", "#fdae6b", "#ffffff"


def draw_block_tables(alloc: BlockAllocator, title: str = "", ax: plt.Axes | None = None) -> plt.Axes:
    """Draw `alloc`'s block tables (logical -> physical), refcounts, fill and copy-on-write copies."""
    if ax is None:
        rows = max(alloc.num_blocks, sum(len(alloc.block_table(s)) for s in alloc.sequences()), 1)
        _, ax = plt.subplots(figsize=(8, max(2.5, 0.45 * rows + 1)))
    bs = alloc.block_size
    phys_x, width, height = 6.0, 2.0, 0.8
    phys_y = {b: alloc.num_blocks - 1 - b for b in range(alloc.num_blocks)}  # block 0 at the top
    fill = _fill(alloc)
    for b, y in phys_y.items():
        rc = alloc.refcount(b)
        colour = FREE if rc == 0 else SHARED if rc > 1 else PRIVATE
        ax.add_patch(Rectangle((phys_x, y), width, height, facecolor=colour, edgecolor="black"))
        text = f"#{b}  rc={rc}  {fill.get(b, 0)}/{bs}" if rc else f"#{b}  {label('free')}"
        ax.text(phys_x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=8)
    entries = [(seq, i, b) for seq in alloc.sequences() for i, b in enumerate(alloc.block_table(seq))]
    top = max(alloc.num_blocks, len(entries)) - 1
    for k, (seq, i, b) in enumerate(entries):
        y = top - k
        ax.add_patch(Rectangle((0, y), 1.6, height, facecolor=LOGICAL, edgecolor="black"))
        ax.text(0.8, y + height / 2, f"{seq} · {i}", ha="center", va="center", fontsize=8)
        ax.add_patch(FancyArrowPatch((1.6, y + height / 2), (phys_x, phys_y[b] + height / 2),
                                     arrowstyle="->", mutation_scale=10, color="grey", lw=0.8))
    row = top - len(entries)
    for cow in alloc.copies:
        ax.add_patch(FancyArrowPatch((phys_x + width, phys_y[cow.src] + height / 2),
                                     (phys_x + width, phys_y[cow.dst] + height / 2), connectionstyle="arc3,rad=-0.5",
                                     arrowstyle="->", mutation_scale=10, color="tab:red", lw=1.2, linestyle="--"))
    head = max(alloc.num_blocks, len(entries)) + 0.2
    ax.text(phys_x + width / 2, head, label("physical blocks"), ha="center", fontsize=9)
    ax.text(0.8, head, label("block tables: sequence · logical block"), ha="center", fontsize=9)
    ax.set_xlim(-0.5, phys_x + width + 3.2)
    ax.set_ylim(min(row, -0.5), head + 0.6)
    ax.axis("off")
    if title:
        ax.set_title(label(title))
    handles = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black") for c in (PRIVATE, SHARED, FREE)]
    handles.append(Line2D([0, 1], [0, 0], color="tab:red", linestyle="--"))
    ax.legend(handles, [label("one owner"), label("shared (rc > 1)"), label("free"), label("copy-on-write")],
              loc="center right", fontsize=8, frameon=False)
    return ax


def draw_contiguous_vs_blocks(alloc: BlockAllocator, seq: str, max_len: int, ax: plt.Axes | None = None) -> plt.Axes:
    """One sequence stored two ways: a contiguous slab of `max_len` slots (top), and `alloc`'s pool of blocks (bottom).

    The slab holds the sequence's tokens and reserves the rest of `max_len`; in the pool, the sequence's blocks
    (wherever the allocator put them), the other sequences' blocks and the free ones, slot by slot.
    """
    if seq not in alloc.sequences():
        raise ValueError(f"{seq!r} is not a sequence of this allocator; it holds {alloc.sequences()}")
    n, bs = alloc.num_tokens(seq), alloc.block_size
    if max_len < n:
        raise ValueError(f"max_len {max_len} is shorter than {seq!r}'s {n} tokens; give max_len >= {n}")
    pool = alloc.num_blocks * bs
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 2.8))
    mine, fill = alloc.block_table(seq), _fill(alloc)
    for i in range(max_len):
        used = i < n
        ax.add_patch(Rectangle((i, 2.0), 1, 0.8, facecolor=PRIVATE if used else "white", edgecolor="0.4", lw=0.6,
                               hatch=None if used else "///"))
    ax.text(-0.5, 2.4, label("contiguous"), ha="right", va="center", fontsize=9)
    ax.text(0, 3.0, f"{label('reserved for the longest answer')}: {max_len}, {label('written')}: {n}", fontsize=8)
    for b in range(alloc.num_blocks):
        filled = fill.get(b, 0)
        colour = PRIVATE if b in mine else "0.75" if alloc.refcount(b) else FREE
        for k in range(bs):
            ax.add_patch(Rectangle((b * bs + k, 0.0), 1, 0.8, facecolor=colour if k < filled else FREE,
                                   edgecolor="0.4", lw=0.6, hatch="///" if b in mine and k >= filled else None))
        ax.add_patch(Rectangle((b * bs, 0.0), bs, 0.8, fill=False, edgecolor="black", lw=1.4))
        if b in mine:
            ax.text(b * bs + bs / 2, -0.35, f"{seq} · {mine.index(b)}", ha="center", va="center", fontsize=8)
    ax.text(-0.5, 0.4, label("blocks"), ha="right", va="center", fontsize=9)
    ax.text(0, 1.0, f"{label('blocks of')} {bs}: {len(mine)} {label('blocks')}, {len(mine) * bs - n} "
                    f"{label('empty slots')}", fontsize=8)
    ax.set_xlim(-0.5, max(max_len, pool) + 0.5)
    ax.set_ylim(-0.7, 3.4)
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="0.4", hatch=h)
               for c, h in ((PRIVATE, None), ("white", "///"), ("0.75", None), (FREE, None))]
    ax.legend(handles, [label("a token of") + f" {seq}", label("reserved, not written"),
                        label("another sequence"), label("free")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax


def _fill(alloc: BlockAllocator) -> dict[int, int]:
    """Tokens written into each used physical block, from the block tables and sequence lengths."""
    bs, out = alloc.block_size, {}
    for seq in alloc.sequences():
        table, n = alloc.block_table(seq), alloc.num_tokens(seq)
        for i, b in enumerate(table):
            out[b] = min(bs, n - i * bs)
    return out


# Whole labels per engine, so that a translation can order its words (servelab/book/code_messages.py).
COUNTER_SAYS = {"vllm": N_("preempted, as the engine's counter says"),
                "sglang": N_("retracted, as the engine's counter says")}
PAUSED = {"vllm": N_("a request preempted (its stream paused)"),
          "sglang": N_("a request retracted (its stream paused)")}
WAITING = {"vllm": N_("preempted, waiting"), "sglang": N_("retracted, waiting")}


def plot_pressure(run: PressureRun, pauses: pd.DataFrame, title: str) -> plt.Figure:
    """KV used, running and waiting requests over time; evictions marked when they happened and as counted."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    tl = run.timeline
    axes(title, "", "KV cache used (%)", ax=top)
    top.step(tl.t_s, 100 * tl.kv_used, where="post")
    top.set_ylim(0, 105)
    axes("", "time since the requests were sent (s)", "requests", ax=bottom)
    bottom.step(tl.t_s, tl.running, where="post", label=label("running"))
    bottom.step(tl.t_s, tl.waiting, where="post", label=label("waiting in the engine"))
    bottom.step(tl.t_s, tl.evictions, where="post", linestyle="--", color="grey",
                label=label(COUNTER_SAYS[run.engine]))
    catch_up = gauges_catch_up_s(run)
    for ax in (top, bottom):
        if catch_up > 0:
            ax.axvspan(0.0, catch_up, color="0.6", alpha=0.18, lw=0)
        for t in pauses.start_s:
            ax.axvline(t, color="tab:red", alpha=0.5, lw=1)
    if catch_up > 0:
        bottom.fill_between([], [], color="0.6", alpha=0.18, label=label("not every request in the gauges yet"))
    bottom.plot([], [], color="tab:red", alpha=0.5, label=label(PAUSED[run.engine]))
    bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_request_lanes(run: PressureRun, pauses: pd.DataFrame, title: str, ax: plt.Axes | None = None) -> plt.Axes:
    """One lane per request, in the order they were sent: queued, generating, and paused while evicted."""
    ax = axes(title, "time since the requests were sent (s)", "request (in the order sent)", ax=ax)
    for _, r in run.requests.iterrows():
        ax.plot([r.sent_s, r.first_token_s], [r.req, r.req], color="lightgrey", lw=4, solid_capstyle="butt")
        ax.plot([r.first_token_s, r.finish_s], [r.req, r.req], color="tab:blue", lw=4, solid_capstyle="butt")
    for _, p in pauses.iterrows():
        ax.plot([p.start_s, p.end_s], [p.req, p.req], color="tab:red", lw=4, solid_capstyle="butt")
    ax.set_yticks(sorted(run.requests.req))
    ax.invert_yaxis()
    ax.legend([Line2D([0], [0], color=c, lw=4) for c in ("lightgrey", "tab:blue", "tab:red")],
              [label("sent, no token yet"), label("receiving tokens"), label(WAITING[run.engine])],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
