"""Translations never go stale: catalogs complete and current, markup and glossary kept, notebooks' code untouched.

`test_catalogs_are_complete` and `test_catalogs_match_the_english_sources` are what make a prose edit
without a catalog update fail CI. Their messages say which catalog lacks what, and the command that fixes it.
"""

from __future__ import annotations

import jupytext
import nbformat
import pytest

from servelab.book import catalogs, chapters, code_messages, glossary, i18n, po_markup, translated_notebooks

CORE_TERMS = ("KV cache", "prefill", "decode", "block", "page", "radix tree", "preemption", "speculative decoding",
              "acceptance rate", "throughput", "latency", "TTFT", "ITL", "chunked prefill", "prefix caching",
              "eviction", "scheduler", "batch", "token", "draft model", "target model")


@pytest.fixture(scope="module")
def templates():
    found, problems = catalogs.templates()
    return found, problems


# --- the catalogs in the repository --------------------------------------------------------------------------

def test_catalogs_match_the_english_sources(templates):
    """Re-extract the English messages and compare: a stale catalog is one whose msgids differ."""
    found, _ = templates
    wrong = []
    for lang in catalogs.TRANSLATED:
        if set(catalogs.domains(lang)) != set(found):
            wrong.append(f"{lang}: catalogs {sorted(set(catalogs.domains(lang)) ^ set(found))} missing or extra")
        for domain, template in found.items():
            path = catalogs.po_path(lang, domain)
            have = {m.id for m in catalogs.read(path) if m.id} if path.exists() else set()
            want = {m.id for m in template if m.id}
            if have != want:
                wrong.append(f"{lang}/{domain}: {len(want - have)} new English messages, {len(have - want)} gone")
    assert not wrong, "catalogs behind the English sources; run `python -m servelab translations update`:\n" + \
        "\n".join(wrong)


def test_catalogs_are_complete():
    """Every entry translated, none fuzzy (Sphinx would show English), none obsolete."""
    stats = catalogs.stats()
    assert {s.lang for s in stats} == set(catalogs.TRANSLATED)
    todo = [s.line() for s in stats if not s.complete]
    assert not todo, (f"{len(todo)} of {len(stats)} catalogs unfinished; `python -m servelab translations todo LANG "
                      "DOMAIN` prints what is left of one:\n" + "\n".join(todo))


def test_no_translation_breaks_markup():
    broken = [line for s in catalogs.stats() for line in s.markup]
    assert not broken, "\n".join(broken)


def test_translations_use_the_glossary():
    found = [p for lang in catalogs.TRANSLATED for d in catalogs.domains(lang) for p in glossary.problems(lang, d)]
    assert not found, "\n".join(found)


def test_every_language_has_a_glossary_of_the_core_terms():
    for lang in catalogs.TRANSLATED:
        terms = {t.english: t for t in glossary.terms(lang)}
        assert set(CORE_TERMS) <= set(terms), f"{lang}: missing {sorted(set(CORE_TERMS) - set(terms))}"
        assert all(t.use.strip() for t in terms.values()), lang


def test_no_glued_value_in_translatable_text(templates):
    """A translated paragraph loses its `{glue}` value (with a warning), so glued values stay out of prose."""
    found, _ = templates
    glued = [f"{d}: {m.id[:70]!r}" for d, t in found.items() for m in t if m.id and "{glue" in m.id]
    assert not glued, "\n".join(glued)


def test_every_plot_label_is_extractable(templates):
    """A label built at run time (f-string) cannot be in a catalog, so it would stay English."""
    _, problems = templates
    assert not problems, "\n".join(problems)


# --- the checks themselves -------------------------------------------------------------------------------------

@pytest.mark.parametrize("msgstr, lost", [
    ("Siehe {doc}`running` und `a` mit **b**.", None),
    ("`a` und **b**, siehe {doc}`running`.", None),  # reordered: fine
    ("Siehe {doc}`runing` und `a` mit **b**.", "role {doc}"),
    ("Siehe {doc}`running` und a mit **b**.", "inline code"),
    ("Siehe {doc}`running` und `a` mit **b.", "strong"),
    ("- Siehe {doc}`running` und `a` mit **b**.", "blocks"),
])
def test_markup_differences_are_found(msgstr, lost):
    found = po_markup.differences("See {doc}`running` and `a` with **b**.", msgstr)
    assert (found == []) if lost is None else any(lost in f for f in found), found


def test_markup_catches_cjk_emphasis_that_does_not_close():
    # CommonMark: `**` after punctuation and before a letter does not close, so the bold is lost.
    assert po_markup.differences("**Readers**, who", "**「読者」**は") == ["lost strong"]
    assert po_markup.differences("**Readers**, who", "**読者**：") == []


