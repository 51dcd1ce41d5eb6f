"""The glossary of each language (`locales/<lang>/glossary.toml`) and the check that translations use it.

A finished msgstr whose English msgid contains a checked term (a whole word, any case, plural `s`
allowed) must contain the term's `use` form or one of its `also` forms (any case). An entry may opt
out for one term with a translator comment `# glossary-ignore: TERM` (and the reason), for the
places where the English word means something else there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import tomllib

from servelab.book import catalogs
from servelab.book.i18n import LOCALES


@dataclass(frozen=True)
class Term:
    english: str
    use: str
    also: tuple[str, ...]
    check: bool

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(rf"\b{re.escape(self.english)}(?:s|es)?\b", re.IGNORECASE)

    def applied(self, msgstr: str) -> bool:
        text = msgstr.casefold()
        return any(form.casefold() in text for form in (self.use, *self.also))


@cache
def terms(lang: str) -> tuple[Term, ...]:
    path = LOCALES / catalogs.check_language(lang) / "glossary.toml"
    table = tomllib.loads(path.read_text())["terms"]
    return tuple(Term(k, v["use"], tuple(v.get("also", ())), v.get("check", True)) for k, v in table.items())


IGNORE = re.compile(r"glossary-ignore:\s*([^;(]+)")


def problems(lang: str, domain: str) -> list[str]:
    """One line per finished entry of one catalog that does not use a checked glossary term."""
    found = []
    for m in catalogs.read(catalogs.po_path(lang, domain)):
        if not (m.id and m.string) or m.fuzzy or catalogs.verbatim(m.id):  # quotes stay in their own words
            continue
        ignored = {t.strip().casefold() for c in m.user_comments for t in IGNORE.findall(c)}
        for term in terms(lang):
            if term.check and term.english.casefold() not in ignored and term.pattern.search(m.id) \
                    and not term.applied(m.string):
                found.append(f"{lang}/{domain}: {term.english!r} should read {term.use!r}: {m.string[:70]!r}")
    return found
