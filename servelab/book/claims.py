"""The claims ledger: every factual claim of the source articles, with a verdict and its evidence.

The data is servelab/data/claims.toml; this module validates it (one error line naming the claim, the
key, the bad value and what is accepted), checks its quotes against the articles themselves where they
are present. The book page book/claims.md is rendered from it by claims_page.py (`python -m
servelab.book.claims_page`); circular evidence is found by claims_circular.py.

Verdicts are dated: each article has the date it was written on or after (`written`), an *outdated*
claim names the change that ended it (`changed`), which must come after every article's date (before it,
the claim was wrong when written: *false*). A claim about GPU behaviour (`gpu = true`) may not be
settled by measurements on the cpu profile alone.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.machine import datafiles
from servelab.machine.paths import REPO

DATA_FILE = "claims.toml"
VERDICTS = ("true", "outdated", "false", "unverifiable")
KINDS = {  # evidence kind -> how the page labels it (measurements add the profile they ran on)
    "engine_source": "engine source", "notebook": "measurement", "result": "measured data",
    "paper": "paper", "maintainers": "maintainers", "pr": "pull request", "issue": "issue",
    "release": "release notes", "docs": "docs", "registry": "package index",
    "source": "a page the article cites", "article": "the article itself",
}
MEASUREMENTS = ("notebook", "result")
NOT_PRIMARY = ("source", "article")  # what an article says or cites settles nothing about the engines
# The committed notebooks are executed on this profile (a test checks their metadata); a `notebook` row cites
# what they measured there. A GPU run's saved data is cited as `result` under results/<gpu profile>/.
COMMITTED_PROFILE = "cpu"
ENGINE_PACKAGES = ("vllm", "sglang")
_CLAIM_KEYS = {"id", "topic", "articles", "quotes", "claim", "verdict", "truth", "evidence", "to_measure_in",
               "changed", "gpu"}
_REQUIRED = _CLAIM_KEYS - {"to_measure_in", "changed", "gpu"}
_SEED_KEYS = {"file", "lang", "title", "written", "dated_by"}
_EVIDENCE_KEYS = {"kind", "ref", "detail", "match"}
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")
NOTEBOOK = re.compile(r"notebooks/\d\d_[a-z0-9_]+")
_CHAPTER = re.compile(r"\d\d")
_DATE = re.compile(r"(\d{4})-(\d{2})(?:-(\d{2}))?")


class BadClaim(ValueError):
    pass


@dataclass(frozen=True)
class Seed:
    id: str
    file: str
    lang: str
    title: str
    written: str  # the article was written on or after this date (YYYY-MM or YYYY-MM-DD)
    dated_by: str  # how we know


@dataclass(frozen=True)
class Change:
    date: str  # when the claim stopped holding (YYYY-MM or YYYY-MM-DD)
    what: str  # the release, PR or event that ended it


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
    changed: Change | None = None
    gpu: bool = False  # the claim is about GPU behaviour: cpu measurements cannot settle it


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


def _date(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not _DATE.fullmatch(value) or not 1 <= int(value[5:7]) <= 12:
        raise _fail(where, key, value, "a date YYYY-MM or YYYY-MM-DD")
    return value


def after(later: str, earlier: str) -> bool | None:
    """Whether date `later` is after `earlier`; None when one gives no day and both fall in one month."""
    if later[:7] != earlier[:7]:
        return later[:7] > earlier[:7]
    if len(later) == 7 or len(earlier) == 7:
        return None
    return later > earlier


def measured_on(e: Evidence) -> str | None:
    """The profile a measurement ran on (results/<profile>/...; a notebook: COMMITTED_PROFILE); None otherwise."""
    if e.kind == "result":
        return e.ref.split("/")[1]
    return COMMITTED_PROFILE if e.kind == "notebook" else None


def settled_on_cpu_alone(claim: Claim) -> bool:
    """Whether a verdict about GPU behaviour rests on nothing but cpu measurements and the article itself."""
    return claim.gpu and claim.verdict != "unverifiable" and all(
        measured_on(e) == COMMITTED_PROFILE or e.kind in NOT_PRIMARY for e in claim.evidence)


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
    if kind == "notebook" and not NOTEBOOK.fullmatch(ref):
        raise _fail(at, "ref", ref, "notebooks/NN_name")
    if kind == "result" and not re.fullmatch(r"results/[a-z0-9-]+/\S+", ref):
        raise _fail(at, "ref", ref, "results/<profile>/<file>")
    if ref.startswith("../"):
        raise _fail(at, "ref", ref, "an address or a path inside this repository (the book may not point outside it)")
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
        raise _fail(where, "to_measure_in", chapter, "a two-digit chapter number such as \"04\"")
    rows = tuple(_evidence(where, e, i) for i, e in enumerate(evidence, 1))
    for i, e in enumerate(rows, 1):
        if e.kind == "article" and e.ref not in seeds:
            raise _fail(f"{where}, evidence #{i}", "ref", e.ref, "a seed id: " + ", ".join(seeds))
    gpu = raw.get("gpu", False)
    if not isinstance(gpu, bool):
        raise _fail(where, "gpu", gpu, "true or false")
    changed = _changed(where, raw.get("changed"), raw["verdict"], [seeds[a] for a in articles])
    claim = Claim(cid, raw["topic"], tuple(articles), dict(quotes), _text(where, "claim", raw["claim"]),
                  raw["verdict"], _text(where, "truth", raw["truth"]), rows, chapter, changed, gpu)
    if settled_on_cpu_alone(claim):
        raise _fail(where, "verdict", claim.verdict, "for a claim about GPU behaviour (gpu = true), evidence beyond "
                    "cpu measurements (engine source, a paper, docs, the maintainers, a GPU run's results), or "
                    "'unverifiable'")
    return claim


def _changed(where: str, raw: Any, verdict: str, articles: list[Seed]) -> Change | None:
    """The dated change that ended a claim; an outdated claim needs one after every article's date, a false claim
    may name one only from before (it had already stopped holding when the article was written)."""
    if raw is None:
        if verdict == "outdated":
            raise _fail(where, "changed", None, "for an outdated claim, {date, what}: the change that ended it")
        return None
    if not isinstance(raw, dict) or set(raw) != {"date", "what"}:
        raise _fail(where, "changed", raw, "a table {date, what}")
    change = Change(_date(where, "changed.date", raw["date"]), _text(where, "changed.what", raw["what"]))
    if verdict not in ("outdated", "false"):
        raise _fail(where, "changed", raw, "only for an outdated or false claim")
    for seed in articles:
        later = after(change.date, seed.written)
        if later is None:
            raise _fail(where, "changed.date", change.date, f"a day, to compare with article {seed.id}'s "
                        f"{seed.written}")
        if verdict == "outdated" and not later:
            raise _fail(where, "changed.date", change.date, f"a date after article {seed.id} was written "
                        f"({seed.written}); a claim that had stopped holding by then is false")
        if verdict == "false" and later:
            raise _fail(where, "changed.date", change.date, f"a date on or before article {seed.id}'s "
                        f"{seed.written}; a claim that held when written and stopped later is outdated")
    return change


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
        if not isinstance(raw, dict) or set(raw) != _SEED_KEYS:
            raise _fail(f"seed {sid!r}", "seeds", raw, "a table with " + ", ".join(sorted(_SEED_KEYS)))
        seeds[sid] = Seed(sid, raw["file"], raw["lang"], raw["title"],
                          _date(f"seed {sid!r}", "written", raw["written"]),
                          _text(f"seed {sid!r}", "dated_by", raw["dated_by"]))
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
    """Where the source articles may be: $SERVELAB_SEEDS, else shared/seeds in or beside the checkout. They are
    not part of the repository (the book cites them, book/sources.md); the quote check runs where they are."""
    if os.environ.get("SERVELAB_SEEDS"):
        return Path(os.environ["SERVELAB_SEEDS"]).expanduser()
    inside = REPO / "shared" / "seeds"
    return inside if inside.is_dir() else REPO.parent / "shared" / "seeds"


def absent_articles(ledger: Ledger, folder: Path) -> list[str]:
    """The ledger's article files that `folder` lacks ([] when the quotes can be checked there)."""
    return [s.file for s in ledger.seeds.values() if not (folder / s.file).is_file()]


def missing_quotes(ledger: Ledger, folder: Path | None = None) -> list[str]:
    """One line per quote that its article does not contain (whitespace-normalised); [] when all do."""
    folder = folder or seeds_dir()
    texts = {sid: normalise((folder / s.file).read_text(encoding="utf-8")) for sid, s in ledger.seeds.items()}
    return [f"claim {c.id!r}: quotes.{ledger.seeds[a].lang} not found in {ledger.seeds[a].file}: "
            f"{c.quotes[ledger.seeds[a].lang]!r}"
            for c in ledger.claims for a in c.articles
            if normalise(c.quotes[ledger.seeds[a].lang]) not in texts[a]]
