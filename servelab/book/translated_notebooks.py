"""Chapters in another language for a workshop: markdown from the catalogs, code byte-identical to English.

`write(lang)` turns every chapter's source `notebooks/NN_name.py` (no parameters injected by the committed run)
into `notebooks/<lang>/NN_name.ipynb` (generated, not committed: git ignores `notebooks/*/`) with every paragraph,
heading and list item of its markdown cells replaced by the finished translation from
`locales/<lang>/LC_MESSAGES/notebooks/NN_name.po` (English where there is none yet) and its code cells
unchanged. Like the English notebook a participant opens, it carries the executed chapter's outputs, with every
figure in its language (the renders the run drew, `figure_outputs`; printed text stays as the English run printed
it); when the executed notebook's code is not the source's (a chapter edited since its run) it carries none. A
participant who runs it gets plots labelled in that language, because a kernel started in `notebooks/<lang>/`
picks the language from its folder (`servelab.book.i18n`). A block is found the way Sphinx's gettext builder
finds it: a MyST paragraph or heading, its lines joined by spaces, which is the catalog's msgid.
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat

from servelab.book import catalogs, chapters, figure_outputs
from servelab.book.po_markup import _parser


def blocks(markdown: str) -> list[tuple[int, int, str, str]]:
    """(first line, end line, prefix, msgid) of each translatable block of one markdown cell, the title and
    the paragraphs inside a MyST directive (``:::{dropdown} title``) included."""
    lines = markdown.splitlines()
    found = []
    tokens = _parser().parse(markdown)
    for opening, inline in zip(tokens, [*tokens[1:], None], strict=True):  # a fence can be the last token
        if opening.type == "colon_fence" and opening.map:
            start, end = opening.map
            title = opening.info.partition("}")[2].strip()
            if title:
                found.append((start, start + 1, lines[start][:lines[start].rfind(title)], title))
            closed = lines[end - 1].strip().startswith(":::") and end - 1 > start
            body = lines[start + 1:end - 1 if closed else end]
            found += [(a + start + 1, b + start + 1, prefix, msgid)  # the body, parsed as markdown of its own
                      for a, b, prefix, msgid in blocks("\n".join(body))]
            continue
        if opening.type not in ("paragraph_open", "heading_open") or inline is None or inline.type != "inline" \
                or not opening.map:
            continue
        start, end = opening.map
        first = inline.content.split("\n")[0]
        at = lines[start].find(first)
        if at < 0:
            raise ValueError(f"cannot place the block {first[:60]!r} in its cell")
        found.append((start, end, lines[start][:at], " ".join(inline.content.split("\n")).strip()))
    return found


def translate_markdown(markdown: str, messages: dict[str, str]) -> tuple[str, list[str]]:
    """The cell with every block that has a translation replaced; and the msgids left in English."""
    lines = markdown.splitlines()
    missing = []
    for start, end, prefix, msgid in reversed(blocks(markdown)):
        if msgid in messages:
            lines[start:end] = [prefix + messages[msgid]]
        else:
            missing.append(msgid)
    return "\n".join(lines), missing[::-1]


def msgids(notebook: Path) -> list[str]:
    """Every block's msgid in one executed chapter, in order."""
    nb = nbformat.read(notebook, as_version=4)
    return [b[3] for cell in nb.cells if cell.cell_type == "markdown" for b in blocks(cell.source)]


def carry_outputs(nb: nbformat.NotebookNode, executed: Path, lang: str) -> bool:
    """Give `nb`'s code cells the outputs of the executed notebook `executed`, its figures in `lang`; only when
    its code cells (the injected parameters aside) are `nb`'s, else returns False and leaves `nb` as it is."""
    if not executed.is_file():
        return False
    ran = [c for c in nbformat.read(executed, as_version=4).cells
           if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])]
    ours = [c for c in nb.cells if c.cell_type == "code"]
    if [c.source for c in ran] != [c.source for c in ours]:
        return False
    figures = figure_outputs.folder(executed)
    for cell, theirs in zip(ours, ran, strict=True):
        cell.outputs, cell.execution_count = theirs.outputs, theirs.get("execution_count")
    figure_outputs.localize(nb, figures, lang)
    return True


def write(lang: str, names: list[str] | None = None, out: Path | None = None) -> dict[Path, int]:
    """Write `<out>/<lang>/NN_name.ipynb` (default out: notebooks/); returns each file's blocks left in English."""
    catalogs.check_language(lang)
    folder = (out or chapters.NOTEBOOKS) / lang
    folder.mkdir(parents=True, exist_ok=True)
    left: dict[Path, int] = {}
    for source in chapters.sources(names):
        nb = jupytext.read(source)
        messages = catalogs.translation(lang, f"notebooks/{source.stem}")
        missing = 0
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source, untranslated = translate_markdown(cell.source, messages)
                missing += len(untranslated)
        carry_outputs(nb, (out or chapters.NOTEBOOKS) / f"{source.stem}.ipynb", lang)
        nb.metadata["servelab"] = {"language": lang, "translated_from": f"notebooks/{source.name}"}
        target = folder / f"{source.stem}.ipynb"
        nbformat.write(nb, target)
        left[target] = missing
    return left
