"""Chapter 00's picture: the notebook is an HTTP client; each engine is a server in its own venv and process group."""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib import pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from servelab.book.plots import label


def _box(ax: plt.Axes, x: float, y: float, w: float, h: float, title: str, lines: list[str], color: str) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", facecolor=color, edgecolor="0.3"))
    ax.text(x + w / 2, y + h - 0.09, title, ha="center", va="top", fontsize=10, weight="bold")
    ax.text(x + w / 2, y + h - 0.24, "\n".join(lines), ha="center", va="top", fontsize=8, linespacing=1.5)


def draw_client_server(envs: Mapping[str, str], ax: plt.Axes | None = None) -> plt.Axes:
    """The notebook on the left, one server per engine on the right (`envs`: its name -> its venv's name), the HTTP
    requests between them."""
    if len(envs) != 2:
        raise ValueError(f"draw_client_server draws two servers, got {len(envs)}: {', '.join(envs)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 3.4))
    _box(ax, 0.0, 0.55, 0.9, 0.9, label("this notebook"),
         [label("kernel venv"), label("an HTTP client:"), label("it never imports an engine")], "#e8eef7")
    for y, (name, venv) in zip((1.05, 0.0), envs.items(), strict=True):
        _box(ax, 1.9, y, 1.2, 0.9, f"{name} {label('server')}",
             [f"{label('own venv')}: {venv}", label("own process group"), "127.0.0.1:PORT"], "#fdf0e0")
        ax.add_patch(FancyArrowPatch((0.92, 1.0), (1.88, y + 0.45), arrowstyle="<->", mutation_scale=12, color="0.3"))
        ax.text(1.4, (1.0 + y + 0.45) / 2 + (0.12 if y else -0.12), "POST /v1/chat/completions\nGET /metrics",
                ha="center", va="center", fontsize=7, family="monospace")
    ax.set_xlim(-0.05, 3.15)
    ax.set_ylim(-0.05, 2.0)
    ax.set_axis_off()
    ax.set_title(label("How the notebooks talk to the engines"))
    return ax
