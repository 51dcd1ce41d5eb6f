"""The chapter list of book/intro.md, generated from `_toc.yml` and the executed chapters.

`python -m servelab.book.intro_page` rewrites the part of book/intro.md between its two `%` comment lines (`BEGIN`,
`END`; the rest of the page stays hand-written); `--check` fails (one line, with the command) while that part is out
of date; `--catalogs` merges the page into its four catalogs (`catalogs.update` of `DOMAIN` alone, so pending prose
elsewhere is left for its author) and fills every entry a chapter's catalog already translates (`reuse`).

The list follows the table of contents, part by part. A book page is its link (its title). A chapter is its number,
its link (its title) and its run time: the seconds of its last recorded run on the `cpu` profile (the executed
notebook's `servelab` metadata, as `workshop` reads them), rounded up to whole minutes. Below that line comes the
chapter's summary: its own first paragraph after the title, word for word (links re-pointed from `notebooks/` to
`book/`), so its translations are the chapter's. The line with the number has no word to translate
(`catalogs.verbatim`): a new run changes no translated sentence; one legend paragraph says what the number is.
"""

from __future__ import annotations

import argparse
import json
import math
import posixpath
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import yaml

from servelab.book import catalogs, chapters, workshop
from servelab.machine.paths import REPO

PAGE = REPO / "book" / "intro.md"
TOC = REPO / "_toc.yml"
DOMAIN = "book/intro"
COMMAND = "python -m servelab.book.intro_page"
BEGIN = f"% BEGIN chapter list: generated from _toc.yml and the executed notebooks by `{COMMAND}`; do not edit by hand"
END = "% END chapter list"
CLOCK = "⏱"
LEGEND = (f"After {CLOCK}, each chapter shows how many minutes its last recorded run took on the `cpu` profile "
          "(measured on the machine its banner names, rounded up); below that, its own first paragraph.")
_LINK = re.compile(r"(\]\()([^()\s]+)(\))")  # a Markdown link's target
_DOC = re.compile(r"(\{doc\}`(?:[^`<]*<)?)([^`<>]+)(>?`)")  # a {doc} role's target


@dataclass(frozen=True)
class Part:
    caption: str
    files: tuple[str, ...]  # docnames: "book/running", "notebooks/02_kv_cache_memory"


def parts() -> list[Part]:
    toc = yaml.safe_load(TOC.read_text(encoding="utf-8"))
    return [Part(p["caption"], tuple(c["file"] for c in p["chapters"])) for p in toc["parts"]]


def relink(text: str) -> str:
    """`text`, written in a chapter (notebooks/), with every relative link and {doc} target that would point
    elsewhere from book/ re-pointed there:
    `[x](01_serving_basics.ipynb)` -> `[x](../notebooks/01_serving_basics.ipynb)`.
    Targets that resolve the same from both folders (`../book/claims.md`) and absolute ones stay as they are."""
    def fix(m: re.Match[str]) -> str:
        target, anchor = (m.group(2).split("#", 1) + [""])[:2]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:|^/", target):
            return m.group(0)
        here = posixpath.normpath(posixpath.join("notebooks", target))
        if posixpath.normpath(posixpath.join("book", target)) == here:
            return m.group(0)
        moved = posixpath.relpath(here, "book") + (f"#{anchor}" if anchor else "")
        return m.group(1) + moved + m.group(3)

    return _DOC.sub(fix, _LINK.sub(fix, text))


