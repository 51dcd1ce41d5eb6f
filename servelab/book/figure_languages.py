"""Every figure a chapter shows, drawn once more in each translated language, while the chapter executes in English.

A chapter's figures reach its notebook as PNG outputs through IPython's display formatter for matplotlib figures,
whichever way they get there (`plt.show()`, `display(fig)`, a figure as a cell's last value, the inline backend's
flush at the end of a cell). When `chapters.execute` runs a chapter it sets SERVELAB_FIGURES to a folder, and
`install` (called by `plots.style`, so by every chapter's banner cell) wraps that formatter: the English PNG stays
the output, as before, with its figure's number in the output's metadata (`image/png`: `servelab_figure`), and
for each translated language whose catalog changes one of the figure's texts the figure is relabelled (`relabel`:
every Text artist, tick labels through the axes' formatters), saved as `<number>.<lang>.png` at the same size and
dpi, and restored. `figure_outputs` puts those PNGs into the translated book pages and notebooks. Without
SERVELAB_FIGURES (a participant's kernel, nbval) nothing is installed and figures are shown as before.
"""

from __future__ import annotations

import base64
import io
import itertools
import os
import re
import warnings
from collections.abc import Callable, Iterable
from contextlib import ExitStack, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from matplotlib import font_manager
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import Formatter

from servelab.book import i18n

CJK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK KR", "Noto Sans CJK SC")
FOLDER_ENV = "SERVELAB_FIGURES"
KEY = "servelab_figure"  # the figure's number, in its PNG output's metadata
_numbers = itertools.count(1)


def cjk_font(lang: str) -> str | None:
    """The installed CJK font for `lang` (its own first), or None."""
    installed = {f.name for f in font_manager.fontManager.ttflist}
    mine = {"ja": "Noto Sans CJK JP", "ko": "Noto Sans CJK KR"}.get(lang)
    return next((f for f in sorted(CJK_FONTS, key=lambda f: f != mine) if f in installed), None)


def relabel(text: str, lang: str, known: Iterable[str]) -> str:
    """`text` in `lang`: its translation when it is a message as a whole, else each message of `known` inside it
    (a composite such as "vLLM: time to first token") replaced, longest first, on word boundaries."""
    if not text.strip() or lang == "en":
        return text
    if (whole := i18n.in_language(text, lang)) is not None:
        return whole
    parts = sorted({m for m in known if m.strip() and m in text and i18n.in_language(m, lang)}, key=len, reverse=True)
    if not parts:
        return text
    pattern = re.compile("|".join(rf"(?<!\w){re.escape(m)}(?!\w)" for m in parts))
    return pattern.sub(lambda found: i18n.in_language(found.group(0), lang) or found.group(0), text)


class _Relabelled(Formatter):
    """An axis' tick formatter whose labels are relabelled (categorical and fixed tick labels are words)."""

    def __init__(self, inner: Formatter, translate: Callable[[str], str]) -> None:
        self.inner, self.translate = inner, translate

    def __call__(self, x: float, pos: int | None = None) -> str:
        return self.translate(self.inner(x, pos))

    def format_ticks(self, values: Any) -> list[str]:
        return [self.translate(s) for s in self.inner.format_ticks(values)]

    def get_offset(self) -> str:
        return self.inner.get_offset()

    def set_locs(self, locs: Any) -> None:
        self.inner.set_locs(locs)

    def format_data(self, value: float) -> str:
        return self.inner.format_data(value)

    def format_data_short(self, value: float) -> str:
        return self.inner.format_data_short(value)


