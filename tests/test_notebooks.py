"""The committed notebooks: paired with their sources, executed, parameterised, and checked."""

from __future__ import annotations

import jupytext
import nbformat
import pytest

from servelab.book import chapters

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
    assert [c.source for c in cells] == [c.source for c in expected], "re-run: python -m servelab notebooks"
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


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_engine_notebooks_check_an_engine_result(source):
    """A notebook that starts an engine must compare at least one engine-derived output (nbval),
    so that skipping or breaking its engine cells fails the test run."""
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = _code(nb)
    starts = [i for i, c in enumerate(code) if any(k in c.source for k in ("running(", "Server("))]
    assert starts, f"{source.stem} starts no engine: every chapter measures a real one"
    checked = [c for c in code[starts[0]:] if c.source.startswith("# NBVAL_CHECK_OUTPUT")]
    assert checked, "no NBVAL_CHECK_OUTPUT cell after the first engine cell"
    for cell in checked:
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert text.split() and set(text.split()) == {"True"}, f"checked cell is not all True: {cell.source!r}"