def test_entries_without_words_need_no_translator():
    assert not po_markup.has_words("`./lab.sh`") and not po_markup.has_words("104")
    assert not po_markup.has_words("{doc}`running`, `cpu` (2)")
    assert po_markup.has_words("`cpu` profile") and po_markup.has_words("[the docs](https://a.org)")
    assert catalogs.verbatim("ja: 同時リクエスト<br>es: la memoria crece") and catalogs.verbatim("`cpu`")
    assert not catalogs.verbatim("ja: 同時<br>the same claim") and not catalogs.verbatim("Japanese: a quote")


def test_markup_links_math_and_placeholders():
    assert po_markup.differences("[the docs](https://a.org) and $x$", "$x$ y [los docs](https://a.org)") == []
    assert "lost link 'https://a.org'" in po_markup.differences("[a](https://a.org)", "[a](https://b.org)")
    assert po_markup.differences("k = {k}, %s", "k={k} %s", code=True) == []
    assert po_markup.differences("k = {k}", "k", code=True) == ["lost placeholder '{k}'"]


@pytest.fixture
def scratch_catalog(tmp_path, monkeypatch):
    """Write a catalog as the only one, domain ``x``, of any language, in a temporary folder."""
    monkeypatch.setattr(catalogs, "po_path", lambda lang, domain: tmp_path / "x.po")
    monkeypatch.setattr(catalogs, "domains", lambda lang: ["x"])
    return lambda catalog: catalogs.write(catalog, tmp_path / "x.po")


def test_glossary_flags_a_missing_term(scratch_catalog):
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="de")
    catalog.add("Each block holds tokens.", "Jeder Abschnitt enthält Token.")
    catalog.add("The block table.", "Die Tabelle.", user_comments=["glossary-ignore: block (a table, not a KV block)"])
    catalog.add("A KV cache.", "Ein KV-Cache.")
    scratch_catalog(catalog)
    assert glossary.problems("de", "x") == ["de/x: 'block' should read 'Block': 'Jeder Abschnitt enthält Token.'"]


def test_stat_counts_fuzzy_as_not_translated(scratch_catalog, tmp_path):
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="es")
    catalog.add("one", "uno")
    catalog.add("two", "dos", flags=["fuzzy"])
    catalog.add("three", "")
    scratch_catalog(catalog)
    s = catalogs.stat("es", "x")
    assert (s.total, s.translated, s.fuzzy, s.untranslated, s.complete) == (3, 1, 1, 1, False)
    assert catalogs.todo("es", "x").count("msgid \"t") == 2  # two, three
    with pytest.raises(ValueError, match="no catalog 'y' in es; available: x"):
        catalogs.todo("es", "y")
    chunk = tmp_path / "chunk.po"
    chunk.write_text('#, fuzzy\nmsgid "two"\nmsgstr "dos"\n\nmsgid "three"\nmsgstr "tres"\n')
    assert catalogs.apply("es", "x", chunk) == (1, 1)
    chunk.write_text('msgid "two"\nmsgstr "dos"\n')
    assert catalogs.apply("es", "x", chunk) == (1, 0)
    assert catalogs.stat("es", "x").complete


def test_code_messages_finds_literals_and_refuses_f_strings(tmp_path):
    source = tmp_path / "x.py"
    source.write_text('plots.axes("T", "x (s)", "")\nlabel("a" if c else "b")\nnames = {1: N_("c")}\n'
                      'plots.label(f"measured, k = {k}")\nt(name)\n')
    found, problems = code_messages.scan(source)
    assert [f.msgid for f in found] == ["T", "x (s)", "a", "b", "c"]
    assert len(problems) == 1 and "x.py:4: label()" in problems[0]


# --- code strings at run time ----------------------------------------------------------------------------------

def test_t_reads_the_catalog_and_records_misses(tmp_path, monkeypatch):
    msgid, msgstr = next(((m.id, m.string) for m in catalogs.read(catalogs.po_path("ja", "servelab"))
                          if m.id and m.string and not m.fuzzy), ("profile", None))
    monkeypatch.setenv("SERVELAB_I18N_MISSES", str(tmp_path / "misses"))
    monkeypatch.setenv("SERVELAB_LANG", "ja")
    assert i18n.t(msgid) == (msgstr or msgid)
    assert i18n.t("no such label, surely") == "no such label, surely"
    assert (tmp_path / "misses").read_text().splitlines()[-1] == "ja\tno such label, surely"
    monkeypatch.setenv("SERVELAB_LANG", "xx")
    with pytest.raises(ValueError, match="unknown SERVELAB_LANG 'xx'; accepted: en, ja, ko, de, es"):
        i18n.t("profile")


def test_a_kernel_in_a_translated_folder_speaks_its_language(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVELAB_LANG", raising=False)
    (tmp_path / "notebooks" / "ko").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "notebooks" / "ko")
    assert i18n.language() == "ko"
    monkeypatch.chdir(tmp_path / "notebooks")
    assert i18n.language() == "en"


