"""The figures the book quotes from the vLLM paper and blog (servelab.book.quoted_figures).

No number is restated here: each figure's value is checked against its own quote, so a typo in either
shows up, and the simulator's defaults are checked against the figure they come from.
"""

from __future__ import annotations

import re

import pytest

from servelab.book.quoted_figures import BLOG_FIGURES, PAPER_FIGURES, figures_table
from servelab.sim.paging import requests

FIGURES = {**PAPER_FIGURES, **BLOG_FIGURES}

# Values read off a figure's bars or a table's other cells, whose quote (a caption, a legend, one table
# row) does not contain them. quoted_figures.py should quote the labels the value is read from; when it
# does, these strict xfails fail and must be removed from this set.
NOT_IN_QUOTE = {
    "fig2_token_states": "Fig. 2's bar labels; the quote is its caption",
    "fig2_breakdown": "Fig. 2's bar labels; the quote is its legend",
    "batched_requests": "Fig. 13's bar labels; the quote gives the ratios between them",
    "workload_mean_lengths": "Fig. 11's labels; the quote is its caption",
    "kv_slots_opt13b_a100": "26 GB and 40 GB come from Table 1 cells the quoted row leaves out",
}

_NUM = r"\d+(?:\.\d+)?"
_UNIT = r"%|[x×](?![A-Za-z])|K(?![A-Za-z])"


def numbers(text: str) -> set[tuple[float, str]]:
    """The numbers in `text`, each with its unit ("%", "×" for x or ×, "K" for thousands, or "").

    A range's unit applies to both ends ("20–26%" is 20% and 26%); digits inside words (A100, Pow2)
    are not numbers.
    """
    text = re.sub(rf"({_NUM})(\s*[-–]\s*)({_NUM})({_UNIT})", r"\1\4\2\3\4", text)
    return {(float(n), u.replace("x", "×"))
            for n, u in re.findall(rf"(?<![\w.])({_NUM})({_UNIT})?", text)}


def _bump_first_number(text: str) -> str:
    """`text` with the last digit of its first number changed."""
    m = re.search(r"(?<![\w.])\d+(?:\.\d+)?", text)
    assert m, text
    digits = m.group()
    return text[:m.start()] + digits[:-1] + str((int(digits[-1]) + 1) % 10) + text[m.end():]


def test_numbers_are_normalised():
    assert numbers("20–26%") == numbers("20% – 26%") == {(20.0, "%"), (26.0, "%")}
    assert numbers("up to 2.2x throughput") == numbers("2.2× more") == {(2.2, "×")}
    assert numbers("15.7K slots, 12 GB, 800 KB") == {(15.7, "K"), (12.0, ""), (800.0, "")}
    assert numbers("Pow2 on an A100, §6.2") == {(6.2, "")}


def test_every_figure_is_complete():
    assert not set(PAPER_FIGURES) & set(BLOG_FIGURES), "a key names two figures"
    for key, fig in FIGURES.items():
        assert fig.value and fig.measures and fig.where and fig.quote and fig.numbers and fig.source, key
    assert all(f.source.startswith("vLLM blog") for f in BLOG_FIGURES.values())
    assert not any(f.source.startswith("vLLM blog") for f in PAPER_FIGURES.values())
    table = figures_table()
    assert list(table["key"]) == list(FIGURES)
    assert list(table["value"]) == [f.value for f in FIGURES.values()]


@pytest.mark.parametrize("key", [
    pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=NOT_IN_QUOTE[k])) if k in NOT_IN_QUOTE else k
    for k in FIGURES
])
def test_value_appears_in_its_quote(key):
    fig = FIGURES[key]
    assert numbers(fig.value), f"{key}: no number in {fig.value!r}"
    missing = numbers(fig.value) - numbers(fig.quote)
    assert not missing, f"{key}: value {fig.value!r} states {sorted(missing)}, which its quote does not: {fig.quote!r}"


@pytest.mark.parametrize("key", [k for k in FIGURES if k not in NOT_IN_QUOTE])
def test_a_changed_value_is_caught(key):
    """The control for the test above: one digit changed in the value, and the quote no longer has it."""
    fig = FIGURES[key]
    assert numbers(_bump_first_number(fig.value)) - numbers(fig.quote)


def test_simulated_workload_uses_the_quoted_sharegpt_means():
    means = PAPER_FIGURES["workload_mean_lengths"].numbers
    simulated = requests.SHAREGPT_MEAN_PROMPT, requests.SHAREGPT_MEAN_OUTPUT
    assert simulated == (means["sharegpt_in"], means["sharegpt_out"])


def test_speculative_figures_quote_their_values_and_render():
    from servelab.book.quoted_figures import quote_markdown
    from servelab.book.quoted_figures_speculative import SPECULATIVE_FIGURES

    assert not set(SPECULATIVE_FIGURES) & set(FIGURES)
    for key, fig in SPECULATIVE_FIGURES.items():
        assert all(part in fig.quote for part in fig.value.split("; ")), key
        assert fig.source and fig.where and fig.measures
    text = quote_markdown("spec_chen_numerics", "spec_vllm_high_qps")
    assert "within hardware numerics" in text and "1.8x slowdown" in text
