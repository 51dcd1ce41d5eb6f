"""Execute the chapters (jupytext sources -> executed .ipynb) and build the book.

Each notebook is executed from its percent-format `.py` source with papermill, into a temporary
file that replaces the committed `.ipynb` only when the run succeeded, so a failed run never
leaves a half-written notebook behind. The figures it drew in the other languages (`figure_languages`) replace
the previous run's with it, in `notebooks/figures/NN_name/` (`figure_outputs`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from servelab.book import execution_key, figure_outputs, results
from servelab.machine import profiles
from servelab.machine.memory_peak import PeakMemory
from servelab.machine.paths import REPO, results_dir
from servelab.measure.setup.by_hand import comparable_argv

NOTEBOOKS = REPO / "notebooks"


class NotebookFailed(RuntimeError):
    pass


def notebook_path(name: str) -> str:
    """The executed notebook of chapter `name`, relative to the repository (as ./test.sh passes it to pytest)."""
    return str(NOTEBOOKS.relative_to(REPO) / f"{name}.ipynb")


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


@contextmanager
def _environment(**values: str):
    """Set environment variables for the kernel papermill starts (it inherits them), then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _saves_and_reads(path: Path) -> tuple[list[str], list[str]]:
    """The results a run saved and the ones it read that it had not saved itself, as repo paths."""
    ops = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    saves = sorted({f"results/{o['path']}" for o in ops if o["op"] == "save"})
    return saves, sorted({f"results/{o['path']}" for o in ops if o["op"] == "read"} - set(saves))


