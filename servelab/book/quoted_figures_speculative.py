"""Figures about speculative decoding that chapter 06 quotes: the two papers that introduced it and the
vLLM team's own blog post, each with where it comes from (rendered by ``quoted_figures.quote_markdown``)."""

from __future__ import annotations

from servelab.book.quoted_figures import PaperFigure

_LEVIATHAN = "Leviathan, Kalman & Matias, ICML 2023, arXiv:2211.17192"
_CHEN = "Chen et al. 2023, arXiv:2302.01318"
_SPEC_BLOG = "vLLM blog, 'How Speculative Decoding Boosts vLLM Performance by up to 2.8x', 2024-10-17"

SPECULATIVE_FIGURES: dict[str, PaperFigure] = {
    "spec_leviathan_t5": PaperFigure(
        value="2X-3X",
        measures="walltime speedup of speculative decoding on T5-XXL against the standard T5X implementation",
        where="abstract",
        quote="We demonstrate it on T5-XXL and show a 2X-3X acceleration compared to the standard T5X "
        "implementation, with identical outputs.",
        numbers={"low": 2.0, "high": 3.0},
        source=_LEVIATHAN,
    ),
    "spec_chen_chinchilla": PaperFigure(
        value="2-2.5x",
        measures="decoding speedup of speculative sampling on Chinchilla 70B in a distributed setup",
        where="abstract",
        quote="We benchmark speculative sampling with Chinchilla, a 70 billion parameter language model, achieving "
        "a 2-2.5x decoding speedup in a distributed setup, without compromising the sample quality",
        numbers={"low": 2.0, "high": 2.5},
        source=_CHEN,
    ),
    "spec_chen_numerics": PaperFigure(
        value="within hardware numerics",
        measures="how exactly the modified rejection sampling preserves the target model's distribution",
        where="abstract",
        quote="a novel modified rejection sampling scheme which preserves the distribution of the target model "
        "within hardware numerics",
        source=_CHEN,
    ),
    "spec_vllm_low_qps": PaperFigure(
        value="up to 1.5x",
        measures="speedup of vLLM with a draft model at one query per second",
        where="section on draft-model results",
        quote="up to 1.5x Speedup at QPS=1",
        numbers={"max": 1.5},
        source=_SPEC_BLOG,
    ),
    "spec_vllm_high_qps": PaperFigure(
        value="1.4x slowdown; 1.8x slowdown",
        measures="slowdowns the vLLM team measured with speculative decoding at high QPS (Llama3-70B, 4xH100)",
        where="results at high QPS (the two slowdowns as labelled in the post; the sentence around them: "
        "'in high-QPS environments, speculative decoding may introduce performance trade-offs')",
        quote="1.4x slowdown | 1.8x slowdown",
        numbers={"low": 1.4, "high": 1.8},
        source=_SPEC_BLOG,
    ),
}
"""Figures about speculative decoding (chapter 06): the two papers and the vLLM team's own blog post."""
