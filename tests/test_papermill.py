"""One chapter executed with a non-default parameter, the way a reader or CI would run it: its Japanese copy
(markdown from the catalogs, code identical), so the same run also shows a translated notebook executes and that
every label it draws is in the `servelab` catalog."""

from __future__ import annotations

import json

import jupytext
import nbformat
import pytest

from servelab.book import catalogs, chapters, translated_notebooks
from tests.conftest import pinned_version


@pytest.mark.server
def test_kv_chapter_with_a_smaller_budget(tmp_path, monkeypatch, cpu, require_engine):
    require_engine("vllm")
    require_engine("sglang")
    monkeypatch.setenv("SERVELAB_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("SERVELAB_LANG", "ja")
    monkeypatch.setenv("SERVELAB_I18N_MISSES", str(tmp_path / "misses.tsv"))
    [source] = translated_notebooks.write("ja", ["01_kv_cache_memory"], out=tmp_path)
    budget = 5952  # tokens: 46.5 blocks of vLLM's 128 on the cpu profile: vLLM drops the half block, SGLang keeps it
    out = chapters.execute(source, output=tmp_path / "01.ipynb",
                           parameters={"profile": "cpu", "kv_cache_tokens": budget})

    nb = nbformat.read(out, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and f"kv_cache_tokens = {budget}" in injected[0].source
    check = json.loads((tmp_path / "results" / "cpu" / "kv_capacity_check.json").read_text())
    meta = json.loads((tmp_path / "results" / "cpu" / "kv_capacity_check.meta.json").read_text())
    assert check["kv_cache_tokens"] == budget
    assert check["engine_tokens"] == check["planned_tokens"], check
    assert budget - check["block_size"] < check["planned_tokens"] < budget, check  # whole blocks, remainder dropped
    sgl = json.loads((tmp_path / "results" / "cpu" / "kv_capacity_check_sglang.json").read_text())
    assert sgl["engine_tokens"] == budget, sgl  # pages of one token keep every token
    assert meta["profile"] == "cpu"
    assert meta["vllm"].split("+")[0] == pinned_version(cpu.vllm_env), meta["vllm"]
    assert not list(tmp_path.glob(".01_kv_cache_memory-*")), "temporary files left behind"

    english = jupytext.read(chapters.NOTEBOOKS / "01_kv_cache_memory.py")
    ran = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    assert [c.source for c in ran if c.cell_type == "code"] == [
        c.source for c in english.cells if c.cell_type == "code"]
    assert [c.source for c in ran if c.cell_type == "markdown"] == [
        c.source for c in nbformat.read(source, as_version=4).cells if c.cell_type == "markdown"]
    drawn = (tmp_path / "misses.tsv").read_text().splitlines() if (tmp_path / "misses.tsv").exists() else []
    known = {m.id for m in catalogs.read(catalogs.po_path("ja", catalogs.CODE_DOMAIN)) if m.id}
    assert {line.split("\t", 1)[1] for line in drawn} <= known, "labels drawn at run time that no catalog holds"


def test_unknown_notebook_is_one_line():
    with pytest.raises(ValueError, match="unknown notebook.*99_nope.*available: 00_setup_check"):
        chapters.sources(["99_nope"])


def test_failed_run_leaves_the_committed_notebook_untouched(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text('# %% tags=["parameters"]\nprofile = "auto"\n\n# %%\nraise SystemExit("boom")\n')
    target = tmp_path / "bad.ipynb"
    target.write_text("original")
    expected = "bad.py: cell 2 raised SystemExit: boom; bad.ipynb was left as it was"
    with pytest.raises(chapters.NotebookFailed, match=expected):
        chapters.execute(source, output=target)
    assert target.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ipynb", "bad.py"]
