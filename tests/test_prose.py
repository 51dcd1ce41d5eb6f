"""Prose edits reach the executed notebook without an execution; code edits are refused."""

from __future__ import annotations

import nbformat
import pytest

from servelab import cli
from servelab.book import chapters, execution_key, prose

HEADER = ("# ---\n# jupyter:\n#   kernelspec:\n#     display_name: Python 3\n#     language: python\n"
          "#     name: python3\n# ---\n\n")


def _source(path, words, code='print("measured")'):
    path.write_text(HEADER + f'# %% tags=["parameters"]\nprofile = "auto"\n\n# %% [markdown]\n# {words}\n\n'
                    f"# %%\n{code}\n")
    return path


@pytest.fixture
def executed(tmp_path):
    source = _source(tmp_path / "07_tiny.py", "The first words.")
    chapters.execute(source, parameters={"profile": "cpu"})
    return source


def test_sync_carries_new_prose_and_keeps_outputs_key_and_parameters(executed):
    before = nbformat.read(executed.with_suffix(".ipynb"), as_version=4)
    key = execution_key.status(executed, "cpu").key
    assert not prose.sync(executed)  # nothing to carry yet
    _source(executed, "Better words, and a new paragraph.\n\n# %% [markdown]\n# Another cell.")
    assert execution_key.status(executed, "cpu").current and execution_key.status(executed, "cpu").key == key
    assert prose.sync(executed)
    after = nbformat.read(executed.with_suffix(".ipynb"), as_version=4)
    kinds = [(c.cell_type, c.source) for c in after.cells]
    assert [k for k, _ in kinds] == ["code", "code", "markdown", "markdown", "code"]  # injected parameters kept
    assert ("markdown", "Better words, and a new paragraph.") in kinds and ("markdown", "Another cell.") in kinds
    assert after.cells[-1].outputs == before.cells[-1].outputs and after.metadata == before.metadata
    assert not prose.sync(executed)


@pytest.mark.parametrize("code", ['print("other")', 'print("measured")\nprint("again")'])
def test_sync_refuses_a_changed_code_cell_and_leaves_the_notebook(executed, code):
    path = executed.with_suffix(".ipynb")
    before = path.read_text()
    _source(executed, "New words.", code)
    with pytest.raises(prose.CodeChanged, match="code cell 2 .* differs.*python -m servelab notebooks 07_tiny"):
        prose.sync(executed)
    assert path.read_text() == before


def test_sync_refuses_a_new_code_cell(executed):
    _source(executed, "Words.", 'print("measured")\n\n# %%\nx = 1')
    with pytest.raises(prose.CodeChanged, match="3 code cells in the source, 2 executed"):
        prose.sync(executed)


def test_the_prose_command_on_the_committed_chapters_changes_nothing(capsys):
    assert cli.main(["prose"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"[prose] {s.stem}: unchanged" for s in chapters.sources()]


def test_the_prose_command_with_an_unknown_chapter_is_one_line(capsys):
    assert cli.main(["prose", "99_none"]) == 2
    assert "unknown notebook(s) 99_none" in capsys.readouterr().err
