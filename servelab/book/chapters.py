"""Execute the chapters (jupytext sources -> executed .ipynb) and build the book.

Each notebook is executed from its percent-format `.py` source with papermill, into a temporary
file that replaces the committed `.ipynb` only when the run succeeded, so a failed run never
leaves a half-written notebook behind.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from servelab.machine.paths import REPO

NOTEBOOKS = REPO / "notebooks"


class NotebookFailed(RuntimeError):
    pass


def sources(names: list[str] | None = None) -> list[Path]:
    """The chapters' jupytext sources in order; `names` picks some (e.g. ["00_setup_check"])."""
    found = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    if not names:
        return found
    by_name = {p.stem: p for p in found}
    unknown = [n for n in names if n.removesuffix(".py").removesuffix(".ipynb") not in by_name]
    if unknown:
        raise ValueError(f"unknown notebook(s) {', '.join(unknown)}; available: {', '.join(by_name)}")
    return [by_name[n.removesuffix(".py").removesuffix(".ipynb")] for n in names]


def execute(source: Path, output: Path | None = None, parameters: dict[str, Any] | None = None,
            timeout: int = 1800) -> Path:
    """Execute one jupytext source; write the executed notebook to `output` atomically."""
    import jupytext
    import papermill

    output = output or source.with_suffix(".ipynb")
    notebook = jupytext.read(source)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{source.stem}-") as tmp:
        unexecuted, executed = Path(tmp) / "in.ipynb", Path(tmp) / "out.ipynb"
        jupytext.write(notebook, unexecuted)
        try:
            papermill.execute_notebook(
                str(unexecuted), str(executed), parameters=parameters or {}, cwd=str(source.parent),
                kernel_name="python3", execution_timeout=timeout, progress_bar=False,
            )
        except papermill.PapermillExecutionError as err:
            evalue = (str(err.evalue).strip().splitlines() or [""])[0]
            raise NotebookFailed(f"{source.name}: cell {err.exec_count} raised {err.ename}: {evalue}; "
                                 f"{output.name} was left as it was") from err
        os.replace(executed, output)
    return output


def run_notebooks(profile: str = "auto", names: list[str] | None = None) -> dict[str, float]:
    """Execute the chapters in place on `profile`; returns seconds per notebook."""
    times: dict[str, float] = {}
    parameters = {} if profile == "auto" else {"profile": profile}
    for source in sources(names):
        t0 = time.monotonic()
        print(f"[notebooks] {source.name} ...", flush=True)
        execute(source, parameters=parameters)
        times[source.stem] = time.monotonic() - t0
        print(f"[notebooks] {source.stem}: {times[source.stem]:.0f} s", flush=True)
    return times


def build_book(out: Path | None = None, *, languages: tuple[str, ...] | None = None) -> Path:
    """Build the HTML book in each language into `<out>/_build/html/<lang>/` (default: every language), warnings
    as errors, each language with its own doctree folder; `<out>/_build/html/index.html` leads to them.
    Returns `<out>/_build/html`. The catalogs under locales/ translate the prose; pages show the committed
    English notebooks' outputs (their figures were drawn in English)."""
    from servelab.book import sphinx_run
    from servelab.book.i18n import LANGUAGES, check_languages

    languages = check_languages(languages or LANGUAGES)
    build = (out or REPO) / "_build"
    for lang in languages:
        t0 = time.monotonic()
        sphinx_run.run("html", build / "html" / lang, build / "doctrees" / lang, lang)
        print(f"[book] {lang}: {time.monotonic() - t0:.0f} s -> {build / 'html' / lang}", flush=True)
    links = "".join(f'<li><a hreflang="{lang}" href="{lang}/index.html">{lang}</a></li>' for lang in LANGUAGES)
    (build / "html" / "index.html").write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=en/index.html">'
        f"<title>servelab</title></head><body><ul>{links}</ul></body></html>\n")
    return build / "html"
