"""One Sphinx build of the book, configured exactly as `jupyter-book build` configures it.

Jupyter Book 1's CLI has no `-D`, so instead of `jupyter-book config sphinx` + `sphinx-build` this calls
Jupyter Book's own `build_sphinx` (what its CLI calls: `_config.yml` and `_toc.yml` become the Sphinx
configuration, no conf.py is written) with `language` and the builder overridden. Each build runs in
its own process (`run`), since Sphinx and docutils keep global state, and each language gets its own
doctree folder (the gettext builder cannot share doctrees with an HTML build).

A translated build gets the book's title and the sidebar's part captions in its language: the title from the
`servelab` catalog (`TITLE`, which a test keeps equal to `_config.yml`'s), the captions from the intro's
catalog, where Sphinx extracts them, written into a table of contents of its own beside its doctrees
(sphinx-external-toc inserts the toctrees after Sphinx has translated the page, so it never sees them).
"""

from __future__ import annotations

import subprocess
import sys
from html import escape
from pathlib import Path

import yaml

from servelab.book.i18n import N_
from servelab.machine.paths import REPO

BUILDERS = ("html", "gettext")
TITLE = N_("servelab: how LLM serving engines manage memory and time")


def command(builder: str, out: Path, doctrees: Path, language: str = "en", source: Path = REPO) -> list[str]:
    if builder not in BUILDERS:
        raise ValueError(f"unknown Sphinx builder {builder!r}; accepted: {', '.join(BUILDERS)}")
    return [sys.executable, "-m", "servelab.book.sphinx_run", builder, str(out), str(doctrees), language, str(source)]


def run(builder: str, out: Path, doctrees: Path, language: str = "en", quiet: bool = True,
        source: Path = REPO) -> None:
    """Build the book whose source folder is `source` (the checkout, or a workspace that links its pages and holds
    its own executed notebooks) into `out` with warnings as errors; raises RuntimeError (Sphinx's warnings are on
    stderr)."""
    cmd = command(builder, out, doctrees, language, source)
    if quiet:
        cmd.append("--quiet")
    if subprocess.run(cmd).returncode != 0:
        raise RuntimeError(f"the Sphinx {builder} build ({language}) failed: its warnings, printed above, are errors")


def translated_toc(language: str, folder: Path, source: Path = REPO) -> Path:
    """`source`'s `_toc.yml` with every part's caption in `language` (from the intro's catalog), written into
    `folder`."""
    from servelab.book import catalogs

    captions = catalogs.translation(language, "book/intro")
    toc = yaml.safe_load((Path(source) / "_toc.yml").read_text())
    for part in toc.get("parts", []):
        part["caption"] = captions.get(part["caption"], part["caption"])
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"_toc.{language}.yml"
    out.write_text(yaml.safe_dump(toc, allow_unicode=True, sort_keys=False))
    return out


def translated_title(language: str) -> str:
    from servelab.book import catalogs

    return catalogs.translation(language, "servelab").get(TITLE, TITLE) if language != "en" else TITLE


def languages_named() -> dict[str, str]:
    """Each language's own name (English, 日本語, ...), as the language switcher shows it (`_config.yml`)."""
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    return dict(config["sphinx"]["config"]["html_context"]["servelab_languages"])


def landing_page(languages: list[str] | tuple[str, ...]) -> str:
    """The page at the root of the built books (`_build/html/index.html`, the published site's first page): a link
    to each language's book, under the book's title in that language."""
    names = languages_named()
    links = "".join(f'<li lang="{lang}"><a hreflang="{lang}" href="{lang}/index.html">{escape(names[lang])}</a>: '
                    f"{escape(translated_title(lang))}</li>\n" for lang in languages)
    alternates = "".join(f'<link rel="alternate" hreflang="{lang}" href="{lang}/index.html">\n' for lang in languages)
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(TITLE)}</title>\n{alternates}</head>\n<body>\n<main>\n<h1>servelab</h1>\n"
            f"<ul>\n{links}</ul>\n</main>\n</body>\n</html>\n")


def _main(argv: list[str]) -> int:
    from jupyter_book.sphinx import build_sphinx

    builder, out, doctrees, language, source = argv[:5]
    overrides = {"language": language, "latex_individualpages": False}
    if language != "en" and builder == "html":
        overrides |= {"html_title": translated_title(language),
                      "external_toc_path": str(translated_toc(language, Path(doctrees), Path(source)))}
    result = build_sphinx(source, str(out), noconfig=True, path_config=str(Path(source) / "_config.yml"),
                          confoverrides=overrides, doctreedir=str(doctrees), builder=builder,
                          warningiserror=True, keep_going=True, quiet="--quiet" in argv)
    return result if isinstance(result, int) else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
