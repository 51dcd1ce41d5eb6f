"""The intro's chapter list (servelab/book/intro_page.py, book/intro.md between its markers) is generated.

The page is the one the code renders (a stale one fails, naming the command); the list follows `_toc.yml`, with each
chapter's run time read from its executed notebook and its own first paragraph, which its catalogs already
translate; the line with the number has no word to translate; the intro's catalogs carry the chapters' translations.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from babel.messages.catalog import Catalog

from servelab.book import catalogs, intro_page
from servelab.machine.paths import REPO


def _generated() -> str:
    page = intro_page.PAGE.read_text(encoding="utf-8")
    return page[page.index(intro_page.BEGIN):page.index(intro_page.END)]


def test_the_chapter_list_is_current():
    page = intro_page.PAGE.read_text(encoding="utf-8")
    assert intro_page.render(page) == page, f"book/intro.md's chapter list is stale: {intro_page.COMMAND}"


def test_check_fails_on_a_stale_list_and_names_the_command(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "intro.md"
    stale.write_text(re.sub(r"⏱ \d+", "⏱ 999", intro_page.PAGE.read_text(encoding="utf-8"), count=1),
                     encoding="utf-8")
    monkeypatch.setattr(intro_page, "PAGE", stale)
    monkeypatch.setattr(intro_page, "REPO", tmp_path)
    assert intro_page.main(["--check"]) == 1
    assert capsys.readouterr().err.strip() == f"intro.md is out of date; regenerate it: {intro_page.COMMAND}"
    stale.write_text("# Introduction\n", encoding="utf-8")
    assert intro_page.main(["--check"]) == 2
    assert "needs one line '% BEGIN chapter list" in capsys.readouterr().err


def test_the_list_follows_the_toc_with_measured_run_times():
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    listed = re.findall(r"^- (?:\{doc\}`([a-z_]+)`|\*\*\d\d\*\* \[\]\(\.\./(notebooks/\w+)\.ipynb\) ⏱ \d+)$",
                        _generated(), re.M)
    assert [f"book/{doc}" if doc else nb for doc, nb in listed] == files
    assert re.findall(r"^\*\*(.+)\*\*$", _generated(), re.M) == [p["caption"] for p in toc["parts"]]
    for name in (f.removeprefix("notebooks/") for f in files if f.startswith("notebooks/")):
        meta = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())["metadata"]["servelab"]
        assert meta["profile"] == "cpu"
        line = f"- **{name[:2]}** [](../notebooks/{name}.ipynb) ⏱ {math.ceil(meta['seconds'] / 60)}"
        assert line in _generated().splitlines(), name


def test_each_summary_is_a_paragraph_its_chapter_translates_and_no_number_needs_a_translator():
    for part in intro_page.parts():
        for name in (f.removeprefix("notebooks/") for f in part.files if f.startswith("notebooks/")):
            text = intro_page.summary(name)
            assert f"\n  {text}\n" in _generated(), name
            for lang in catalogs.TRANSLATED:
                chapter = {intro_page.relink(m) for m in catalogs.translation(lang, f"notebooks/{name}")}
                assert text in chapter, f"{lang}: {name}'s first paragraph is not translated in its catalog"
    numbered = [line for line in _generated().splitlines() if "⏱ " in line and line.startswith("- ")]
    assert numbered and all(catalogs.verbatim(line.removeprefix("- ")) for line in numbered)
    assert not re.search(r"\d", intro_page.LEGEND)


def test_the_intro_catalogs_carry_the_chapters_translations():
    for lang in catalogs.TRANSLATED:
        have = catalogs.translation(lang, intro_page.DOMAIN)
        known = intro_page.known(lang)
        stale = [m[:60] for m in have if m in known and have[m] != known[m]]
        assert not stale, f"{lang}/book/intro lags its chapters' catalogs: {intro_page.COMMAND} --catalogs: {stale}"


def test_summary_takes_the_first_paragraph_after_the_title_and_relinks_it():
    cell = ("# Title: sub\n\n:::{dropdown} How we know: x\nhidden\n:::\n\nFirst line,\nsecond line, see "
            "[chapter 01](01_serving_basics.ipynb#ttft), {doc}`two <02_kv_cache_memory>` and "
            "[the ledger](../book/claims.md).\n\nSecond paragraph.")
    assert intro_page.summary("99_x", cell) == (
        "First line, second line, see [chapter 01](../notebooks/01_serving_basics.ipynb#ttft), "
        "{doc}`two <../notebooks/02_kv_cache_memory>` and "
        "[the ledger](../book/claims.md).")
    with pytest.raises(ValueError, match="99_x: its first markdown cell does not start with its title"):
        intro_page.summary("99_x", "No title.")
    with pytest.raises(ValueError, match="99_x: no paragraph after its title"):
        intro_page.summary("99_x", "# Title\n\n- a list\n")
    kept = "[web](https://example.org/a.md) [x](#here) [y](/abs.md)"
    assert intro_page.relink(kept) == kept


def test_reuse_gives_each_known_entry_its_translation(tmp_path, monkeypatch):
    monkeypatch.setattr(catalogs, "LOCALES", tmp_path)
    catalog = Catalog(locale="de", domain="book/x", fuzzy=False)
    catalog.add("empty")
    catalog.add("fuzzy", "alt", flags=["fuzzy"], previous_id=["old"])
    catalog.add("revised", "veraltet")
    catalog.add("same", "gleich")
    catalog.add("own", "eigen")
    catalogs.write(catalog, catalogs.po_path("de", "book/x"))
    known = {"empty": "leer", "fuzzy": "unscharf", "revised": "überarbeitet", "same": "gleich", "absent": "fehlt"}
    assert catalogs.reuse("de", "book/x", known) == 3
    assert catalogs.translation("de", "book/x") == {"empty": "leer", "fuzzy": "unscharf", "revised": "überarbeitet",
                                                    "same": "gleich", "own": "eigen"}
    assert catalogs.stat("de", "book/x").complete
