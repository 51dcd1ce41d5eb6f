"""The claims ledger (servelab/data/claims.toml, servelab/book/claims.py, book/claims.md).

The data validates; every quote is found in the article it is attributed to, so the ledger can be
checked against the articles; every engine source it cites exists in the installed engines at the
pinned version and contains the quoted line; and the book page is the one the data renders.
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

import pytest

from servelab.book import claims
from servelab.machine import engine_envs
from servelab.machine.paths import REPO
from tests.conftest import pinned_version

PIN_ENVS = {"vllm": "vllm-cpu", "sglang": "sglang-cpu"}


@pytest.fixture(scope="module")
def ledger() -> claims.Ledger:
    return claims.load()


def _minimal() -> dict[str, Any]:
    """A small valid claims table, for the validator's error cases."""
    return {
        "pinned": {"vllm": "1.0", "sglang": "2.0"},
        "topics": ["Memory", "Speed"],
        "seeds": {"000": {"file": "000_a.txt", "lang": "ja", "title": "A"},
                  "001": {"file": "001_b.txt", "lang": "de", "title": "B"}},
        "claim": [
            {"id": "one", "topic": "Memory", "articles": ["000", "001"], "quotes": {"ja": "引用", "de": "Zitat"},
             "claim": "A claim.", "verdict": "false", "truth": "The truth.",
             "evidence": [{"kind": "engine_source", "ref": "vllm/config/cache.py", "detail": "d", "match": "m"}]},
            {"id": "two", "topic": "Speed", "articles": ["001"], "quotes": {"de": "schnell"},
             "claim": "Another.", "verdict": "unverifiable", "truth": "Nobody knows | --tp-size.",
             "to_measure_in": "06",
             "evidence": [{"kind": "paper", "ref": "https://arxiv.org/abs/1", "detail": "§1"}]},
        ],
    }


def test_data_validates_and_covers_every_article_and_topic(ledger):
    assert len(ledger.claims) >= 60
    assert {a for c in ledger.claims for a in c.articles} == set(ledger.seeds)
    assert [t for t in ledger.topics if not any(c.topic == t for c in ledger.claims)] == []


def test_every_verdict_is_one_of_the_four(ledger):
    assert {c.verdict for c in ledger.claims} <= set(claims.VERDICTS)
    assert sum(ledger.counts().values()) == len(ledger.claims)


def test_every_claim_has_evidence_and_settled_ones_a_primary_source(ledger):
    assert all(c.evidence and all(e.ref and e.detail for e in c.evidence) for c in ledger.claims)
    # a page an article cites ("source") is not primary evidence: only unverifiable claims may rest on it alone
    settled_on_citations = [c.id for c in ledger.claims if c.verdict != "unverifiable"
                            and all(e.kind == "source" for e in c.evidence)]
    assert settled_on_citations == []


def test_every_quote_occurs_in_its_article(ledger):
    folder = claims.seeds_dir()
    assert folder.is_dir(), f"the source articles are missing: {folder} (set SERVELAB_SEEDS)"
    assert claims.missing_quotes(ledger, folder) == []


def test_a_quote_its_article_lacks_is_reported(ledger, tmp_path):
    folder = tmp_path / "seeds"
    shutil.copytree(claims.seeds_dir(), folder)
    claim = next(c for c in ledger.claims if "001" in c.articles)
    seed = ledger.seeds["001"]
    text = (folder / seed.file).read_text(encoding="utf-8")
    (folder / seed.file).write_text(text.replace(claim.quotes["de"], "(entfernt)"), encoding="utf-8")
    missing = claims.missing_quotes(ledger, folder)
    assert any(m.startswith(f"claim {claim.id!r}: quotes.de not found in {seed.file}") for m in missing)


def test_quotes_match_whatever_the_line_breaks(tmp_path):
    ledger = claims.parse(_minimal())
    (tmp_path / "000_a.txt").write_text("前\n引\n用\n後 ", encoding="utf-8")  # a quote split over lines does not match
    (tmp_path / "001_b.txt").write_text("ein\n  Zitat,   schnell", encoding="utf-8")
    assert claims.missing_quotes(ledger, tmp_path) == [
        "claim 'one': quotes.ja not found in 000_a.txt: '引用'"]


def test_pinned_versions_are_the_pins_files(ledger):
    assert ledger.pinned == {pkg: pinned_version(env) for pkg, env in PIN_ENVS.items()}


def test_book_evidence_exists(ledger):
    refs = [e for c in ledger.claims for e in c.evidence if e.kind in ("notebook", "result")]
    missing = [e.ref for e in refs if not (REPO / (e.ref + ".py" if e.kind == "notebook" else e.ref)).is_file()]
    assert refs and missing == []


