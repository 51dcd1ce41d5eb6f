"""The claims ledger (servelab/data/claims.toml, servelab/book/claims.py, claims_page.py, book/claims.md).

The data validates, with dated verdicts (an outdated claim ended after its article was written) and no
verdict about GPUs resting on cpu measurements alone; no evidence is circular; every quote is found in the
article it is attributed to, where the articles are present (they are not part of the repository); every
engine source it cites exists in the installed engines at the version every profile runs and contains the
quoted line; and the book page is the one the data renders.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from servelab.book import claims, claims_circular, claims_page
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
        "seeds": {"000": {"file": "000_a.txt", "lang": "ja", "title": "A", "written": "2025-05-28", "dated_by": "x"},
                  "001": {"file": "001_b.txt", "lang": "de", "title": "B", "written": "2025-02", "dated_by": "y"}},
        "claim": [
            {"id": "one", "topic": "Memory", "articles": ["000", "001"], "quotes": {"ja": "引用", "de": "Zitat"},
             "claim": "A claim.", "verdict": "false", "truth": "The truth.",
             "evidence": [{"kind": "engine_source", "ref": "vllm/config/cache.py", "detail": "d", "match": "m"}]},
            {"id": "two", "topic": "Speed", "articles": ["001"], "quotes": {"de": "schnell"},
             "claim": "Another.", "verdict": "unverifiable", "truth": "Nobody knows | --tp-size.",
             "to_measure_in": "07",
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
    """The articles are not part of the repository (book/sources.md cites them): a clone on its own skips this
    check and says so; beside ../shared, or with SERVELAB_SEEDS, it runs."""
    folder = claims.seeds_dir()
    absent = claims.absent_articles(ledger, folder)
    if absent:
        pytest.skip(f"the source articles are not here ({folder} lacks {', '.join(absent)}): the quotes are checked "
                    "where they are (set SERVELAB_SEEDS to their folder)")
    assert claims.missing_quotes(ledger, folder) == []


def _articles_of_quotes(ledger: claims.Ledger, folder) -> None:
    """Stand-in articles holding exactly the ledger's quotes, one per line."""
    folder.mkdir()
    for sid, seed in ledger.seeds.items():
        quotes = [c.quotes[seed.lang] for c in ledger.claims if sid in c.articles]
        (folder / seed.file).write_text("\n".join(quotes), encoding="utf-8")


def test_a_quote_its_article_lacks_is_reported(ledger, tmp_path):
    folder = tmp_path / "seeds"
    _articles_of_quotes(ledger, folder)
    assert claims.absent_articles(ledger, folder) == [] and claims.missing_quotes(ledger, folder) == []
    claim = next(c for c in ledger.claims if "001" in c.articles)
    seed = ledger.seeds["001"]
    text = (folder / seed.file).read_text(encoding="utf-8")
    (folder / seed.file).write_text(text.replace(claim.quotes["de"], "(entfernt)"), encoding="utf-8")
    missing = claims.missing_quotes(ledger, folder)
    assert any(m.startswith(f"claim {claim.id!r}: quotes.de not found in {seed.file}") for m in missing)
    (folder / seed.file).unlink()
    assert claims.absent_articles(ledger, folder) == [seed.file]


def test_quotes_match_whatever_the_line_breaks(tmp_path):
    ledger = claims.parse(_minimal())
    (tmp_path / "000_a.txt").write_text("前\n引\n用\n後 ", encoding="utf-8")  # a quote split over lines does not match
    (tmp_path / "001_b.txt").write_text("ein\n  Zitat,   schnell", encoding="utf-8")
    assert claims.missing_quotes(ledger, tmp_path) == [
        "claim 'one': quotes.ja not found in 000_a.txt: '引用'"]


def test_pinned_versions_are_the_pins_files(ledger):
    assert ledger.pinned == {pkg: pinned_version(env) for pkg, env in PIN_ENVS.items()}


def test_every_profile_runs_the_versions_the_ledger_read(ledger):
    """The ledger's engine sources are read at one version per engine: every profile must run that one."""
    from servelab.machine import profiles

    runs = {(name, pkg): engine_envs.release(profiles.load(name).engine_env(pkg))
            for name in profiles.names() for pkg in ledger.pinned}
    assert len(runs) >= 6 and {k: v for k, v in runs.items() if v != ledger.pinned[k[1]]} == {}


def test_no_evidence_is_circular(ledger):
    assert claims_circular.circular(ledger) == []


def test_a_row_citing_the_chapter_that_reads_it_is_circular(ledger):
    from servelab.book import selection_guide

    read = selection_guide.LEDGER_ROWS[0][0]
    row = next(c for c in ledger.claims if c.id == read)
    guide = claims.Evidence("notebook", "notebooks/08_selection_guide", "the guide's row")
    looped = dataclasses.replace(ledger, claims=(dataclasses.replace(row, evidence=(*row.evidence, guide)),))
    assert claims_circular.circular(looped) == [
        f"claim {read!r}: its evidence notebooks/08_selection_guide reads this claim (circular)"]


def test_cited_chapters_were_executed_on_the_profile_the_ledger_names(ledger):
    from servelab.book import execution_key

    cited = {e.ref for c in ledger.claims for e in c.evidence if e.kind == "notebook"}
    profiles = {ref: (execution_key.recorded(REPO / f"{ref}.ipynb") or {}).get("profile") for ref in cited}
    assert cited and {r: p for r, p in profiles.items() if p != claims.COMMITTED_PROFILE} == {}


