"""The translation catalogs: extract the English messages, merge them into every language, check them.

One catalog per page or chapter (Sphinx's gettext builder with `gettext_compact: false`; domain =
the page's docname, e.g. `notebooks/03_paged_attention`) and one for the strings code shows a reader
(domain `servelab`, see `code_messages`), at `locales/<lang>/LC_MESSAGES/<domain>.po`. Catalogs are
read and written with Babel (what Sphinx itself uses), one line per msgid and msgstr, without source
locations, so a diff shows the paragraphs that changed. `update` drops obsolete entries (git keeps
them), marks an edited paragraph fuzzy with its previous English text (`#| msgid`), and fills in
the entries with nothing to translate (`verbatim`: only code and numbers, or quotes of the source
articles in their own languages) with the English.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from servelab.book import code_messages, po_markup, sphinx_run
from servelab.book.i18n import LANGUAGES, LOCALES

TRANSLATED = LANGUAGES[1:]  # ja, ko, de, es: English is the source
CODE_DOMAIN = "servelab"


def po_path(lang: str, domain: str) -> Path:
    return LOCALES / lang / "LC_MESSAGES" / f"{domain}.po"


def check_language(lang: str) -> str:
    if lang not in TRANSLATED:
        raise ValueError(f"unknown language {lang!r}; accepted: {', '.join(TRANSLATED)}")
    return lang


HEADER = ("# {lang} translation of servelab: {domain}.\n# Edit msgstr lines only, then run `python -m servelab "
          "translations update` (CONTRIBUTING.md, Translations).")


QUOTES = re.compile(r"(?:ja|ko|de|es|en): \S")


def verbatim(msgid: str) -> bool:
    """A message that stays as it is in every language: nothing but code, numbers and punctuation
    (`./lab.sh`, a count), or the claims ledger's quotes of the articles in their own words
    (`ja: ...<br>de: ...`)."""
    return not po_markup.has_words(msgid) or all(QUOTES.match(part) for part in msgid.split("<br>"))


def check_domain(lang: str, domain: str) -> str:
    if domain not in domains(check_language(lang)):
        raise ValueError(f"no catalog {domain!r} in {lang}; available: {', '.join(domains(lang))}")
    return domain


def read(path: Path) -> Catalog:
    with path.open("rb") as f:
        catalog = read_po(f)
    for m in catalog:
        m.user_comments, previous = _split_previous(m.user_comments)
        m.previous_id = [previous] if previous and m.fuzzy else []
    return catalog


def _split_previous(comments: list[str]) -> tuple[list[str], str]:
    """(translator comments, the previous English) from what Babel's reader made of a fuzzy entry's
    ``#| msgid`` lines: it reads them as translator comments ``| msgid "..."``, so each write would
    turn them into ``# | msgid`` comments, wrapped anew, which pile up. A comment group from the first
    ``| msgid`` on is the previous English (older wrapped pieces included), not a translator's note."""
    at = next((i for i, c in enumerate(comments) if c.startswith("| msgid")), None)
    if at is None:
        return list(comments), ""
    text = " ".join(c.removeprefix("|").strip() for c in comments[at:] if not c.startswith("glossary-ignore:"))
    text = text.removeprefix("msgid").strip().removeprefix('"').removesuffix('"').replace('\\"', '"')
    return [c for i, c in enumerate(comments) if i < at or c.startswith("glossary-ignore:")], text


def write(catalog: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".po.tmp")
    with tmp.open("wb") as f:  # no wrapping, comments included (a wrapped #| line would not read back)
        write_po(f, catalog, width=10**9, no_location=True, include_previous=True, ignore_obsolete=True)
    tmp.replace(path)


def templates(workdir: Path | None = None) -> tuple[dict[str, Catalog], list[str]]:
    """domain -> English template catalog, from a fresh Sphinx gettext build and the code; and code problems."""
    with tempfile.TemporaryDirectory(prefix="servelab-pot-") as tmp:
        work = workdir or Path(tmp)
        sphinx_run.run("gettext", work / "pot", work / "doctrees-gettext")
        found: dict[str, Catalog] = {}
        for pot in sorted((work / "pot").rglob("*.pot")):
            found[pot.relative_to(work / "pot").with_suffix("").as_posix()] = read(pot)
    code = Catalog(project="servelab", fuzzy=False)
    messages, problems = code_messages.extract()
    for msgid in messages:
        code.add(msgid)
    found[CODE_DOMAIN] = code
    return found, problems


def domains(lang: str) -> list[str]:
    """The domains that have a catalog in `lang`."""
    root = LOCALES / lang / "LC_MESSAGES"
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.po"))


