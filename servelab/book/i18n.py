"""Translation of the few words code prints (plot labels, banner) via gettext catalogs.

Prose is translated by Sphinx's catalogs under locales/; strings that code draws on a figure
go through `t()`, which reads the `servelab` domain of the same folder
(`locales/<lang>/LC_MESSAGES/servelab.po`, read directly: no compiled .mo is needed). The language
comes from SERVELAB_LANG (en, ja, ko, de, es); unset, a kernel whose working folder is a translated
notebooks folder (`notebooks/ja/`, written by `python -m servelab translations notebooks`) uses that
folder's language, so a translated notebook plots in its language with code identical to English.
A message without a finished translation comes back in English; with SERVELAB_I18N_MISSES=path,
each such message is also appended to that file (a test reads it). With SERVELAB_I18N_DRAWN=path every
message asked for, in any language, is appended there: `chapters.execute` records what a chapter drew, and
a test checks that each catalog translates it, without running the chapter in that language. `ASKED` keeps the
same messages in the process, for `figure_languages`, which relabels an English figure in every language
(`in_language`) when a chapter is executed.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from servelab.machine.paths import REPO

LOCALES = REPO / "locales"
LANGUAGES = ("en", "ja", "ko", "de", "es")
ASKED: set[str] = set()  # every message `t` was asked for in this process


def language() -> str:
    here = Path.cwd()
    default = here.name if here.parent.name == "notebooks" and here.name in LANGUAGES else "en"
    lang = os.environ.get("SERVELAB_LANG") or default
    if lang not in LANGUAGES:
        raise ValueError(f"unknown SERVELAB_LANG {lang!r}; accepted: {', '.join(LANGUAGES)}")
    return lang


def check_languages(langs: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    unknown = [lang for lang in langs if lang not in LANGUAGES]
    if unknown:
        raise ValueError(f"unknown language(s) {', '.join(unknown)}; accepted: {', '.join(LANGUAGES)}")
    return tuple(langs)


@cache
def _catalog(lang: str) -> dict[str, str]:
    path = LOCALES / lang / "LC_MESSAGES" / "servelab.po"
    if lang == "en" or not path.exists():
        return {}
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}


def t(message: str) -> str:
    """`message` in the reader's language."""
    lang = language()
    ASKED.add(message)
    if drawn := os.environ.get("SERVELAB_I18N_DRAWN"):
        with open(drawn, "a", encoding="utf-8") as f:
            f.write(message.replace("\n", "\\n") + "\n")
    found = _catalog(lang).get(message)
    if found is None and lang != "en" and (misses := os.environ.get("SERVELAB_I18N_MISSES")):
        with open(misses, "a", encoding="utf-8") as f:
            f.write(f"{lang}\t{message}\n")
    return found or message


def in_language(message: str, lang: str) -> str | None:
    """The finished translation of `message` into `lang` (a known language), or None."""
    return _catalog(check_languages([lang])[0]).get(message)


def N_(message: str) -> str:  # noqa: N802 (gettext's name)
    """Mark `message` for extraction into the catalogs without translating it yet (translate it with `t`)."""
    return message
