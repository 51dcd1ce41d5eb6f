"""Figures: every label goes through `label()`, so translated catalogs (servelab.i18n) can relabel every plot."""

from __future__ import annotations

import warnings

from matplotlib import font_manager
from matplotlib import pyplot as plt

from servelab.book import figure_languages
from servelab.book.figure_languages import CJK_FONTS
from servelab.book.i18n import language, t

__all__ = ["CJK_FONTS", "axes", "label", "style"]


def label(text: str) -> str:
    """A plot label, title or legend entry in the reader's language."""
    return t(text)


def style() -> None:
    """House style; picks a CJK-capable font when the language needs one and it is installed. In a chapter being
    executed, every figure shown is also drawn in the other languages (`figure_languages`)."""
    plt.rcParams.update({"figure.figsize": (7, 4), "figure.dpi": 110, "axes.grid": True,
                         "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False})
    if language() in ("ja", "ko"):
        installed = {f.name for f in font_manager.fontManager.ttflist}
        for font in CJK_FONTS:
            if font in installed:
                plt.rcParams["font.family"] = [font, "DejaVu Sans"]
                break
        else:
            warnings.warn(f"no CJK font installed ({', '.join(CJK_FONTS)}): {language()} plot labels will show "
                          "empty boxes; install one (Debian/Ubuntu: sudo apt-get install fonts-noto-cjk)", stacklevel=2)
    figure_languages.install()


def axes(title: str, xlabel: str, ylabel: str, ax: plt.Axes | None = None) -> plt.Axes:
    """A new (or given) axes with translated title and axis labels."""
    if ax is None:
        _, ax = plt.subplots()
    ax.set_title(label(title))
    ax.set_xlabel(label(xlabel))
    ax.set_ylabel(label(ylabel))
    return ax
