"""Chapters run with other parameters and in other languages, proven without executing a chapter a second time:
papermill puts a non-default parameter where the chapter reads it, every label a chapter drew when it was
executed is translated in every catalog, and what the committed run saved names the pinned engines. (Code of
a translated notebook is byte-identical to English: tests/test_translations.py; a real papermill run with a
parameter: tests/test_execution_key.py; the engine side of a partial-block budget: test_measure_kv_capacity.)"""

from __future__ import annotations

import json

import nbformat
import papermill
import pytest

from servelab.book import catalogs, chapters, execution_key, translated_notebooks
from servelab.machine.paths import REPO
from tests.conftest import pinned_version

SOURCES = chapters.sources()


def test_a_translated_chapter_takes_a_non_default_parameter_where_it_reads_it(tmp_path):
    [path] = translated_notebooks.write("ja", ["02_kv_cache_memory"], out=tmp_path)
    nb = papermill.parameterize.parameterize_notebook(papermill.iorw.load_notebook_node(str(path)),
                                                      {"profile": "cpu", "kv_cache_tokens": 5952})
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    at = next(i for i, t in enumerate(tags) if "injected-parameters" in t)
    assert "parameters" in tags[at - 1], "the override follows the chapter's own parameters cell"
    assert "kv_cache_tokens = 5952" in nb.cells[at].source and 'profile = "cpu"' in nb.cells[at].source
    assert "kv_cache_tokens = " in nb.cells[at - 1].source, "the parameter is a knob the chapter declares"
    later = [c.source for c in nb.cells[at + 1:] if c.cell_type == "code"]
    assert any("kv_cache_tokens" in src for src in later), "and the chapter uses it"


# Found when this check first covered every chapter (it covered 02 in Japanese before): these chapters pass
# literal titles and legend names to drawing helpers (draw_block_tables, plot_request_lanes, draw_radix_tree, the
# timeline's prefill/decode, the speculative methods' and tasks' names) that translate them at run time, but
# code_messages does not extract them, and some helpers translate a title a second time after a number was
# appended. A reader of the translated notebooks sees those labels in English. Issue 24, item 6 (figures in the
# participant's language) owns the fix; strict: the test fails as soon as one of them is fixed, to be removed.
UNTRANSLATED_LABELS = {"03_paged_attention", "04_prefix_caching", "05_chunked_prefill", "06_speculative_decoding"}


@pytest.mark.parametrize("source", [
    pytest.param(s, marks=pytest.mark.xfail(strict=True, reason="labels drawn through helpers: issue 24, item 6"))
    if s.stem in UNTRANSLATED_LABELS else s for s in SOURCES], ids=lambda p: p.stem)
def test_every_label_a_chapter_drew_is_translated(source):
    meta = execution_key.recorded(source.with_suffix(".ipynb"))
    assert meta and "drawn" in meta, f"{source.stem}: executed without a record of its labels"
    for lang in catalogs.TRANSLATED:
        known = catalogs.translation(lang, catalogs.CODE_DOMAIN)
        missing = [m for m in meta["drawn"] if m not in known and not catalogs.verbatim(m)]
        assert missing == [], f"{source.stem} draws labels the {lang} catalog does not translate"


def test_every_chapter_drew_a_label():
    """The record is real: a chapter's banner alone asks for translated words."""
    assert all(execution_key.recorded(s.with_suffix(".ipynb"))["drawn"] for s in SOURCES)


def test_committed_results_name_the_pinned_engines(cpu):
    metas = sorted((REPO / "results" / "cpu").glob("*.meta.json"))
    assert metas
    for path in metas:
        meta = json.loads(path.read_text())
        assert meta["profile"] == "cpu", path.name
        assert meta["vllm"].split("+")[0] == pinned_version(cpu.vllm_env), path.name
        assert meta["sglang"] == pinned_version(cpu.sglang_env), path.name


def test_unknown_notebook_is_one_line():
    with pytest.raises(ValueError, match="unknown notebook.*99_nope.*available: 00_setup_check"):
        chapters.sources(["99_nope"])


def test_failed_run_leaves_the_committed_notebook_untouched_and_keeps_the_failed_one(tmp_path, monkeypatch):
    monkeypatch.setattr(chapters, "FAILED", tmp_path / "failed")
    source = tmp_path / "bad.py"
    source.write_text('# %% tags=["parameters"]\nprofile = "auto"\n\n# %%\nraise SystemExit("boom")\n')
    target = tmp_path / "bad.ipynb"
    target.write_text("original")
    expected = (f"bad.py: cell 2 raised SystemExit: boom; bad.ipynb was left as it was; "
                f"the failed run is at {tmp_path / 'failed' / 'bad.ipynb'}")
    with pytest.raises(chapters.NotebookFailed) as err:
        chapters.execute(source, output=target)
    assert str(err.value) == expected
    assert target.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ipynb", "bad.py", "failed"]
    kept = nbformat.read(tmp_path / "failed" / "bad.ipynb", as_version=4)
    assert [o.ename for c in kept.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"] \
        == ["SystemExit"]


def test_keep_going_runs_every_chapter_and_names_each_failure(tmp_path, monkeypatch):
    ran = []

    def execute(source, output, parameters):
        ran.append(source.stem)
        assert output is None, "in place"
        if source.stem != "b":
            raise chapters.NotebookFailed(f"{source.name}: cell 1 raised X")

    monkeypatch.setattr(chapters, "sources", lambda names: [tmp_path / f"{n}.py" for n in "abc"])
    monkeypatch.setattr(chapters, "execute", execute)
    with pytest.raises(chapters.NotebookFailed, match=r"^2 of 3 chapters failed: a.py: cell 1 raised X \| c.py"):
        chapters.run_notebooks("cpu", keep_going=True)
    assert ran == ["a", "b", "c"]
    ran.clear()
    with pytest.raises(chapters.NotebookFailed, match="^a.py: cell 1 raised X$"):
        chapters.run_notebooks("cpu")
    assert ran == ["a"]