def _first_markdown(chapter: str) -> str:
    cells = json.loads((chapters.NOTEBOOKS / f"{chapter}.ipynb").read_text(encoding="utf-8"))["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])


def summary(chapter: str, first_cell: str | None = None) -> str:
    """The chapter's first paragraph after its title, its lines joined as Sphinx joins them into a catalog msgid."""
    text = first_cell if first_cell is not None else _first_markdown(chapter)
    blocks = [b.strip() for b in re.split(r"\n\s*\n", text) if b.strip()]
    if not blocks or not blocks[0].startswith("# "):
        raise ValueError(f"{chapter}: its first markdown cell does not start with its title (# ...)")
    para = next((b for b in blocks[1:] if not re.match(r"(#|:::|```|%|[-*+] |\d+\. |\||>)", b)), None)
    if para is None:
        raise ValueError(f"{chapter}: no paragraph after its title to summarise it")
    if "|" in para:
        raise ValueError(f"{chapter}: its first paragraph has a '|', which the list cannot quote")
    return relink(" ".join(line.strip() for line in para.splitlines()))


def run_minutes(chapter: str) -> int:
    """The chapter's last recorded run on the `workshop.PROFILE` profile, in whole minutes, rounded up."""
    meta = workshop.chapter_meta(chapter)
    if meta.get("profile") != workshop.PROFILE or not meta.get("seconds"):
        raise ValueError(f"{chapter}.ipynb records no run on the {workshop.PROFILE} profile (found "
                         f"{meta.get('profile') or 'none'}): run python -m servelab notebooks --profile "
                         f"{workshop.PROFILE} {chapter}")
    return math.ceil(float(meta["seconds"]) / 60)


def _number(chapter: str) -> str:
    return chapter.split("_", 1)[0]


def chapter_list(toc: list[Part] | None = None) -> list[str]:
    """The generated lines, markers included."""
    out = [BEGIN, "", LEGEND]
    for part in toc if toc is not None else parts():
        out += ["", f"**{part.caption}**", ""]
        for file in part.files:
            folder, name = file.split("/", 1)
            if folder != "notebooks":
                out += [f"- {{doc}}`{posixpath.relpath(file, 'book')}`", ""]
                continue
            out += [f"- **{_number(name)}** [](../{file}.ipynb) {CLOCK} {run_minutes(name)}", "",
                    f"  {summary(name)}", ""]
        out.pop()
    return [*out, "", END]


def render(page: str, toc: list[Part] | None = None) -> str:
    """`page` with the part between the markers replaced by the current list."""
    lines = page.split("\n")
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        raise ValueError(f"{PAGE.relative_to(REPO)} needs one line {BEGIN!r} and after it one line {END!r}")
    return "\n".join(lines[:lines.index(BEGIN)] + chapter_list(toc) + lines[lines.index(END) + 1:])


def known(lang: str, toc: list[Part] | None = None) -> dict[str, str]:
    """English -> `lang` for what the list quotes: every finished entry of the chapters' catalogs (re-pointed as
    `summary` re-points them) and the part captions, bold as the list writes them (from the intro's own catalog)."""
    found: dict[str, str] = {}
    toc = toc if toc is not None else parts()
    for file in (f for p in toc for f in p.files if f.startswith("notebooks/")):
        found |= {relink(m): relink(s) for m, s in catalogs.translation(lang, file).items()}
    captions = catalogs.translation(lang, DOMAIN)
    found |= {f"**{p.caption}**": f"**{captions[p.caption]}**" for p in toc if p.caption in captions}
    return found


def fill_catalogs(langs: tuple[str, ...] = catalogs.TRANSLATED,
                  merge: Callable[[tuple[str, ...]], object] | None = None) -> dict[str, tuple[int, int]]:
    """Merge the page into its catalogs (`merge`, default `catalogs.update` of DOMAIN) and fill what the chapters
    translate; per language (entries filled, entries still to translate)."""
    (merge or (lambda ls: catalogs.update(ls, only=(DOMAIN,))))(langs)
    done = {}
    for lang in langs:
        filled = catalogs.reuse(lang, DOMAIN, known(lang))
        done[lang] = (filled, catalogs.stat(lang, DOMAIN).total - catalogs.stat(lang, DOMAIN).translated)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if book/intro.md's chapter list is not up to date")
    parser.add_argument("--catalogs", action="store_true",
                        help="merge book/intro.md into its catalogs and fill what the chapters' catalogs translate")
    args = parser.parse_args(argv)
    try:
        page = render(PAGE.read_text(encoding="utf-8"))
    except ValueError as err:
        print(f"{COMMAND}: error: {err}", file=sys.stderr)
        return 2
    if args.check:
        if PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(REPO)} is out of date; regenerate it: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(REPO)}: the chapter list of {sum(len(p.files) for p in parts())} entries")
    if args.catalogs:
        for lang, (filled, left) in fill_catalogs().items():
            print(f"[translations] {lang}/{DOMAIN}: {filled} filled from the chapters' catalogs, {left} left to "
                  "translate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