def update(langs: tuple[str, ...] = TRANSLATED, only: tuple[str, ...] = ()) -> tuple[dict[str, int], list[str]]:
    """Merge fresh templates into every language's catalogs (`only`: into these domains alone, leaving the others'
    pending English for their authors); returns (entries per domain, code problems)."""
    found, problems = templates()
    if unknown := sorted(set(only) - set(found)):
        raise ValueError(f"no page or chapter {', '.join(unknown)} in the book; available: {', '.join(found)}")
    found = {d: t for d, t in found.items() if d in only} if only else found
    for lang in langs:
        for domain, template in found.items():
            path = po_path(lang, domain)
            catalog = read(path) if path.exists() else Catalog(locale=lang, domain=domain, project="servelab",
                                                                fuzzy=False)
            catalog.update(template, update_creation_date=False)
            catalog.obsolete.clear()
            for m in catalog:  # nothing to translate: the English is the translation (also where a merge guessed)
                if m.id and (m.fuzzy or not m.string) and verbatim(m.id):
                    m.string = m.id
                    m.flags.discard("fuzzy")
                    m.previous_id = []
            catalog.header_comment = HEADER.format(lang=lang, domain=domain)
            catalog.copyright_holder, catalog.msgid_bugs_address = "The servelab authors", ""
            write(catalog, path)
        for stale in set(domains(lang)) - set(found) if not only else ():  # a page left the book
            po_path(lang, stale).unlink()
    return {d: sum(1 for m in t if m.id) for d, t in found.items()}, problems


@dataclass(frozen=True)
class Stat:
    lang: str
    domain: str
    total: int
    translated: int
    fuzzy: int
    untranslated: int
    obsolete: int
    markup: tuple[str, ...]  # one line per msgstr whose markup differs from its msgid

    @property
    def complete(self) -> bool:
        return self.translated == self.total and not (self.obsolete or self.markup)

    def line(self) -> str:
        return (f"{self.lang}/{self.domain}: {self.translated}/{self.total} translated, {self.fuzzy} fuzzy, "
                f"{self.untranslated} untranslated, {self.obsolete} obsolete, {len(self.markup)} markup errors")


def stat(lang: str, domain: str) -> Stat:
    """Counts from the catalog itself: a fuzzy entry is not translated (Sphinx shows English for it)."""
    catalog = read(po_path(lang, domain))
    entries = [m for m in catalog if m.id]
    fuzzy = [m for m in entries if m.fuzzy]
    empty = [m for m in entries if not m.string]
    done = [m for m in entries if m.string and not m.fuzzy]
    markup = tuple(f"{lang}/{domain}: {problem}: {m.id[:70]!r}" for m in done
                   for problem in po_markup.differences(m.id, m.string, code=domain == CODE_DOMAIN))
    return Stat(lang, domain, len(entries), len(done), len(fuzzy), len(empty), len(catalog.obsolete), markup)


def stats(langs: tuple[str, ...] = TRANSLATED) -> list[Stat]:
    return [stat(lang, domain) for lang in langs for domain in domains(lang)]


def todo(lang: str, domain: str) -> str:
    """The entries of one catalog that still need a translator (empty or fuzzy), as a .po chunk."""
    catalog = read(po_path(lang, check_domain(lang, domain)))
    chunk = Catalog(locale=lang, domain=domain, project="servelab", fuzzy=False)
    for m in catalog:
        if m.id and (m.fuzzy or not m.string):
            chunk[m.id] = m
    with tempfile.TemporaryDirectory() as tmp:
        write(chunk, Path(tmp) / "todo.po")
        return (Path(tmp) / "todo.po").read_text()


def apply(lang: str, domain: str, chunk: Path) -> tuple[int, int]:
    """Copy the translated entries of a .po chunk into one catalog; returns (applied, still fuzzy so skipped)."""
    catalog = read(po_path(lang, check_domain(lang, domain)))
    done = skipped = 0
    for m in read(chunk):
        if not (m.id and m.string):
            continue
        if m.id not in catalog:
            raise ValueError(f"{chunk}: msgid {m.id[:60]!r} is not in {lang}/{domain}; run the update first")
        if m.fuzzy:
            skipped += 1
            continue
        catalog[m.id].string = m.string
        catalog[m.id].flags.discard("fuzzy")
        catalog[m.id].previous_id = []
        done += 1
    write(catalog, po_path(lang, domain))
    return done, skipped


def translation(lang: str, domain: str) -> dict[str, str]:
    """msgid -> msgstr for the finished (non-fuzzy) entries of one catalog; {} if it has none."""
    path = po_path(lang, domain)
    if not path.exists():
        return {}
    return {m.id: m.string for m in read(path) if m.id and m.string and not m.fuzzy}


def reuse(lang: str, domain: str, known: dict[str, str]) -> int:
    """Give every entry of one catalog whose English `known` translates that translation, finished or not (e.g. a
    page quoting a chapter's paragraph takes the chapter's translation, and keeps taking it when it is revised);
    returns how many entries changed."""
    path = po_path(lang, check_domain(lang, domain))
    catalog = read(path)
    changed = 0
    for m in catalog:
        if m.id and known.get(m.id) and (m.fuzzy or m.string != known[m.id]):
            m.string, m.previous_id = known[m.id], []
            m.flags.discard("fuzzy")
            changed += 1
    write(catalog, path)
    return changed
