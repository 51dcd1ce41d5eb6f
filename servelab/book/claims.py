"""The claims ledger: every factual claim of the source articles, with a verdict and its evidence.

The data is servelab/data/claims.toml; this module validates it (one error line naming the claim, the
key, the bad value and what is accepted), checks its quotes against the articles themselves, and
renders the book page book/claims.md from it: `python -m servelab.book.claims` writes the page,
`--check` fails when the page is out of date.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.machine import datafiles
from servelab.machine.paths import REPO

DATA_FILE = "claims.toml"
PAGE = REPO / "book" / "claims.md"
VERDICTS = ("true", "outdated", "false", "unverifiable")
KINDS = {  # evidence kind -> how the page labels it
    "engine_source": "engine source", "notebook": "measured in", "result": "measured data",
    "paper": "paper", "maintainers": "maintainers", "pr": "pull request", "issue": "issue",
    "release": "release notes", "docs": "docs", "registry": "package index", "source": "cited page",
}
ENGINE_PACKAGES = ("vllm", "sglang")
_CLAIM_KEYS = {"id", "topic", "articles", "quotes", "claim", "verdict", "truth", "evidence", "to_measure_in"}
_REQUIRED = _CLAIM_KEYS - {"to_measure_in"}
_EVIDENCE_KEYS = {"kind", "ref", "detail", "match"}
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")
_NOTEBOOK = re.compile(r"notebooks/\d\d_[a-z0-9_]+")
_CHAPTER = re.compile(r"\d\d")


class BadClaim(ValueError):
    pass


@dataclass(frozen=True)
class Seed:
    id: str
    file: str
    lang: str
    title: str


@dataclass(frozen=True)
class Evidence:
    kind: str
    ref: str
    detail: str
    match: str | None = None


@dataclass(frozen=True)
class Claim:
    id: str
    topic: str
    articles: tuple[str, ...]
    quotes: dict[str, str]
    claim: str
    verdict: str
    truth: str
    evidence: tuple[Evidence, ...]
    to_measure_in: str | None = None


@dataclass(frozen=True)
class Ledger:
    pinned: dict[str, str]
    topics: tuple[str, ...]
    seeds: dict[str, Seed]
    claims: tuple[Claim, ...]

    def counts(self) -> dict[str, int]:
        """Claims per verdict, in VERDICTS order."""
        found = Counter(c.verdict for c in self.claims)
        return {v: found[v] for v in VERDICTS}


def normalise(text: str) -> str:
    """Whitespace collapsed to single spaces: how quotes and source matches are compared."""
    return " ".join(text.split())


def _fail(where: str, key: str, value: Any, accepted: str) -> BadClaim:
    return BadClaim(f"{DATA_FILE}: {where}: key {key!r} is {value!r}; accepted: {accepted}")


def _text(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, key, value, "a non-empty string")
    return value


def _evidence(where: str, raw: Any, number: int) -> Evidence:
    at = f"{where}, evidence #{number}"
    if not isinstance(raw, dict):
        raise _fail(where, "evidence", raw, "a list of tables {kind, ref, detail[, match]}")
    for key in sorted(set(raw) - _EVIDENCE_KEYS):
        raise _fail(at, key, raw[key], f"only the keys {', '.join(sorted(_EVIDENCE_KEYS))}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise _fail(at, "kind", kind, ", ".join(KINDS))
    ref, detail = _text(at, "ref", raw.get("ref")), _text(at, "detail", raw.get("detail"))
    match = raw.get("match")
    if kind == "engine_source":
        if ref.split("/")[0] not in ENGINE_PACKAGES or ".." in ref.split("/"):
            packages = ", ".join(f"{p}/..." for p in ENGINE_PACKAGES)
            raise _fail(at, "ref", ref, f"a path inside an engine package: {packages}")
        match = _text(at, "match", match)
    elif match is not None:
        raise _fail(at, "match", match, "only for kind 'engine_source'")
    if kind == "notebook" and not _NOTEBOOK.fullmatch(ref):
        raise _fail(at, "ref", ref, "notebooks/NN_name")
    if kind == "result" and not ref.startswith("results/"):
        raise _fail(at, "ref", ref, "results/<profile>/<file>")
    return Evidence(kind, ref, detail, match)


def _claim(raw: Any, number: int, topics: tuple[str, ...], seeds: dict[str, Seed]) -> Claim:
    if not isinstance(raw, dict):
        raise _fail(f"claim #{number}", "claim", raw, "a [[claim]] table")
    cid = raw.get("id")
    if not isinstance(cid, str) or not _SLUG.fullmatch(cid):
        raise _fail(f"claim #{number}", "id", cid, "a slug of lower-case letters, digits and hyphens")
    where = f"claim {cid!r}"
    for key in sorted(set(raw) - _CLAIM_KEYS):
        raise _fail(where, key, raw[key], "only the keys " + ", ".join(sorted(_CLAIM_KEYS)))
    for key in sorted(_REQUIRED - set(raw)):
        raise _fail(where, key, None, "a value (the key is required)")
    if raw["topic"] not in topics:
        raise _fail(where, "topic", raw["topic"], "one of `topics`: " + "; ".join(topics))
    articles = raw["articles"]
    if not isinstance(articles, list) or not articles or any(a not in seeds for a in articles) \
            or len(set(articles)) != len(articles):
        raise _fail(where, "articles", articles, "a non-empty list of distinct seed ids: " + ", ".join(seeds))
    quotes, langs = raw["quotes"], {seeds[a].lang for a in articles}
    if not isinstance(quotes, dict) or set(quotes) != langs:
        raise _fail(where, "quotes", quotes, "one quote per language of its articles: " + ", ".join(sorted(langs)))
    for lang, quote in quotes.items():
        _text(where, f"quotes.{lang}", quote)
    if raw["verdict"] not in VERDICTS:
        raise _fail(where, "verdict", raw["verdict"], ", ".join(VERDICTS))
    evidence = raw["evidence"]
    if not isinstance(evidence, list) or not evidence:
        raise _fail(where, "evidence", evidence, "a non-empty list of tables {kind, ref, detail[, match]}")
    chapter = raw.get("to_measure_in")
    if chapter is not None and (not isinstance(chapter, str) or not _CHAPTER.fullmatch(chapter)):
        raise _fail(where, "to_measure_in", chapter, "a two-digit chapter number such as \"03\"")
    return Claim(cid, raw["topic"], tuple(articles), dict(quotes), _text(where, "claim", raw["claim"]),
                 raw["verdict"], _text(where, "truth", raw["truth"]),
                 tuple(_evidence(where, e, i) for i, e in enumerate(evidence, 1)), chapter)


def parse(data: dict[str, Any]) -> Ledger:
    """The validated ledger in a loaded claims table, or BadClaim naming the first bad value."""
    pinned = data.get("pinned")
    if not isinstance(pinned, dict) or set(pinned) != set(ENGINE_PACKAGES):
        raise _fail("top level", "pinned", pinned, "a table of versions for " + ", ".join(ENGINE_PACKAGES))
    topics = data.get("topics")
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise _fail("top level", "topics", topics, "a non-empty list of topic names")
    seeds = {}
    for sid, raw in (data.get("seeds") or {}).items():
        if not isinstance(raw, dict) or set(raw) != {"file", "lang", "title"}:
            raise _fail(f"seed {sid!r}", "seeds", raw, "a table with file, lang and title")
        seeds[sid] = Seed(sid, raw["file"], raw["lang"], raw["title"])
    if not seeds:
        raise _fail("top level", "seeds", data.get("seeds"), "a [seeds.ID] table per source article")
    claims = tuple(_claim(raw, i, tuple(topics), seeds) for i, raw in enumerate(data.get("claim") or [], 1))
    seen: set[str] = set()
    for c in claims:
        if c.id in seen:
            raise _fail(f"claim {c.id!r}", "id", c.id, "an id no other claim uses")
        seen.add(c.id)
    if not claims:
        raise _fail("top level", "claim", None, "at least one [[claim]]")
    return Ledger(dict(pinned), tuple(topics), seeds, claims)


def load(folder: Path | None = None) -> Ledger:
    """The ledger in servelab/data/claims.toml (or `folder`/claims.toml), validated."""
    return parse(datafiles.load(DATA_FILE, folder))


def seeds_dir() -> Path:
    """Where the source articles are: $SERVELAB_SEEDS, else shared/seeds in or beside the checkout."""
    if os.environ.get("SERVELAB_SEEDS"):
        return Path(os.environ["SERVELAB_SEEDS"]).expanduser()
    inside = REPO / "shared" / "seeds"
    return inside if inside.is_dir() else REPO.parent / "shared" / "seeds"


def missing_quotes(ledger: Ledger, folder: Path | None = None) -> list[str]:
    """One line per quote that its article does not contain (whitespace-normalised); [] when all do."""
    folder = folder or seeds_dir()
    texts = {sid: normalise((folder / s.file).read_text(encoding="utf-8")) for sid, s in ledger.seeds.items()}
    return [f"claim {c.id!r}: quotes.{ledger.seeds[a].lang} not found in {ledger.seeds[a].file}: "
            f"{c.quotes[ledger.seeds[a].lang]!r}"
            for c in ledger.claims for a in c.articles
            if normalise(c.quotes[ledger.seeds[a].lang]) not in texts[a]]


_FLAG = re.compile(r"(?<![\w`-])(--[a-z][a-z0-9-]*)")


def _cell(text: str) -> str:
    """`text` for one table cell: one line, pipes escaped, command-line flags as code (so the book's
    typography does not turn their leading `--` into a dash)."""
    return _FLAG.sub(r"`\1`", normalise(text).replace("|", "\\|"))


def _link(ref: str) -> str:
    if ref.startswith(("http://", "https://")):
        return f"[{ref.split('://', 1)[1].rstrip('/')}]({ref})"
    if _NOTEBOOK.fullmatch(ref):
        return f"[{ref}](../{ref}.ipynb)"
    return f"`{ref}`"


def _evidence_cell(claim: Claim, pinned: dict[str, str]) -> str:
    lines = []
    for e in claim.evidence:
        label = KINDS[e.kind]
        if e.kind == "engine_source":
            package = e.ref.split("/")[0]
            label = f"{'vLLM' if package == 'vllm' else 'SGLang'} {pinned[package]} source"
        lines.append(f"{label}: {_link(e.ref)}: {_cell(e.detail)}")
    if claim.to_measure_in:
        lines.append(f"to be measured in chapter {claim.to_measure_in}")
    return "<br>".join(lines)


def render(ledger: Ledger) -> str:
    """The Markdown page book/claims.md, computed from the ledger alone."""
    counts = ledger.counts()
    out = [
        "# The claims ledger: what the source articles say, checked",
        "",
        "Generated from `servelab/data/claims.toml` by `python -m servelab.book.claims`; "
        "do not edit this page by hand.",
        "",
        f"This page lists every factual claim made by the {len(ledger.seeds)} source articles the book "
        "started from (see [Sources and how claims are checked](sources.md)), each with a verdict, what "
        "holds today and the evidence. Engine facts are checked against the installed source code of "
        f"vLLM {ledger.pinned['vllm']} and SGLang {ledger.pinned['sglang']}, the versions this book pins; "
        "other facts against papers, release notes and the maintainers' own words, or against a "
        "measurement in a chapter of this book.",
        "",
        "A claim is *true* when it holds today, *outdated* when it held once but no longer does, "
        "*false* when it was wrong when written, and *unverifiable* when no primary source can settle "
        "it (a figure without a method, a point-in-time count, a guess). Quotes are the articles' own "
        "words; one row covers the translations that share a claim.",
        "",
        "## Summary",
        "",
        "| verdict | claims |",
        "| --- | ---: |",
        *[f"| {v} | {n} |" for v, n in counts.items()],
        f"| all | {sum(counts.values())} |",
        "",
        "| source article | language | claims |",
        "| --- | --- | ---: |",
        *[f"| {s.id}: {_cell(s.title)} | {s.lang} | {sum(s.id in c.articles for c in ledger.claims)} |"
          for s in ledger.seeds.values()],
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
            out.append(f"| **{c.id}** ({', '.join(c.articles)})<br>{_cell(c.claim)} | {quoted} | **{c.verdict}** "
                       f"| {_cell(c.truth)} | {_evidence_cell(c, ledger.pinned)} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab.book.claims", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if book/claims.md is not up to date")
    args = parser.parse_args(argv)
    ledger = load()
    page = render(ledger) + "\n"
    if args.check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(REPO)} is out of date; regenerate it: python -m servelab.book.claims",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    counts = ", ".join(f"{n} {v}" for v, n in ledger.counts().items())
    print(f"wrote {PAGE.relative_to(REPO)}: {len(ledger.claims)} claims ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