def test_gpu_claims_are_marked_and_none_is_settled_on_cpu_alone(ledger):
    gpu = [c for c in ledger.claims if c.gpu]
    # the rows an audit found settled by cpu measurements: speed-ups, memory and latency under load on GPUs
    audited = {"spec-speedup-2-3x", "spec-doubles-throughput", "concurrency-causes-oom", "techniques-reduce-vram",
               "concurrency-raises-ttft", "vllm-7b-throughput-range", "sglang-5000-tokens-per-second"}
    assert audited <= {c.id for c in gpu}
    assert [c.id for c in gpu if claims.settled_on_cpu_alone(c)] == []


def test_outdated_claims_ended_after_their_articles_were_written(ledger):
    for c in ledger.claims:
        if c.verdict == "outdated":
            assert c.changed and all(claims.after(c.changed.date, ledger.seeds[a].written) for a in c.articles), c.id


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
    assert claims_page.PAGE.read_text(encoding="utf-8") == claims_page.render(ledger) + "\n", \
        "book/claims.md is stale: python -m servelab.book.claims_page"


def test_cli_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    assert claims_page.main(["--check"]) == 0
    stale = tmp_path / "claims.md"
    stale.write_text(claims_page.PAGE.read_text(encoding="utf-8").replace("| true |", "| true?|"), encoding="utf-8")
    monkeypatch.setattr(claims_page, "PAGE", stale)
    monkeypatch.setattr(claims_page, "REPO", tmp_path)
    assert claims_page.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_page_counts_and_rows_come_from_the_data():
    page = claims_page.render(claims.parse(_minimal()))
    assert "| false | 1 |" in page and "| unverifiable | 1 |" in page and "| true | 0 |" in page
    assert "| all | 2 |" in page
    assert page.index("## Memory") < page.index("## Speed")
    assert "ja: 引用<br>de: Zitat" in page  # quotes in the order of the claim's articles
    assert "vLLM 1.0 source: `vllm/config/cache.py`: d" in page
    assert "to be measured in chapter 07" in page
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
    (lambda d: d["seeds"]["000"].pop("written"), ["seed '000'", "dated_by, file, lang, title, written"]),
    (lambda d: d["seeds"]["000"].update(written="May 2025"), ["seed '000'", "'written'", "YYYY-MM"]),
    (lambda d: d["claim"][0].update(verdict="outdated"), ["claim 'one'", "'changed'", "the change that ended it"]),
    (lambda d: d["claim"][0].update(verdict="outdated", changed={"date": "2025-04-06", "what": "v0.8.3"}),
     ["claim 'one'", "'changed.date'", "'2025-04-06'", "after article 000", "2025-05-28", "is false"]),
    (lambda d: d["claim"][0].update(changed={"date": "2025-07", "what": "v0.10"}),
     ["claim 'one'", "'changed.date'", "on or before article 000", "is outdated"]),
    (lambda d: d["claim"][0].update(verdict="outdated", changed={"date": "2025-05", "what": "v0.9"}),
     ["'changed.date'", "'2025-05'", "a day"]),
    (lambda d: d["claim"][1].update(changed={"date": "2024-01", "what": "x"}), ["claim 'two'", "only for an outdated"]),
    (lambda d: d["claim"][0].update(gpu="yes"), ["claim 'one'", "'gpu'", "true or false"]),
    (lambda d: d["claim"][0].update(gpu=True, evidence=[
        {"kind": "notebook", "ref": "notebooks/05_x", "detail": "d"},
        {"kind": "result", "ref": "results/cpu/x.csv", "detail": "d"}]),
     ["claim 'one'", "'verdict'", "GPU behaviour", "'unverifiable'"]),
    (lambda d: d["claim"][1]["evidence"].append({"kind": "article", "ref": "007", "detail": "d"}),
     ["claim 'two', evidence #2", "'ref'", "'007'", "a seed id"]),
    (lambda d: d["claim"][1]["evidence"].append({"kind": "source", "ref": "../shared/seeds/000_a.txt", "detail": "d"}),
     ["evidence #2", "'../shared/seeds/000_a.txt'", "inside this repository"]),
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


def test_dated_and_gpu_claims_that_the_evidence_carries_validate():
    data = _minimal()
    # false and already changed before the article was written; a GPU claim settled by an engine source
    data["claim"][0].update(changed={"date": "2025-01-15", "what": "v0.7"}, gpu=True)
    data["claim"][1].update(verdict="outdated", changed={"date": "2025-03", "what": "v0.8.0"},
                            evidence=[{"kind": "article", "ref": "001", "detail": "its section 4"}])
    ledger = claims.parse(data)
    assert ledger.claims[0].gpu and ledger.claims[1].changed == claims.Change("2025-03", "v0.8.0")
    page = claims_page.render(ledger)
    assert "changed 2025-03: v0.8.0" in page and "the article itself: 001 (B): its section 4" in page
    assert "| 000: A | ja | 2025-05-28 | x |" in page
    assert claims.after("2025-06", "2025-05-28") and claims.after("2025-05-29", "2025-05-28")
    assert not claims.after("2025-05-28", "2025-05-28") and claims.after("2025-05", "2025-05-28") is None
