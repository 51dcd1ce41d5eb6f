"""One step of a KV event trace as a static picture: vLLM's block pool beside SGLang's radix tree (matplotlib).

The still twin of the scrubber in `kv_event_figure` (which checks the trace and calls `draw`): the same
geometry, colours and words as its JavaScript, for the PDF and for any viewer that does not run the page's
script. The radix tree is drawn here rather than with `diagrams_radix.draw_radix_tree`: that picture is of the
simulator's tree (lock counts, last access, the LRU candidate, root at the top), while a recorded step has only
each node's state (cached, locked, evicted) and is drawn root at the left, as the scrubber draws it.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch, PathPatch
from matplotlib.path import Path as MplPath

CELL_W, CELL_H, GAP_X, GAP_Y = 46, 34, 8, 18  # block pool (as in kv_event_figure.js)
NODE_W, NODE_H, EDGE, ROW = 100, 30, 14, 38  # radix tree, root at the left (its box as wide as its word)
HEAD, BETWEEN, EVENTS = 44, 40, 6  # room for a panel's heading; space between the panels; event lines shown
FACE = {"free": "#f4f4f4", "used": "#3b75af", "locked": "#3b75af", "cached": "#f7cf6b", "evicted": "#ffffff",
        "root": "#e6e6e6"}
EDGE_COLOUR = {"free": "#d0d0d0", "used": "#2d5b88", "locked": "#2d5b88", "cached": "#c99a24", "evicted": "#aaaaaa",
               "root": "#999999"}
CHAIN = "#6b5213"
CURVE = [MplPath.MOVETO, MplPath.CURVE4, MplPath.CURVE4, MplPath.CURVE4]
BLOCK_GID, NODE_GID = "kv-block", "kv-node"  # gids of the drawn boxes, so a test can count them


def pool_slots(ids: list[int]) -> tuple[dict[int, tuple[float, float]], float, float]:
    """Top-left corner of each block id's cell, and the pool's width and height."""
    ids, n = sorted(ids), max(1, len(ids))
    cols = math.ceil(n / math.ceil(n / 6)) if n <= 36 else math.ceil(math.sqrt(n))
    rows = max(1, math.ceil(len(ids) / cols))
    slots = {b: ((i % cols) * (CELL_W + GAP_X), GAP_Y + (i // cols) * (CELL_H + GAP_Y)) for i, b in enumerate(ids)}
    return slots, cols * CELL_W + (cols - 1) * GAP_X, GAP_Y + rows * (CELL_H + GAP_Y) - GAP_Y


def tree_layout(nodes: list[Mapping[str, Any]]) -> tuple[dict[Any, tuple[int, float]], Any]:
    """(depth, row) of every node and of the root, and the root's id: a node without a parent (or whose parent
    is not in the list) hangs from the root, which is the one parentless node of 0 tokens if there is one."""
    by_id = {n["id"]: n for n in nodes}
    tops = [n for n in nodes if n["parent"] not in by_id]
    root = tops[0]["id"] if len(tops) == 1 and tops[0]["parent"] is None and tops[0]["tokens"] == 0 else "root"
    kids: dict[Any, list[int]] = {root: []}
    for n in nodes:
        if n["id"] != root:
            kids.setdefault(n["parent"] if n["parent"] in by_id else root, []).append(n["id"])
    pos: dict[Any, tuple[int, float]] = {}
    rows = iter(range(len(nodes) + 1))

    def place(node: Any, depth: int) -> float:
        ys = [place(k, depth + 1) for k in sorted(kids.get(node, []))]
        y = (ys[0] + ys[-1]) / 2 if ys else float(next(rows))
        pos[node] = (depth, y)
        return y

    place(root, 0)
    return pos, root


def _chain(a: tuple[float, float], b: tuple[float, float]) -> MplPath:
    """The hash-chain arrow from block cell `a` (child) to cell `b` (parent), top-left corners: an arch through the
    gap above a row, else a curve from one cell's top (or bottom) edge to the other's facing edge."""
    if a[1] == b[1]:
        x0, x1 = a[0] + 10, b[0] + CELL_W - 10
        lift = min(GAP_Y - 3, 6 + abs(x1 - x0) / 12)
        return MplPath([(x0, a[1]), (x0, a[1] - lift), (x1, b[1] - lift), (x1, b[1])], CURVE)
    up = b[1] < a[1]
    ax_, bx = a[0] + CELL_W / 2, b[0] + CELL_W / 2
    ay, by = (a[1], b[1] + CELL_H) if up else (a[1] + CELL_H, b[1])
    bend = (by - ay) / 2
    return MplPath([(ax_, ay), (ax_, ay + bend), (bx, by - bend), (bx, by)], CURVE)


def root_width(word: str) -> float:
    return 14 + sum(11 if ch > "\u2e80" else 6.5 for ch in word)  # a wide (CJK) character or a narrow one


def _node_x(depth: int, root_w: float) -> float:
    return 0.0 if depth == 0 else root_w + EDGE + (depth - 1) * (NODE_W + EDGE)


def _summary(items: list[Mapping[str, Any]], states: tuple[str, ...], labels: Mapping[str, str]) -> str:
    return " · ".join(f"{labels[s]}: {sum(1 for i in items if i['state'] == s)}" for s in states)


def _events(ax: Axes, x: float, y: float, events: list[str], labels: Mapping[str, str]) -> None:
    lines = events[:EVENTS] + (["…"] if len(events) > EVENTS else []) or [labels["no_events"]]
    ax.text(x, y, labels["events"], fontsize=6.5, color="#555555", va="top")
    ax.text(x, y + 11, "\n".join(textwrap.shorten(e, 52, placeholder=" …") for e in lines), fontsize=6,
            family="monospace", va="top", linespacing=1.3, color="#333333" if events else "#888888")


def _pool(ax: Axes, x0: float, y0: float, step: Mapping[str, Any], labels: Mapping[str, str]) -> float:
    blocks = step["vllm"]["blocks"]
    slots, width, height = pool_slots([b["id"] for b in blocks])
    by_hash = {b["hash"]: b for b in blocks if b["hash"]}
    block_size = max([1] + [b["tokens"] for b in blocks])
    ax.text(x0, y0, labels["vllm"], fontsize=8.5, weight="bold", va="top")
    ax.text(x0, y0 + 15, _summary(blocks, ("used", "cached", "free"), labels), fontsize=6.5, color="#555555", va="top")
    top = y0 + HEAD
    for b in blocks:
        x, y = x0 + slots[b["id"]][0], top + slots[b["id"]][1]
        ax.add_patch(FancyBboxPatch((x, y), CELL_W, CELL_H, boxstyle="round,pad=0,rounding_size=3",
                                    facecolor=FACE[b["state"]], edgecolor=EDGE_COLOUR[b["state"]], lw=0.8,
                                    gid=BLOCK_GID))
        ink = "white" if b["state"] == "used" else "#222222"
        ax.text(x + 3, y + 3, f"#{b['id']}", fontsize=4.5, color="#d5e3f1" if b["state"] == "used" else "#777777",
                va="top")
        if b["hash"] or b["state"] != "free":  # a partly filled block is not hashed (yet): how full it is
            ax.text(x + CELL_W / 2, y + 22, (b["hash"] or "")[:6] or f"{b['tokens']}/{block_size}", fontsize=6.5,
                    color=ink, family="monospace" if b["hash"] else None, ha="center", va="center")
        parent = by_hash.get(b["parent"]) if b["parent"] else None
        if parent is not None:
            px, py = x0 + slots[parent["id"]][0], top + slots[parent["id"]][1]
            ax.add_patch(FancyArrowPatch(path=_chain((x, y), (px, py)), arrowstyle="-|>", mutation_scale=6,
                                         color=CHAIN, lw=0.8, alpha=0.8))
    return width


def _tree(ax: Axes, x0: float, y0: float, step: Mapping[str, Any], labels: Mapping[str, str]) -> float:
    nodes, root_w = step["sglang"]["nodes"], root_width(labels["root"])
    pos, root = tree_layout(nodes)
    by_id = {n["id"]: n for n in nodes}
    ax.text(x0, y0, labels["sglang"], fontsize=8.5, weight="bold", va="top")
    ax.text(x0, y0 + 15, _summary([n for n in nodes if n["id"] != root], ("locked", "cached", "evicted"), labels),
            fontsize=6.5, color="#555555", va="top")
    top = y0 + HEAD
    for node, (depth, row) in pos.items():
        x, y = x0 + _node_x(depth, root_w), top + row * ROW
        n = by_id.get(node) if node != root else None
        state = n["state"] if n else "root"
        if n:
            up = n["parent"] if n["parent"] in pos else root
            pd, prow = pos[up]
            px, py = x0 + _node_x(pd, root_w) + (root_w if pd == 0 else NODE_W), top + prow * ROW + NODE_H / 2
            mid, cy = px + EDGE / 2, y + NODE_H / 2
            ax.add_patch(PathPatch(MplPath([(px, py), (mid, py), (mid, cy), (x, cy)], CURVE), fill=False, lw=0.9,
                                   edgecolor="#bbbbbb" if state == "evicted" else "#888888",
                                   linestyle="--" if state == "evicted" else "-"))
        ax.add_patch(FancyBboxPatch((x, y), root_w if depth == 0 else NODE_W, NODE_H,
                                    boxstyle="round,pad=0,rounding_size=4", facecolor=FACE[state],
                                    edgecolor=EDGE_COLOUR[state], lw=0.8, linestyle="--" if state == "evicted" else "-",
                                    gid=NODE_GID))
        ink = "white" if state == "locked" else "#999999" if state == "evicted" else "#222222"
        if n is None:
            ax.text(x + root_w / 2, y + NODE_H / 2, labels["root"], fontsize=7, ha="center", va="center")
        else:
            text = n["label"] if len(n["label"]) <= 17 else n["label"][:16] + "…"
            ax.text(x + 5, y + 10, text, fontsize=7, va="center", color=ink)
            ax.text(x + 5, y + 23, f"{n['tokens']} {labels['tokens']}", fontsize=5.5, va="center",
                    color=ink if state != "cached" else "#555555")
    return root_w + max(d for d, _ in pos.values()) * (EDGE + NODE_W)


def _extent(step: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[float, float, float]:
    """The picture's width and height, and how far below the panels' tops their event lists start."""
    _, pool_w, pool_h = pool_slots([b["id"] for b in step["vllm"]["blocks"]])
    pos, _ = tree_layout(step["sglang"]["nodes"])
    tree_w = root_width(labels["root"]) + max(d for d, _ in pos.values()) * (EDGE + NODE_W)
    tree_h = (max(r for _, r in pos.values()) + 1) * ROW - (ROW - NODE_H)
    lines = max(min(len(step[side]["events"]), EVENTS + 1) for side in ("vllm", "sglang"))
    below = HEAD + max(pool_h, tree_h) + 10
    return max(pool_w + BETWEEN + tree_w, 560), 26 + below + 14 + 9 * max(lines, 1) + 30, below


def draw_on(ax: Axes, step: Mapping[str, Any], caption: str, labels: Mapping[str, str]) -> Axes:
    """Draw `step` on `ax` in figure units (1 unit = 1 px of the scrubber): caption, both panels, legend."""
    width, height, below = _extent(step, labels)
    ax.text(0, 0, caption, fontsize=9.5, weight="bold", va="top")
    pool_w = _pool(ax, 0, 26, step, labels)
    _tree(ax, pool_w + BETWEEN, 26, step, labels)
    _events(ax, 0, 26 + below, step["vllm"]["events"], labels)
    _events(ax, pool_w + BETWEEN, 26 + below, step["sglang"]["events"], labels)
    handles = [Patch(facecolor=FACE[s], edgecolor=EDGE_COLOUR[s], linestyle="--" if s == "evicted" else "-")
               for s in ("free", "used", "cached", "evicted")] + [Line2D([0], [0], color=CHAIN, lw=1.2)]
    names = [labels[k] for k in ("free", "in_use_or_locked", "cached", "evicted", "chain")]
    ax.legend(handles, names, loc="lower left", bbox_to_anchor=(0, 0), ncol=5, fontsize=6.5, frameon=False,
              handlelength=1.4, columnspacing=1.2, borderaxespad=0)
    ax.set_xlim(-4, width + 4)
    ax.set_ylim(height, -4)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return ax


def _figure(step: Mapping[str, Any], caption: str, labels: Mapping[str, str]) -> Figure:
    width, height, _ = _extent(step, labels)
    fig = Figure(figsize=((width + 8) / 100, (height + 4) / 100), dpi=150, facecolor="white")
    draw_on(fig.add_axes((0, 0, 1, 1)), step, caption, labels)
    return fig


def png_bytes(step: Mapping[str, Any], caption: str, labels: Mapping[str, str]) -> bytes:
    buffer = io.BytesIO()
    _figure(step, caption, labels).savefig(buffer, format="png")
    return buffer.getvalue()


def draw(step: Mapping[str, Any], caption: str, labels: Mapping[str, str], target: str | Path | Axes) -> Path | Axes:
    """Draw on `target` if it is an Axes (returned), else save a PNG there (its Path returned)."""
    if isinstance(target, Axes):
        return draw_on(target, step, caption, labels)
    path = Path(target)
    path.write_bytes(png_bytes(step, caption, labels))
    return path