@pytest.mark.engine_venv
def test_engine_sources_exist_in_the_pinned_engines(ledger, require_engine, cpu):
    missing = []
    for package, version in ledger.pinned.items():
        require_engine(package)
        env = engine_envs.get(cpu.engine_env(package))
        assert (engine_envs.engine_version(env) or "").split("+")[0] == version, env.name
        site = env.site_packages()
        for c in ledger.claims:
            for e in c.evidence:
                if e.kind != "engine_source" or e.ref.split("/")[0] != package:
                    continue
                path = site / e.ref
                if not path.is_file():
                    missing.append(f"{c.id}: {e.ref} does not exist")
                elif claims.normalise(e.match) not in claims.normalise(path.read_text(encoding="utf-8")):
                    missing.append(f"{c.id}: {e.ref} does not contain {e.match!r}")
    assert missing == []


def test_page_is_up_to_date(ledger):
    assert claims.PAGE.read_text(encoding="utf-8") == claims.render(ledger) + "\n", \
        "book/claims.md is stale: python -m servelab.book.claims"


def test_cli_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    assert claims.main(["--check"]) == 0
    stale = tmp_path / "claims.md"
    stale.write_text(claims.PAGE.read_text(encoding="utf-8").replace("| true |", "| true?|"), encoding="utf-8")
    monkeypatch.setattr(claims, "PAGE", stale)
    monkeypatch.setattr(claims, "REPO", tmp_path)
    assert claims.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_page_counts_and_rows_come_from_the_data():
    page = claims.render(claims.parse(_minimal()))
    assert "| false | 1 |" in page and "| unverifiable | 1 |" in page and "| true | 0 |" in page
    assert "| all | 2 |" in page
    assert page.index("## Memory") < page.index("## Speed")
    assert "ja: 引用<br>de: Zitat" in page  # quotes in the order of the claim's articles
    assert "vLLM 1.0 source: `vllm/config/cache.py`: d" in page
    assert "to be measured in chapter 06" in page
    assert "Nobody knows \\| `--tp-size`." in page  # pipes escaped, flags kept from the book's typography


def _break(edit) -> str:
    data = _minimal()
    edit(data)
    with pytest.raises(claims.BadClaim) as err:
        claims.parse(data)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda d: d["claim"][0].update(verdict="maybe"),
     ["claim 'one'", "'verdict'", "'maybe'", "true, outdated, false, unverifiable"]),
    (lambda d: d["claim"][0].update(verdcit="true"), ["claim 'one'", "'verdcit'", "only the keys"]),
    (lambda d: d["claim"][0].pop("truth"), ["claim 'one'", "'truth'", "required"]),
    (lambda d: d["claim"][0].update(evidence=[]), ["claim 'one'", "'evidence'", "non-empty list"]),
    (lambda d: d["claim"][0]["quotes"].pop("de"), ["claim 'one'", "'quotes'", "ja", "de"]),
    (lambda d: d["claim"][0].update(articles=["000", "009"]), ["'articles'", "'009'", "000, 001"]),
    (lambda d: d["claim"][0].update(topic="Misc"), ["'topic'", "'Misc'", "Memory; Speed"]),
    (lambda d: d["claim"][1].update(to_measure_in="6"), ["claim 'two'", "'to_measure_in'", "'6'", "two-digit"]),
    (lambda d: d["claim"][1].update(id="one"), ["claim 'one'", "'id'", "no other claim"]),
    (lambda d: d["claim"][1].update(id="Two Words"), ["claim #2", "'id'", "slug"]),
    (lambda d: d["claim"][0]["evidence"][0].update(ref="torch/nn.py"),
     ["claim 'one', evidence #1", "'ref'", "'torch/nn.py'", "vllm/..., sglang/..."]),
    (lambda d: d["claim"][0]["evidence"][0].pop("match"), ["evidence #1", "'match'", "non-empty string"]),
    (lambda d: d["claim"][1]["evidence"][0].update(kind="blog"), ["claim 'two', evidence #1", "'kind'", "'blog'",
                                                                 "engine_source"]),
    (lambda d: d["claim"][1]["evidence"][0].update(match="x"), ["'match'", "only for kind 'engine_source'"]),
    (lambda d: d["claim"][1]["evidence"].append({"kind": "notebook", "ref": "notebooks/two", "detail": "d"}),
     ["evidence #2", "'ref'", "notebooks/NN_name"]),
    (lambda d: d["pinned"].pop("sglang"), ["top level", "'pinned'", "vllm, sglang"]),
])
def test_bad_data_is_one_line_naming_claim_key_value_and_accepted(edit, expected):
    message = _break(edit)
    assert message.startswith("claims.toml: ")
    for part in expected:
        assert part in message, message


def test_validator_accepts_the_minimal_table_unchanged():
    data = _minimal()
    ledger = claims.parse(copy.deepcopy(data))
    assert [c.id for c in ledger.claims] == ["one", "two"] and data == _minimal()
