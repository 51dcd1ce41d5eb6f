"""The radix tree as a picture: one box per node, with its tokens, lock count and last access.

:func:`tree_frame` turns a :class:`servelab.sim.prefix_cache.RadixTree`'s state into a table (one row
per node, the root included), so a chapter can save the state after each request and draw it later;
:func:`draw_radix_tree` draws such a table (or a live tree). The root is at the top, leaves at the
bottom, children in token order. Colours tell what eviction may do: locked nodes (a running request
uses them) are protected, unlocked leaves are the candidates, and the candidate with the oldest
access is the one SGLang's LRU eviction takes first.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence

import pandas as pd
from matplotlib import pyplot as plt
from matplotlib.patches import FancyBboxPatch, Patch

from servelab.book.plots import label
from servelab.sim.prefix_cache import RadixTree

COLUMNS = ("node", "parent", "depth", "tokens", "lock_ref", "last_access", "head")
COLORS = {"root": "0.85", "locked": "tab:red", "next": "tab:orange", "evictable": "gold", "inner": "tab:blue"}
HEAD = 12  # token ids kept per node for its label: enough to read where an edge split
WRAP = 20  # characters per line of a node's tokens; at most three lines, then "…"
NODE_GID = "radix-node"  # the gid of every node box, so a test can count them


def tree_frame(tree: RadixTree) -> pd.DataFrame:
    """The tree's state now: one row per node (root first, ``parent`` -1), in the columns of ``COLUMNS``."""
    rows = [{"node": tree.root.node_id, "parent": -1, "depth": 0, "tokens": 0, "lock_ref": 0,
             "last_access": tree.root.last_access, "head": []}]
    for node, depth in tree.nodes():
        assert node.parent is not None
        rows.append({"node": node.node_id, "parent": node.parent.node_id, "depth": depth, "tokens": len(node),
                     "lock_ref": node.lock_ref, "last_access": node.last_access, "head": list(node.tokens[:HEAD])})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _checked(frame: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        raise ValueError(f"a radix tree table needs the columns {', '.join(COLUMNS)}; missing: {', '.join(missing)}")
    roots = frame[frame.parent == -1]
    if len(roots) != 1:
        raise ValueError(f"a radix tree table needs exactly one root (parent -1), got {len(roots)}")
    return frame


def _layout(frame: pd.DataFrame) -> dict[int, tuple[float, float]]:
    """x: leaves side by side in depth-first order, a parent centred over its children; y: minus the depth."""
    children: dict[int, list[int]] = {int(n): [] for n in frame.node}
    for row in frame.itertuples():
        if row.parent != -1:
            children[int(row.parent)].append(int(row.node))
    order = {int(n): i for i, n in enumerate(frame.node)}
    depth = {int(r.node): int(r.depth) for r in frame.itertuples()}
    pos: dict[int, tuple[float, float]] = {}
    next_x = 0.0

    def place(n: int) -> float:
        nonlocal next_x
        kids = sorted(children[n], key=order.get)
        if not kids:
            x, next_x = next_x, next_x + 1.0
        else:
            xs = [place(k) for k in kids]
            x = (xs[0] + xs[-1]) / 2
        pos[n] = (x, -depth[n])
        return x

    place(int(frame[frame.parent == -1].node.iloc[0]))
    return pos


def _kind(row, is_leaf: bool, oldest: int | None) -> str:
    if row.parent == -1:
        return "root"
    if row.lock_ref > 0:
        return "locked"
    if is_leaf:
        return "next" if row.node == oldest else "evictable"
    return "inner"


def draw_radix_tree(state: RadixTree | pd.DataFrame, *, title: str = "Radix tree",
                    text: Callable[[Sequence[int]], str] | None = None, ax: plt.Axes | None = None,
                    legend: bool = True) -> plt.Axes:
    """Draw a radix tree's state on ``ax`` (a new one if None); ``text`` turns a node's first token ids into words.

    Each box reads: the node's tokens (wrapped; the first ``HEAD`` of a longer edge, then "…"), its length in
    tokens, its lock count and its last access.
    """
    frame = _checked(tree_frame(state) if isinstance(state, RadixTree) else state)
    pos = _layout(frame)
    parents = set(frame.parent)
    leaves = frame[(~frame.node.isin(parents)) & (frame.parent != -1) & (frame.lock_ref == 0)]
    oldest = int(leaves.sort_values(["last_access", "node"]).node.iloc[0]) if len(leaves) else None
    if ax is None:
        width = max(4.0, 1.8 * (max(x for x, _ in pos.values()) + 1))
        _, ax = plt.subplots(figsize=(min(width, 16.0), 1.5 * (frame.depth.max() + 1) + 0.6))
    for row in frame.itertuples():
        if row.parent != -1:
            (x0, y0), (x1, y1) = pos[int(row.parent)], pos[int(row.node)]
            ax.plot([x0, x1], [y0 - 0.33, y1 + 0.33], color="0.5", linewidth=1, zorder=1)
    for row in frame.itertuples():
        x, y = pos[int(row.node)]
        kind = _kind(row, row.node not in parents, oldest)
        box = FancyBboxPatch((x - 0.45, y - 0.33), 0.9, 0.66, boxstyle="round,pad=0.02", facecolor=COLORS[kind],
                             edgecolor="0.3", linewidth=0.8, alpha=0.9, zorder=2, gid=NODE_GID)
        ax.add_patch(box)
        if kind == "root":
            words = label("root")
        else:
            head = text(row.head) if text else " ".join(str(t) for t in row.head)
            more = " …" if row.tokens > len(row.head) else ""
            lines = textwrap.wrap(head + more, WRAP, max_lines=3, placeholder=" …") or [""]
            unit = label("token" if row.tokens == 1 else "tokens")
            words = "\n".join([*lines, f"{row.tokens} {unit}, {label('lock')} {row.lock_ref}",
                                f"{label('last access')} {row.last_access}"])
        ax.text(x, y, words, ha="center", va="center", fontsize=8, zorder=3, linespacing=1.15,
                color="white" if kind in ("locked", "inner") else "black")
    xs = [x for x, _ in pos.values()]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(-frame.depth.max() - 0.7, 0.7)
    ax.set_axis_off()
    ax.set_title(label(title))
    if legend:
        names = {"locked": "locked (protected)", "next": "evicted next (oldest unlocked leaf)",
                 "evictable": "unlocked leaf", "inner": "unlocked inner node"}
        ax.legend(handles=[Patch(color=COLORS[k], label=label(v)) for k, v in names.items()],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax
