"""The figures of an executed chapter in the other languages: where they are kept and how pages and notebooks
get them.

`figure_languages` draws each figure a chapter shows in every translated language while the chapter executes;
`chapters.execute` keeps those PNGs beside the executed notebook, `notebooks/figures/NN_name/<number>.<lang>.png`
(`folder`), replaced as a whole with the notebook (`keep`). The English notebook is unchanged but for each
figure's number in its PNG output's metadata. `localize` swaps each numbered PNG output of a notebook for the
language's render (a figure whose texts the language does not change has none: it stays as it is). Two readers:

- the Sphinx build of a translated book (this module is a Sphinx extension, `_config.yml`'s `extra_extensions`):
  when a chapter's notebook is read for language X, its figures are X's (the English build reads it untouched);
- `translated_notebooks.write`, whose notebooks carry the executed chapter's outputs with the figures swapped.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path
from typing import Any

import nbformat

from servelab.book.figure_languages import KEY

FIGURES = "figures"


def folder(notebook: Path) -> Path:
    """Where the renders of the executed notebook `notebook` (`notebooks/NN_name.ipynb`) are kept."""
    return notebook.parent / FIGURES / notebook.stem


def keep(renders: Path, notebook: Path) -> None:
    """Make `renders` (a run's folder, on the notebook's file system) the notebook's figures folder, replacing
    the previous run's; no renders: the old folder is removed."""
    target = folder(notebook)
    if target.exists():
        old = renders.parent / f".{target.name}-old"
        os.replace(target, old)
        shutil.rmtree(old)
    if renders.is_dir() and any(renders.iterdir()):
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(renders, target)


def localize(nb: nbformat.NotebookNode, figures: Path, lang: str) -> list[Path]:
    """Replace, in place, each numbered PNG output of `nb` that has a render in `lang` under `figures`; returns
    the renders used."""
    used = []
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            number = output.get("metadata", {}).get("image/png", {}).get(KEY)
            render = figures / f"{number}.{lang}.png"
            if number is not None and "image/png" in output.get("data", {}) and render.is_file():
                output["data"]["image/png"] = base64.b64encode(render.read_bytes()).decode("ascii")
                used.append(render)
    return used


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    """Sphinx `source-read`: a chapter notebook read for a translated book gets that language's figures."""
    lang = app.config.language or "en"
    path = Path(app.env.doc2path(docname))
    if lang == "en" or path.suffix != ".ipynb" or not folder(path).is_dir():
        return
    nb = nbformat.reads(source[0], as_version=4)
    for render in localize(nb, folder(path), lang):
        app.env.note_dependency(str(render))
    source[0] = nbformat.writes(nb)


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
