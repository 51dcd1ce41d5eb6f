"""Translation of the few words code prints (plot labels, banner) via gettext catalogs.

Prose is translated by Sphinx's catalogs under locales/; strings that code draws on a figure
go through `t()`, which reads the `servelab` domain of the same folder. The language comes from
SERVELAB_LANG (en, ja, ko, de, es); without a catalog the English text is returned.
"""

from __future__ import annotations

import gettext
import os
from functools import cache

from servelab.machine.paths import REPO

LOCALES = REPO / "locales"
LANGUAGES = ("en", "ja", "ko", "de", "es")


def language() -> str:
    lang = os.environ.get("SERVELAB_LANG", "en")
    if lang not in LANGUAGES:
        raise ValueError(f"unknown SERVELAB_LANG {lang!r}; accepted: {', '.join(LANGUAGES)}")
    return lang


@cache
def _catalog(lang: str) -> gettext.NullTranslations:
    return gettext.translation("servelab", localedir=LOCALES, languages=[lang], fallback=True)


def t(message: str) -> str:
    """`message` in the reader's language."""
    return _catalog(language()).gettext(message)