def _drawn(path: Path) -> list[str]:
    """The messages a run asked `i18n.t` for (plot labels, banner words), each once."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return sorted({line.replace("\\n", "\n") for line in lines})


def _starts(path: Path) -> list[dict[str, Any]]:
    """The engine starts a run logged (SERVELAB_START_LOG): engine and `comparable_argv` of each."""
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return [{"engine": e["engine"], "argv": comparable_argv(e["argv"])} for e in entries]


def _record(executed: Path, source: Path, files: dict[str, str], profile: str, parameters: dict[str, Any],
            trace: Path, seconds: float, peak_gib: float) -> str:
    """Write the execution key and what it covers into the executed notebook; stamp the results it saved."""
    import nbformat

    saves, reads = _saves_and_reads(trace)
    here = results_dir().resolve() == (REPO / "results").resolve()  # reads are keyed by the committed results
    read_hashes = execution_key.read_digests(reads) if here else {r: "outside the repository" for r in reads}
    key = execution_key.key(files, read_hashes, profile)
    nb = nbformat.read(executed, as_version=4)
    nb.metadata[execution_key.METADATA] = {
        "key": key, "profile": profile, "parameters": parameters, "inputs": files, "reads": read_hashes,
        "saves": saves, "drawn": _drawn(trace.with_name("drawn.txt")),
        "starts": _starts(trace.with_name("starts.jsonl")), "seconds": round(seconds),
        "peak_gib": round(peak_gib, 1),  # the kernel and its engines at most, together (servelab.book.lanes)
        "executed_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    nbformat.write(nb, executed)
    for saved in saves:
        if saved.endswith(".meta.json"):
            results.stamp(results_dir() / saved.removeprefix("results/"), execution_key=key, chapter=source.stem)
    return key


FAILED = REPO / "_build" / "failed"


def _keep_failed(executed: Path, source: Path) -> str:
    """Keep what a failed run executed, error included, at _build/failed/NN_name.ipynb (never over the committed
    notebook), for whoever reads the failure; returns the words that say where."""
    if not executed.is_file():
        return ""
    FAILED.mkdir(parents=True, exist_ok=True)
    target = FAILED / f"{source.stem}.ipynb"
    os.replace(executed, target)
    return f"; the failed run is at {target.relative_to(REPO) if target.is_relative_to(REPO) else target}"


def execute(source: Path, output: Path | None = None, parameters: dict[str, Any] | None = None,
            timeout: int = 1800) -> Path:
    """Execute one jupytext source; write the executed notebook, with its execution key, to `output` atomically."""
    import jupytext
    import papermill

    output = output or source.with_suffix(".ipynb")
    parameters = parameters or {}
    profile = profiles.load(parameters.get("profile", "auto")).name
    notebook = jupytext.read(source)
    files = execution_key.inputs(source)  # before the run: what it ran with, even if a file changes meanwhile
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{source.stem}-") as tmp:
        unexecuted, executed, trace = Path(tmp) / "in.ipynb", Path(tmp) / "out.ipynb", Path(tmp) / "trace.jsonl"
        renders = Path(tmp) / "figures"  # each figure in the other languages (figure_languages)
        jupytext.write(notebook, unexecuted)
        t0 = time.monotonic()
        try:
            with PeakMemory() as peak, _environment(
                    SERVELAB_CHAPTER=source.stem, SERVELAB_TRACE=str(trace), SERVELAB_FIGURES=str(renders),
                    SERVELAB_I18N_DRAWN=str(trace.with_name("drawn.txt")),
                    SERVELAB_START_LOG=str(trace.with_name("starts.jsonl"))):
                papermill.execute_notebook(
                    str(unexecuted), str(executed), parameters=parameters, cwd=str(source.parent),
                    kernel_name="python3", execution_timeout=timeout, progress_bar=False,
                )
        except papermill.PapermillExecutionError as err:
            evalue = (str(err.evalue).strip().splitlines() or [""])[0]
            kept = _keep_failed(executed, source)
            raise NotebookFailed(f"{source.name}: cell {err.exec_count} raised {err.ename}: {evalue}; "
                                 f"{output.name} was left as it was{kept}") from err
        _record(executed, source, files, profile, parameters, trace, time.monotonic() - t0, peak.gib)
        os.replace(executed, output)
        figure_outputs.keep(renders, output)
    return output


def run_notebooks(profile: str = "auto", names: list[str] | None = None, keep_going: bool = False,
                  out: Path | None = None) -> dict[str, float]:
    """Execute the chapters on `profile`, in place (the committed notebooks) or into the folder `out` (a workspace,
    `servelab.book.workspace`); returns seconds per notebook. With `keep_going`, a failed chapter does not stop
    the ones after it: all run, then NotebookFailed names every one that failed."""
    times: dict[str, float] = {}
    failed: list[str] = []
    parameters = {} if profile == "auto" else {"profile": profile}
    for source in sources(names):
        t0 = time.monotonic()
        print(f"[notebooks] {source.name} ...", flush=True)
        try:
            execute(source, output=out / f"{source.stem}.ipynb" if out else None, parameters=parameters)
        except NotebookFailed as err:
            if not keep_going:
                raise
            failed.append(str(err))
            print(f"[notebooks] FAILED {err}", flush=True)
        times[source.stem] = time.monotonic() - t0
        print(f"[notebooks] {source.stem}: {times[source.stem]:.0f} s", flush=True)
    if failed:
        raise NotebookFailed(f"{len(failed)} of {len(times)} chapters failed: " + " | ".join(failed))
    return times


def build_book(out: Path | None = None, *, languages: tuple[str, ...] | None = None, source: Path = REPO) -> Path:
    """Build the HTML book in each language into `<out>/_build/html/<lang>/` (default: every language), warnings
    as errors, each language with its own doctree folder; `<out>/_build/html/index.html` is the landing page that
    links the five. Returns `<out>/_build/html`. The catalogs under locales/ translate the prose; pages show the
    executed English notebooks' outputs: the committed ones, or those of the Sphinx source folder `source` (a
    workspace, `servelab.book.workspace`), with each figure in the page's language where the run drew one
    (`figure_outputs`)."""
    from servelab.book import sphinx_run
    from servelab.book.i18n import LANGUAGES, check_languages

    languages = check_languages(languages or LANGUAGES)
    build = (out or REPO) / "_build"
    for lang in languages:
        t0 = time.monotonic()
        sphinx_run.run("html", build / "html" / lang, build / "doctrees" / lang, lang, source=source)
        print(f"[book] {lang}: {time.monotonic() - t0:.0f} s -> {build / 'html' / lang}", flush=True)
    built = [lang for lang in LANGUAGES if (build / "html" / lang / "index.html").is_file()]  # this run's, earlier
    (build / "html").mkdir(parents=True, exist_ok=True)
    (build / "html" / "index.html").write_text(sphinx_run.landing_page(built), encoding="utf-8")
    return build / "html"
