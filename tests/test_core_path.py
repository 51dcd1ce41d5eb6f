"""The core path of every chapter: within its word budget, a "What to remember", no engine line numbers."""

from __future__ import annotations

import pytest

from servelab.book import chapters, core_path

SOURCES = chapters.sources()


def test_a_dropdown_and_what_it_nests_are_evidence_the_rest_is_core():
    text = ("The core idea.\n\n:::{dropdown} How we know: the source\nThe engine does it in `f`.\n"
            "```python\nx = 1\n```\n:::\n\nBack on the core path.")
    core, evidence = core_path.split(text)
    assert core_path.words(core) == 8 and "engine" not in core and "```python" in evidence
    assert core_path.split(":::{note}\nA note stays core.\n:::")[1] == ""
    assert core_path.words("A `code span` and a [link](https://example.org/long/path) count.") == 6


def test_measure_counts_a_chapter_its_dropdowns_apart(tmp_path):
    source = tmp_path / "07_x.py"
    source.write_text("# %% [markdown]\n# One two three, see vllm/x.py:120.\n#\n# :::{dropdown} How we know: it\n"
                      "# Four five.\n# :::\n\n# %% [markdown]\n# ## What to remember\n#\n# - Eight.\n\n"
                      "# %%\nx = 1\n")
    found = core_path.measure(source)
    assert (found.core_words, found.evidence_words, found.remember) == (12, 7, True)
    assert found.line_refs == [".py:120"] and found.budget == core_path.DEFAULT_BUDGET


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_every_chapter_has_a_core_path_within_budget(source):
    found = core_path.measure(source)
    assert not found.line_refs, f"{source.stem}: engine line numbers in prose {found.line_refs}; name the function"
    assert found.remember, f"{source.stem}: no '## What to remember' cell"
    assert found.core_words <= found.budget, (
        f"{source.stem}: {found.core_words} core words, budget {found.budget}; move evidence into a "
        "':::{dropdown} How we know: ...' block (CONTRIBUTING.md, 'Core path and evidence layer')")
