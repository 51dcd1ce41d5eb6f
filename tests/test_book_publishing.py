"""What the published book offers a reader: no launch buttons (no hosted runtime can run a chapter, and
_config.yml says why), and a landing page at the site's root that links the book in its five languages. The
workflow that publishes it: tests/test_workflows.py."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from servelab.book import chapters, sphinx_run
from servelab.book.i18n import LANGUAGES
from servelab.machine.paths import REPO

CONFIG = REPO / "_config.yml"
# Every key sphinx-book-theme reads to decide whether a page gets launch buttons (header_buttons/launch.py).
PROVIDERS = ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url", "jupyterlite_url", "thebe")


def test_launch_buttons_are_off_and_the_config_and_running_page_say_why() -> None:
    text = CONFIG.read_text()
    buttons = yaml.safe_load(text)["launch_buttons"]
    assert {key: buttons.get(key) for key in PROVIDERS} == {key: False if key == "thebe" else "" for key in PROVIDERS}
    lines = text.splitlines()
    at = lines.index("launch_buttons:")
    start = max(i for i in range(at) if not lines[i].startswith("#")) + 1
    why = "\n".join(lines[start:at])
    for reason in ("Colab", "CUDA 13.0", "T4", "mybinder.org", "JupyterHub", "./lab.sh", "own venv"):
        assert reason in why, f"the comment above launch_buttons does not say: {reason}"
    running = (REPO / "book" / "running.md").read_text()
    assert re.search(r"no launch buttons.*Colab", running, re.I), "book/running.md says it in a sentence"


def test_the_landing_page_links_each_book_under_its_title_in_its_language() -> None:
    page = sphinx_run.landing_page(LANGUAGES)
    names = sphinx_run.languages_named()
    assert list(names) == list(LANGUAGES)
    items = re.findall(r'<li lang="(\w+)"><a hreflang="\1" href="\1/index.html">([^<]+)</a>: ([^<]+)</li>', page)
    assert [(lang, name) for lang, name, _ in items] == list(names.items())
    titles = [title for _, _, title in items]
    assert titles[0] == sphinx_run.TITLE and len(set(titles)) == len(LANGUAGES), "each title in its language"
    assert "refresh" not in page, "a reader chooses; nobody is sent to English"


def test_the_build_writes_the_landing_page_for_the_languages_it_has(tmp_path: Path, monkeypatch) -> None:
    """`python -m servelab book` (what the Pages workflow runs) puts it at _build/html/index.html; Sphinx itself
    is replaced by a stand-in that writes each language's first page (the real build: tests/test_book.py)."""
    built = []

    def sphinx(builder: str, out: Path, doctrees: Path, language: str, source: Path = REPO) -> None:
        built.append((builder, language, source))
        out.mkdir(parents=True)
        (out / "index.html").write_text(language)

    monkeypatch.setattr(sphinx_run, "run", sphinx)
    html = chapters.build_book(tmp_path, languages=("en", "ja"))
    assert html == tmp_path / "_build" / "html"
    assert built == [("html", "en", REPO), ("html", "ja", REPO)]
    links = re.findall(r'<a hreflang="\w+" href="([^"]+)"', (html / "index.html").read_text())
    assert links == ["en/index.html", "ja/index.html"]
