"""The book page book/claims.md, rendered from the claims ledger: `python -m servelab.book.claims_page` writes
it, `--check` fails when it is out of date."""

from __future__ import annotations

import argparse
import re
import sys

from servelab.book.claims import KINDS, MEASUREMENTS, NOTEBOOK, Claim, Ledger, load, measured_on, normalise
from servelab.machine.paths import REPO

PAGE = REPO / "book" / "claims.md"


_FLAG = re.compile(r"(?<![\w`-])(--[a-z][a-z0-9-]*)")


def _cell(text: str) -> str:
    """`text` for one table cell: one line, pipes escaped, command-line flags as code (so the book's
    typography does not turn their leading `--` into a dash)."""
    return _FLAG.sub(r"`\1`", normalise(text).replace("|", "\\|"))


def _link(ref: str) -> str:
    if ref.startswith(("http://", "https://")):
        return f"[{ref.split('://', 1)[1].rstrip('/')}]({ref})"
    if NOTEBOOK.fullmatch(ref):
        return f"[{ref}](../{ref}.ipynb)"
    return f"`{ref}`"


def _evidence_cell(claim: Claim, ledger: Ledger) -> str:
    lines = []
    if claim.changed:
        lines.append(f"changed {claim.changed.date}: {_cell(claim.changed.what)}")
    for e in claim.evidence:
        label, ref = KINDS[e.kind], _link(e.ref)
        if e.kind == "engine_source":
            package = e.ref.split("/")[0]
            label = f"{'vLLM' if package == 'vllm' else 'SGLang'} {ledger.pinned[package]} source"
        elif e.kind in MEASUREMENTS:
            label = f"{measured_on(e)} {label}"
        elif e.kind == "article":
            ref = f"{e.ref} ({_cell(ledger.seeds[e.ref].title)})"
        lines.append(f"{label}: {ref}: {_cell(e.detail)}")
    if claim.to_measure_in:
        lines.append(f"to be measured in chapter {claim.to_measure_in}")
    return "<br>".join(lines)


def render(ledger: Ledger) -> str:
    """The Markdown page book/claims.md, computed from the ledger alone."""
    counts = ledger.counts()
    out = [
        "# The claims ledger: what the source articles say, checked",
        "",
        "Generated from `servelab/data/claims.toml` by `python -m servelab.book.claims_page`; "
        "do not edit this page by hand.",
        "",
        f"This page lists every factual claim made by the {len(ledger.seeds)} source articles the book "
        "started from (see [Sources and how claims are checked](sources.md)), each with a verdict, what "
        "holds today and the evidence. Engine facts are checked against the installed source code of "
        f"vLLM {ledger.pinned['vllm']} and SGLang {ledger.pinned['sglang']}, the versions this book pins; "
        "other facts against papers, release notes and the maintainers' own words, or against a "
        "measurement in a chapter of this book.",
        "",
        "A claim is *true* when it holds today, *outdated* when it held on the day its article was "
        "written but no longer does (the row names the change that ended it, and its date), *false* when "
        "it was wrong when written (including a claim that had already stopped holding by then), and "
        "*unverifiable* when no primary source can settle it (a figure without a method, a point-in-time "
        "count, a guess). The articles carry no dates, so each is dated by the latest release, feature or date it "
        "names (the table below). A claim about GPU behaviour is never settled by this book's cpu "
        "measurements alone: they show the mechanism, not a GPU's numbers. Quotes are the articles' own "
        "words; one row covers the translations that share a claim.",
        "",
        "## Summary",
        "",
        "| verdict | claims |",
        "| --- | ---: |",
        *[f"| {v} | {n} |" for v, n in counts.items()],
        f"| all | {sum(counts.values())} |",
        "",
        "| source article | language | written on or after | dated by | claims |",
        "| --- | --- | --- | --- | ---: |",
        *[f"| {s.id}: {_cell(s.title)} | {s.lang} | {s.written} | {_cell(s.dated_by)} "
          f"| {sum(s.id in c.articles for c in ledger.claims)} |" for s in ledger.seeds.values()],
        "",
    ]
    for topic in ledger.topics:
        rows = [c for c in ledger.claims if c.topic == topic]
        if not rows:
            continue
        out += [f"## {topic}", "", "| claim | the articles say | verdict | today | evidence |",
                "| --- | --- | --- | --- | --- |"]
        for c in rows:
            langs = dict.fromkeys(ledger.seeds[a].lang for a in c.articles)  # in the articles' order
            quoted = "<br>".join(f"{lang}: {_cell(c.quotes[lang])}" for lang in langs)
            about = "<br>(about GPUs)" if c.gpu else ""
            out.append(f"| **{c.id}** ({', '.join(c.articles)})<br>{_cell(c.claim)} | {quoted} "
                       f"| **{c.verdict}**{about} | {_cell(c.truth)} | {_evidence_cell(c, ledger)} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab.book.claims_page",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if book/claims.md is not up to date")
    args = parser.parse_args(argv)
    ledger = load()
    page = render(ledger) + "\n"
    if args.check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(REPO)} is out of date; regenerate it: python -m servelab.book.claims_page",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    counts = ", ".join(f"{n} {v}" for v, n in ledger.counts().items())
    print(f"wrote {PAGE.relative_to(REPO)}: {len(ledger.claims)} claims ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
