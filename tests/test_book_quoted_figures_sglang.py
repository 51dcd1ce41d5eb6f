"""Chapter 04's quoted SGLang figure: kept with its source and reachable through quote_markdown."""

from servelab.book.quoted_figures import BLOG_FIGURES, PAPER_FIGURES, SGLANG_FIGURES, quote_markdown


def test_the_sglang_figure_is_quoted_with_its_source_and_number():
    fig = SGLANG_FIGURES["sglang_lmsys_5x"]
    assert "5 times" in fig.quote and fig.numbers == {"max": 5.0} and fig.source.startswith("LMSYS blog")
    assert not set(SGLANG_FIGURES) & (set(PAPER_FIGURES) | set(BLOG_FIGURES))
    text = quote_markdown("sglang_lmsys_5x")
    assert fig.quote in text and "2024-01-17" in text
