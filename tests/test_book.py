"""The book builds with warnings as errors from the committed notebooks, and shows what it should.

Tests that use the `html` fixture build the book and are marked `book`; the table-of-contents check is fast.
"""

from __future__ import annotations

import re

import pytest
import yaml

from servelab.book import chapters
from servelab.machine.paths import REPO


def _toc_files() -> list[str]:
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    return chapters.build_book(tmp_path_factory.mktemp("book"))


@pytest.mark.book
def test_every_toc_entry_is_built(html):
    for name in _toc_files():
        assert (html / f"{name}.html").is_file(), name


def test_every_chapter_is_in_the_toc():
    assert {f"notebooks/{p.stem}" for p in chapters.sources()} <= set(_toc_files())


@pytest.mark.book
def test_chapters_show_their_figures_and_hide_engine_logs(html):
    for source in chapters.sources():
        page = (html / "notebooks" / f"{source.stem}.html").read_text()
        assert "profile  : " in page, "the banner is shown"
        assert "starting vllm" not in page and "it/s]" not in page, "stderr (progress, logs) is hidden"
        figures = len(re.findall(r'<img[^>]+src="[^"]*\.png"', page))
        if source.stem != "00_setup_check":
            assert figures >= 2, f"{source.stem} shows {figures} figures"