# --- translated notebooks --------------------------------------------------------------------------------------

def test_translated_notebooks_keep_code_cells_byte_identical(tmp_path):
    written = translated_notebooks.write("ja", out=tmp_path)
    assert len(written) == len(chapters.sources())
    for path in written:
        source = jupytext.read(chapters.NOTEBOOKS / f"{path.stem}.py")
        executed = nbformat.read(chapters.NOTEBOOKS / path.name, as_version=4)
        translated = nbformat.read(path, as_version=4)
        assert [c.cell_type for c in translated.cells] == [c.cell_type for c in source.cells], path.name
        for ours, theirs in zip(translated.cells, source.cells, strict=True):
            if theirs.cell_type == "code":
                assert ours.source == theirs.source and ours.metadata == theirs.metadata, path.name
                assert ours.outputs == [], "no executed notebook where it writes: no outputs"
        shown = [c.source for c in executed.cells
                 if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])]
        assert [c.source for c in translated.cells if c.cell_type == "code"] == shown, "the book's code cells"


def test_translated_blocks_are_the_catalogs_messages():
    """The notebook writer finds the same paragraphs Sphinx's gettext builder extracts (else it cannot translate)."""
    for source in chapters.sources():
        mine = set(translated_notebooks.msgids(source.with_suffix(".ipynb")))
        theirs = {m.id for m in catalogs.read(catalogs.po_path("ja", f"notebooks/{source.stem}")) if m.id}
        assert mine <= theirs, f"{source.stem}: {sorted(mine - theirs)[:3]}"


def test_markdown_is_translated_block_by_block():
    cell = "## Title\n\nFirst line\nsecond line.\n\n- item one\n  continues\n- `code` item"
    messages = {"Title": "Titel", "First line second line.": "Erste Zeile.", "item one continues": "Punkt eins"}
    text, missing = translated_notebooks.translate_markdown(cell, messages)
    assert text == "## Titel\n\nErste Zeile.\n\n- Punkt eins\n- `code` item"
    assert missing == ["`code` item"]


def test_a_dropdowns_title_and_body_are_translated_and_its_fences_kept():
    cell = "Core.\n\n:::{dropdown} How we know: the source\nThe engine\ndoes it.\n\n- a point\n:::\n\nAfter."
    messages = {"How we know: the source": "Woher wir es wissen: die Quelle",
                "The engine does it.": "Die Engine tut es.", "a point": "ein Punkt", "After.": "Danach."}
    text, missing = translated_notebooks.translate_markdown(cell, messages)
    assert text == ("Core.\n\n:::{dropdown} Woher wir es wissen: die Quelle\nDie Engine tut es.\n\n- ein Punkt\n:::"
                    "\n\nDanach.")
    assert missing == ["Core."]
    ending = "Core.\n\n:::{dropdown} How we know: the source\nThe engine\ndoes it.\n:::"  # the cell's last token
    assert translated_notebooks.translate_markdown(ending, messages)[0].endswith("Die Engine tut es.\n:::")


def test_the_intro_is_translated_in_every_language():
    """The pilot page: complete in all four catalogs, so the pipeline is proven end to end."""
    for lang in catalogs.TRANSLATED:
        assert catalogs.stat(lang, "book/intro").complete, catalogs.stat(lang, "book/intro").line()


def test_catalogs_are_in_the_canonical_form():
    """What `update` writes (one line per message, no locations): a hand edit that rewraps fails here."""
    for lang in catalogs.TRANSLATED:
        for domain in catalogs.domains(lang):
            text = catalogs.po_path(lang, domain).read_text()
            assert "\n#: " not in text and '\nmsgstr ""\n"' not in text.split("\n\n", 1)[1], f"{lang}/{domain}"



def test_a_fuzzy_entrys_previous_english_survives_a_read_and_write(tmp_path):
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="de")
    catalog.add("new English", "alt", flags=["fuzzy"], previous_id=["the old English, " * 8])
    catalog.add("kept", "behalten", user_comments=["glossary-ignore: block (a table)"])
    catalogs.write(catalog, tmp_path / "a.po")
    first = (tmp_path / "a.po").read_text()
    assert '#| msgid "the old English, the old English' in first  # one line, not wrapped
    catalogs.write(catalogs.read(tmp_path / "a.po"), tmp_path / "b.po")
    assert (tmp_path / "b.po").read_text() == first  # nothing piles up as "# | msgid" comments
    # what earlier writes left: the previous English read as comments, wrapped, and a translator's note
    (tmp_path / "c.po").write_text('# glossary-ignore: block (a table)\n# | msgid "the old\n# English"\n'
                                   '#, fuzzy\nmsgid "new English"\nmsgstr "alt"\n')
    entry = next(m for m in catalogs.read(tmp_path / "c.po") if m.id)
    assert entry.user_comments == ["glossary-ignore: block (a table)"] and entry.previous_id == ["the old English"]
