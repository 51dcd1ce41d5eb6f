"""The book builds in every language with warnings as errors from the committed notebooks, and shows what it should.

Tests that use the `html` fixture build the book (all five languages) and are marked `book`; the
table-of-contents check is fast.
"""

from __future__ import annotations

import re

import pytest
import yaml

from servelab.book import catalogs, chapters
from servelab.book.i18n import LANGUAGES
from servelab.machine.paths import REPO


def _toc_files() -> list[str]:
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    return chapters.build_book(tmp_path_factory.mktemp("book"))


@pytest.fixture(scope="module")
def html(books):
    return books / "en"


@pytest.mark.book
def test_every_toc_entry_is_built(html):
    for name in _toc_files():
        assert (html / f"{name}.html").is_file(), name


def test_every_chapter_is_in_the_toc():
    assert {f"notebooks/{p.stem}" for p in chapters.sources()} <= set(_toc_files())


@pytest.mark.book
def test_the_introduction_lists_every_chapter_in_book_order():
    intro = (REPO / "book" / "intro.md").read_text()
    chapters_section = intro[intro.index("## Chapters"):intro.index("## How to run it")]
    linked = re.findall(r"^- \*\*\d\d\*\* \[\]\(\.\./(notebooks/[0-9]{2}_[a-z_]+)\.ipynb\)", chapters_section, re.M)
    assert linked == [f for f in _toc_files() if f.startswith("notebooks/")]
    assert "planned" not in chapters_section.lower()


@pytest.mark.book
def test_chapters_show_their_figures_and_hide_engine_logs(html):
    for source in chapters.sources():
        page = (html / "notebooks" / f"{source.stem}.html").read_text()
        assert "profile  : " in page, "the banner is shown"
        assert "starting vllm" not in page and "it/s]" not in page, "stderr (progress, logs) is hidden"
        figures = len(re.findall(r'<img[^>]+src="[^"]*\.png"', page))
        if source.stem != "00_setup_check":
            assert figures >= 2, f"{source.stem} shows {figures} figures"


@pytest.mark.book
def test_every_page_links_to_itself_in_every_language(books):
    for lang in LANGUAGES:
        for name in _toc_files():
            page = (books / lang / f"{name}.html").read_text()
            assert f'<html lang="{lang}"' in page, (lang, name)
            switcher = re.search(r'<nav class="servelab-languages".*?</nav>', page, re.S).group(0)
            links = re.findall(r'href="([^"]+)"', switcher)
            up = "../" * (name.count("/") + 1)
            assert links == [f"{up}{other}/{name}.html" for other in LANGUAGES if other != lang], (lang, name)
            assert all((books / lang / name).parent.joinpath(link).resolve().is_file() for link in links)
    landing = re.findall(r'href="([^"]+)"', (books / "index.html").read_text())
    assert landing == [f"{lang}/index.html" for lang in LANGUAGES] * 2  # <link rel="alternate"> and the list
    assert all((books / link).is_file() for link in landing)


@pytest.mark.book
def test_chapters_have_no_launch_buttons(html):
    """_config.yml turns them off (tests/test_book_publishing.py says why); the pages show none."""
    for source in chapters.sources():
        page = (html / "notebooks" / f"{source.stem}.html").read_text()
        assert "colab.research.google.com" not in page and "mybinder" not in page and "launch-buttons" not in page


@pytest.mark.book
def test_translated_pages_show_their_catalogs(books):
    """The intro's translations reach the page (with their links and code intact), English stays English."""
    for lang in LANGUAGES[1:]:
        messages = catalogs.translation(lang, "book/intro")
        page = (books / lang / "book" / "intro.html").read_text()
        title = messages["Introduction"]
        assert f"<h1>{title}" in page, lang
        code = '<code class="docutils literal notranslate"><span class="pre">./lab.sh'
        assert 'href="running.html"' in page and code in page, lang
    assert "<h1>Introduction" in (books / "en" / "book" / "intro.html").read_text()


@pytest.mark.book
def test_translated_books_show_their_title_and_part_captions(books):
    from servelab.book import sphinx_run

    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    for lang in LANGUAGES:
        page = (books / lang / "notebooks" / "03_paged_attention.html").read_text()
        captions = catalogs.translation(lang, "book/intro") if lang != "en" else {}
        for part in toc["parts"]:
            assert f'<span class="caption-text">{captions.get(part["caption"], part["caption"])}</span>' in page, lang
        assert sphinx_run.translated_title(lang) in page, lang
    assert sphinx_run.translated_title("ja") != sphinx_run.TITLE


def test_the_translated_toc_changes_only_the_captions(tmp_path):
    from servelab.book import sphinx_run

    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    ja = yaml.safe_load(sphinx_run.translated_toc("ja", tmp_path).read_text())
    captions = catalogs.translation("ja", "book/intro")
    assert [p["chapters"] for p in ja["parts"]] == [p["chapters"] for p in toc["parts"]] and ja["root"] == toc["root"]
    assert [p["caption"] for p in ja["parts"]] == [captions[p["caption"]] for p in toc["parts"]]
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    assert config["title"] == sphinx_run.TITLE  # the msgid the translated builds look up


def test_the_commit_says_when_the_checkout_was_edited(tmp_path, monkeypatch):
    import subprocess

    from servelab.book import provenance as prov

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    monkeypatch.setattr(prov, "REPO", tmp_path)
    clean = prov.git_commit()
    assert len(clean) >= 7 and not clean.endswith("-dirty")
    (tmp_path / "a.txt").write_text("two")
    assert prov.git_commit() == f"{clean}-dirty"


class _Collected:
    def __init__(self, nodeid: str, fixtures: list[str], markers: list[str]) -> None:
        self.nodeid, self.fixturenames, self.markers = nodeid, fixtures, markers

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


def test_a_test_that_builds_the_book_must_be_marked_book():
    from tests import conftest

    marked = _Collected("t.py::marked", ["html", "books"], ["book"])
    conftest.pytest_collection_modifyitems(None, [marked, _Collected("t.py::other", ["tmp_path"], [])])
    with pytest.raises(pytest.UsageError, match=r"must be marked book: t\.py::unmarked$"):
        conftest.pytest_collection_modifyitems(None, [marked, _Collected("t.py::unmarked", ["html", "books"], [])])
