"""Quoted figures shown in full in the book, and Fig. 2's labelled breakdown as a table."""

from __future__ import annotations

import math

import pytest

from servelab.book.quoted_figures import FIG2_SEGMENTS, PAPER_FIGURES, fig2_breakdown, quote_markdown


def test_quote_markdown_shows_every_quote_whole_with_its_source() -> None:
    text = quote_markdown("attention_kernel_overhead", "default_block_size")
    for key in ("attention_kernel_overhead", "default_block_size"):
        fig = PAPER_FIGURES[key]
        assert f"> {fig.quote}" in text  # not cut
        assert fig.where in text and fig.source in text and fig.value in text


def test_quote_markdown_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="unknown figure"):
        quote_markdown("no_such_figure")
    with pytest.raises(ValueError, match="none given"):
        quote_markdown()


def test_fig2_breakdown_rows_add_up_where_fully_labelled() -> None:
    table = fig2_breakdown()
    assert list(table.columns) == list(FIG2_SEGMENTS)
    assert list(table.index) == ["Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM"]
    for system in ("Orca (Max)", "Orca (Pow2)"):
        assert table.loc[system].sum() == pytest.approx(100.0, abs=0.2)
    assert math.isnan(table.loc["Orca (Oracle)", "internal frag."])
    assert table.loc["vLLM", "token states"] == PAPER_FIGURES["fig2_token_states"].numbers["vLLM"]