@contextmanager
def relabelled(fig: Figure, lang: str, known: Iterable[str]):
    """Within: `fig` with its texts in `lang` (and a CJK font added where `lang` needs one); yields how many
    texts changed. Everything is restored on exit."""
    known = frozenset(known)
    font = cjk_font(lang) if lang in ("ja", "ko") else None

    def translate(s: str) -> str:
        return relabel(s, lang, known)

    changed = 0
    with ExitStack() as undo:
        for text in fig.findobj(Text):
            before, props = text.get_text(), text.get_fontproperties().copy()
            after = translate(before)
            if after != before:
                changed += 1
                text.set_text(after)
            if font:
                text.set_fontfamily([*props.get_family(), font])
            undo.callback(lambda text=text, before=before, props=props: (text.set_text(before),
                                                                        text.set_fontproperties(props)))
        for ax in fig.axes:
            for axis in [getattr(ax, name) for name in ("xaxis", "yaxis", "zaxis") if hasattr(ax, name)]:
                for ticker, minor in ((axis.major, False), (axis.minor, True)):
                    inner = ticker.formatter
                    probe = inner.format_ticks(axis.get_ticklocs(minor=minor))
                    changed += sum(translate(s) != s for s in probe)
                    ticker.formatter = _Relabelled(inner, translate)
                    undo.callback(setattr, ticker, "formatter", inner)
        yield changed


def compact(png: bytes) -> bytes:
    """`png` with a palette of 256 colours (a plot has few; a third of the bytes a render adds to the repository)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png))
    opaque = image.mode == "RGB" or (image.mode == "RGBA" and image.getchannel("A").getextrema()[0] == 255)
    palette = image.convert("RGB").quantize(256) if opaque else image.convert("RGBA").quantize(
        256, method=Image.Quantize.FASTOCTREE)
    out = io.BytesIO()
    palette.save(out, "PNG", optimize=True)
    return out.getvalue()


def render(fig: Figure, png: Callable[[Figure], Any], folder: Path, number: int,
           languages: Iterable[str] = i18n.LANGUAGES[1:]) -> list[Path]:
    """Save `fig` in each of `languages` where its texts change, with `png` (the formatter's own function, so at
    the output's size and dpi), as `<folder>/<number>.<lang>.png`; returns the files written."""
    written = []
    for lang in languages:
        if lang in ("ja", "ko") and not cjk_font(lang):
            _no_font(lang)
            continue
        with relabelled(fig, lang, i18n.ASKED) as changed, warnings.catch_warnings():
            if not changed:
                continue
            warnings.simplefilter("ignore")  # the English notebook's stderr stays the English run's
            data = png(fig)
        if data is None:
            continue
        raw = data[0] if isinstance(data, tuple) else data
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{number}.{lang}.png"
        target.write_bytes(compact(base64.b64decode(raw) if isinstance(raw, str) else raw))
        written.append(target)
    return written


@cache
def _no_font(lang: str) -> None:
    """Say once per kernel that `lang`'s figures stay in English (rather than empty boxes)."""
    warnings.warn(f"no CJK font installed ({', '.join(CJK_FONTS)}): the {lang} book and notebooks show this chapter's "
                  "figures in English; install one (Debian/Ubuntu: sudo apt-get install fonts-noto-cjk)", stacklevel=3)


@cache
def _wrap(original: Callable[[Figure], Any], folder: Path) -> Callable[[Figure], Any]:
    def figure_png(fig: Figure) -> Any:
        data = original(fig)
        if data is None or i18n.language() != "en":
            return data
        number = next(_numbers)
        render(fig, original, folder, number)
        return data, {KEY: number}

    figure_png.servelab_wrapped = True  # type: ignore[attr-defined]
    return figure_png


def _ensure(folder: Path) -> None:
    """Wrap the PNG formatter of matplotlib figures, unless it is wrapped already (the inline backend may register
    its own again)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    png = shell.display_formatter.formatters["image/png"]
    try:
        current = png.lookup_by_type(Figure)
    except KeyError:
        return
    if not getattr(current, "servelab_wrapped", False):
        png.for_type(Figure, _wrap(current, folder))


def install() -> bool:
    """In a kernel executing a chapter (SERVELAB_FIGURES set), render every figure shown in the other languages
    too; returns whether it did. Idempotent."""
    folder = os.environ.get(FOLDER_ENV)
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if not folder or shell is None:
        return False
    import matplotlib

    backend = matplotlib.get_backend()
    if backend.startswith("module://"):
        __import__(backend.removeprefix("module://"))  # the inline backend registers its formatter when imported
    _ensure(Path(folder))
    hook = _hooks.setdefault(folder, lambda *_: _ensure(Path(folder)))
    if hook not in shell.events.callbacks["pre_run_cell"]:
        shell.events.register("pre_run_cell", hook)
    return True


_hooks: dict[str, Callable[..., None]] = {}
