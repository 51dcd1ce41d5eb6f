"""The committed notebooks: paired with their sources, executed, parameterised, and checked."""

from __future__ import annotations

import json

import jupytext
import nbformat
import pytest

from servelab.book import chapters, execution_key, launch_plan
from servelab.machine.paths import REPO

SOURCES = chapters.sources()


def _code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def test_there_are_notebooks():
    assert len(SOURCES) >= 2


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_executed_notebook_matches_its_source(source):
    executed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    cells = [c for c in executed.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    expected = jupytext.read(source).cells
    assert [c.source for c in cells] == [c.source for c in expected], \
        f"prose edited: python -m servelab prose {source.stem}; code edited: python -m servelab notebooks {source.stem}"
    assert [c.cell_type for c in cells] == [c.cell_type for c in expected]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_has_a_profile_parameter_and_banner(source):
    nb = jupytext.read(source)
    params = [c for c in _code(nb) if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and 'profile = "auto"' in params[0].source
    assert "banner.start(profile)" in _code(nb)[1].source, "the cell after the parameters prints the banner"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_committed_notebook_ran_every_cell_without_error(source):
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    for cell in _code(nb):
        assert cell.execution_count is not None, f"unexecuted cell: {cell.source[:60]!r}"
        assert not [o for o in cell.outputs if o.output_type == "error"]


@pytest.mark.parametrize("source", [s for s in SOURCES if launch_plan.starts_engines(s)], ids=lambda p: p.stem)
def test_engine_notebooks_check_an_engine_result(source):
    """A notebook that starts an engine must compare at least one engine-derived output (nbval),
    so that skipping or breaking its engine cells fails the test run."""
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = _code(nb)
    assert nb.metadata.get("servelab", {}).get("starts"), f"{source.stem}'s run recorded no engine start"
    # a chapter's servers come from its declarations (servelab/measure/chapter_servers): `.server(prof)`
    starts = [i for i, c in enumerate(code) if any(k in c.source for k in ("running(", "Server(", ".server(prof"))]
    assert starts, f"{source.stem} starts no engine: every chapter measures a real one"
    checked = [c for c in code[starts[0]:] if c.source.startswith("# NBVAL_CHECK_OUTPUT")]
    assert checked, "no NBVAL_CHECK_OUTPUT cell after the first engine cell"


@pytest.mark.parametrize("source", [s for s in SOURCES if not launch_plan.starts_engines(s)], ids=lambda p: p.stem)
def test_a_chapter_that_starts_no_engine_reads_saved_results_and_checks_them(source):
    """A chapter listed in launch_plan.READS_ONLY starts no server and declares none, reads other chapters' saved
    results, and compares what it computed from them (nbval)."""
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = _code(nb)
    assert not nb.metadata["servelab"].get("starts"), f"{source.stem} is listed as starting no engine, yet started one"
    assert not any(k in c.source for c in code for k in ("running(", "Server(", ".server(prof", "chapter_servers"))
    assert nb.metadata["servelab"]["reads"], f"{source.stem} read no saved result"
    assert any(c.source.startswith("# NBVAL_CHECK_OUTPUT") for c in code), f"{source.stem} has no checked cell"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_every_check_cell_printed_true(source):
    """What nbval compares in a chapter it does not re-execute is what the committed notebook printed. A GPU
    profile's run (the GPU workflow runs this test on it) may print "n/a" for a claim its profile cannot make; the
    cpu profile must test every claim."""
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    allowed = {"True"} if nb.metadata.get("servelab", {}).get("profile", "cpu") == "cpu" else {"True", "n/a"}
    for cell in [c for c in _code(nb) if c.source.startswith("# NBVAL_CHECK_OUTPUT")]:
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert text.split() and set(text.split()) <= allowed, f"checked cell is not all True: {cell.source!r}"


def _reexecuted(session: pytest.Session) -> set[str]:
    """The notebooks this session re-executes under nbval (their cells are collected as items), and those ./test.sh
    re-executes in its lanes, beside this session or after it (their exit status is the run's)."""
    lanes = {name for name in session.config.getoption("--reexecuted-in-lanes").split(",") if name}
    unknown = lanes - {s.stem for s in SOURCES}
    assert not unknown, f"--reexecuted-in-lanes names no chapter: {', '.join(sorted(unknown))}"
    return {item.path.stem for item in session.items if item.path.suffix == ".ipynb"} | lanes


@pytest.mark.executed
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_committed_notebook_is_current_or_reexecuted(source, request):
    """An unchanged chapter is not re-run: its committed notebook must have been executed with the inputs it has
    now, on the cpu profile, with no parameter but the profile, and no result it read may be newer than it."""
    if source.stem in _reexecuted(request.session):
        return  # nbval re-executes it in this session and compares it with the committed outputs
    st = execution_key.status(source, "cpu")
    assert st.current, f"{source.stem} is stale ({st.why}): re-execute it (python -m servelab notebooks " \
                       f"{source.stem}) or let ./test.sh re-execute it under nbval"
    meta = execution_key.recorded(source.with_suffix(".ipynb"))
    assert set(meta["parameters"]) <= {"profile"}, meta["parameters"]
    for read in meta["reads"]:
        saved = json.loads((REPO / read).with_suffix("").with_suffix(".meta.json").read_text()) \
            if not read.endswith(".meta.json") else json.loads((REPO / read).read_text())
        assert saved["time_utc"] <= meta["executed_utc"], f"{read} is newer than {source.stem}'s execution"
