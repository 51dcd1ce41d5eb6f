"""Figures the vLLM authors reported, quoted with where they come from, to set beside measurements.

Each entry keeps the number exactly as printed, what it measures, the section or figure, and the
sentence it appears in, so a chapter can cite rather than copy. Blog figures are kept apart from
the paper's on purpose: they are not the same kind of source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass(frozen=True)
class PaperFigure:
    """A number reported by the vLLM authors, with where it comes from and what it measures."""

    value: str  # the number exactly as printed
    measures: str
    where: str  # section / figure / table of the source
    quote: str  # the sentence (or figure caption and labels) it appears in
    numbers: dict[str, float] = field(default_factory=dict)  # labelled numeric values, for plotting
    source: str = "Kwon et al., SOSP 2023, arXiv:2309.06180"


PAPER_FIGURES: dict[str, PaperFigure] = {
    "kv_usage_existing_systems": PaperFigure(
        value="20.4% - 38.2%",
        measures="share of KV cache memory holding actual token states in existing systems (Orca variants)",
        where="§1 Introduction; Fig. 2",
        quote="our profiling results in Fig. 2 show that only 20.4% - 38.2% of the KV cache memory is "
        "used to store the actual token states in the existing systems.",
        numbers={"low": 20.4, "high": 38.2},
    ),
    "fig2_token_states": PaperFigure(
        value="20.4 / 26.8 / 38.2 / 96.3",
        measures="KV cache usage (%) holding token states: Orca (Max), Orca (Pow2), Orca (Oracle), vLLM, "
        "averaged over the §6.2 experiment (OPT-13B)",
        where="Fig. 2 (bar labels)",
        quote="Figure 2. Average percentage of memory wastes in different LLM serving systems during the "
        "experiment in §6.2.",
        numbers={"Orca (Max)": 20.4, "Orca (Pow2)": 26.8, "Orca (Oracle)": 38.2, "vLLM": 96.3},
    ),
    "fig2_breakdown": PaperFigure(
        value="Max 20.4/13.3/57.3/8.9; Pow2 26.8/17.9/13.6/41.6; Oracle 38.2/25.2/-/36.6",
        measures="KV cache usage (%) split into token states / reservation / internal frag. / external "
        "frag. & others. The numbers are Fig. 2's bar labels; their assignment to segments is read from "
        "the stacking order (each bar sums to 100; Oracle, knowing output lengths, has no internal frag.)",
        where="Fig. 2 (bar labels)",
        quote="Token states | Reservation | Internal frag. | External frag. & Others",
        numbers={
            "Orca (Max)/token states": 20.4,
            "Orca (Max)/reservation": 13.3,
            "Orca (Max)/internal frag.": 57.3,
            "Orca (Max)/external frag. & others": 8.9,
            "Orca (Pow2)/token states": 26.8,
            "Orca (Pow2)/reservation": 17.9,
            "Orca (Pow2)/internal frag.": 13.6,
            "Orca (Pow2)/external frag. & others": 41.6,
            "Orca (Oracle)/token states": 38.2,
            "Orca (Oracle)/reservation": 25.2,
            "Orca (Oracle)/external frag. & others": 36.6,
            "vLLM/token states": 96.3,
        },
    ),
    "throughput_gain": PaperFigure(
        value="2-4×",
        measures="serving throughput of vLLM vs FasterTransformer and Orca at the same latency",
        where="Abstract (also §1, §9)",
        quote="vLLM improves the throughput of popular LLMs by 2-4× with the same level of latency "
        "compared to the state-of-the-art systems, such as FasterTransformer and Orca.",
        numbers={"low": 2.0, "high": 4.0},
    ),
    "request_rate_gain_sharegpt": PaperFigure(
        value="1.7×–2.7× (vs Orca Oracle), 2.7×–8× (vs Orca Max), up to 22× (vs FasterTransformer)",
        measures="request rate sustained at similar latency, ShareGPT trace, OPT-13B/66B/175B",
        where="§6.2, Fig. 12",
        quote="On the ShareGPT dataset, vLLM can sustain 1.7×–2.7× higher request rates compared to Orca "
        "(Oracle) and 2.7×–8× compared to Orca (Max), while maintaining similar latencies. [...] "
        "Compared to FasterTransformer, vLLM can sustain up to 22× higher request rates",
        numbers={"oracle_low": 1.7, "oracle_high": 2.7, "max_low": 2.7, "max_high": 8.0, "ft_max": 22.0},
    ),
    "batched_requests": PaperFigure(
        value="ShareGPT 7.00 / 9.81 / 13.62 / 30.42; Alpaca 7.00 / 43.24 / 72.75 / 132.44",
        measures="average number of batched requests, OPT-13B, Orca (Max) / (Pow2) / (Oracle) / vLLM, "
        "ShareGPT at 2 req/s and Alpaca at 30 req/s",
        where="§6.2, Fig. 13",
        quote="for OPT-13B vLLM processes 2.2× more requests at the same time than Orca (Oracle) and 4.3× "
        "more requests than Orca (Max).",
        numbers={
            "ShareGPT/Orca (Max)": 7.00,
            "ShareGPT/Orca (Pow2)": 9.81,
            "ShareGPT/Orca (Oracle)": 13.62,
            "ShareGPT/vLLM": 30.42,
            "Alpaca/Orca (Max)": 7.00,
            "Alpaca/Orca (Pow2)": 43.24,
            "Alpaca/Orca (Oracle)": 72.75,
            "Alpaca/vLLM": 132.44,
        },
    ),
    "beam_search_saving_up_to": PaperFigure(
        value="up to 55%",
        measures="memory saved by sharing KV blocks between beam-search candidates",
        where="§3 (Complex decoding algorithms), pointing to §6.3",
        quote="In more sophisticated algorithms like beam search, different request beams can share "
        "larger portions (up to 55% memory saving, see §6.3) of their KV cache",
        numbers={"max": 55.0},
    ),
    "sharing_saving_alpaca": PaperFigure(
        value="6.1% - 9.8% (parallel sampling), 37.6% - 55.2% (beam search)",
        measures="blocks saved by sharing / blocks without sharing, OPT-13B, Alpaca trace; Fig. 15 bars: "
        "2/4/6 output sequences and beam width 2/4/6",
        where="§6.3, Fig. 15",
        quote="We show 6.1% - 9.8% memory saving on parallel sampling and 37.6% - 55.2% on beam search.",
        numbers={
            "parallel n=2": 6.09,
            "parallel n=4": 8.53,
            "parallel n=6": 9.79,
            "beam k=2": 37.56,
            "beam k=4": 53.13,
            "beam k=6": 55.16,
        },
    ),
    "sharing_saving_sharegpt": PaperFigure(
        value="16.2% - 30.5% (parallel sampling), 44.3% - 66.3% (beam search)",
        measures="the same memory saving from sharing, on the ShareGPT trace",
        where="§6.3",
        quote="In the same experiments with the ShareGPT dataset, we saw 16.2% - 30.5% memory saving on "
        "parallel sampling and 44.3% - 66.3% on beam search.",
        numbers={"parallel_low": 16.2, "parallel_high": 30.5, "beam_low": 44.3, "beam_high": 66.3},
    ),
    "prompt_share_parallel_sampling": PaperFigure(
        value="12%",
        measures="share of total KV cache memory taken by the prompt when sampling several outputs",
        where="§3 (Complex decoding algorithms)",
        quote="the KV cache of the prompt part, which accounts for 12% of the total KV cache memory in our "
        "experiment (§6.3), can be shared to minimize memory usage.",
        numbers={"pct": 12.0},
    ),
    "kv_bytes_per_token_opt13b": PaperFigure(
        value="800 KB per token; up to 1.6 GB per request",
        measures="KV cache size of OPT-13B: 2 (K and V) × 5120 (hidden) × 40 (layers) × 2 bytes (FP16), "
        "and for a 2048-token sequence",
        where="§3 (Large KV cache)",
        quote="for the 13B parameter OPT model, the KV cache of a single token demands 800 KB of space "
        "[...] the memory required to store the KV cache of one request can be as much as 1.6 GB.",
        numbers={"kb_per_token": 800.0, "gb_per_request": 1.6},
    ),
    "kv_slots_opt13b_a100": PaperFigure(
        value="15.7K slots (12 GB for KV cache, 26 GB parameters, 40 GB A100)",
        measures="KV cache capacity in tokens for OPT-13B on one A100-40GB",
        where="§6.1, Table 1",
        quote="Memory for KV cache 12 GB | Max. # KV cache slots 15.7K (13B, A100)",
        numbers={"slots": 15_700.0, "kv_gb": 12.0, "param_gb": 26.0},
    ),
    "memory_layout_13b": PaperFigure(
        value="~65% weights, close to 30% KV cache",
        measures="GPU memory split when serving a 13B model on an A100-40GB",
        where="§1, Fig. 1 (left)",
        quote="Approximately 65% of the memory is allocated for the model weights, which remain static "
        "during serving. Close to 30% of the memory is used to store the dynamic states of the requests.",
        numbers={"weights_pct": 65.0, "kv_pct": 30.0},
    ),
    "workload_mean_lengths": PaperFigure(
        value="ShareGPT input 161.31 / output 337.99; Alpaca input 19.31 / output 58.45 (mean tokens)",
        measures="mean prompt and output lengths of the two traces used in the evaluation",
        where="§6.1, Fig. 11",
        quote="Figure 11. Input and output length distributions of the (a) ShareGPT and (b) Alpaca datasets.",
        numbers={"sharegpt_in": 161.31, "sharegpt_out": 337.99, "alpaca_in": 19.31, "alpaca_out": 58.45},
    ),
    "default_block_size": PaperFigure(
        value="16",
        measures="vLLM's default block size (tokens per block)",
        where="§7.2, Fig. 18b",
        quote="block size 16 is large enough to efficiently utilize the GPU and small enough to avoid "
        "significant internal fragmentation in most workloads. Accordingly, vLLM sets its default block "
        "size as 16.",
        numbers={"block_size": 16.0},
    ),
    "attention_kernel_overhead": PaperFigure(
        value="20–26%",
        measures="extra attention-kernel latency of PagedAttention vs FasterTransformer's kernel "
        "(block-table lookups, extra branches, variable lengths)",
        where="§7.1, Fig. 18a",
        quote="As shown in Fig. 18a, this leads to 20–26% higher attention kernel latency, compared to the "
        "highly-optimized FasterTransformer implementation.",
        numbers={"low": 20.0, "high": 26.0},
    ),
}
"""Figures from the vLLM paper, each checked against the paper's text (arXiv:2309.06180v1)."""

_BLOG = "vLLM blog, 'vLLM: Easy, Fast, and Cheap LLM Serving with PagedAttention', 2023-06-20"

BLOG_FIGURES: dict[str, PaperFigure] = {
    "waste_existing_systems": PaperFigure(
        value="60% – 80%",
        measures="memory wasted by existing systems to fragmentation and over-reservation",
        where="section 'The Secret Sauce: PagedAttention'",
        quote="We find that existing systems waste 60% – 80% of memory due to fragmentation and "
        "over-reservation.",
        numbers={"low": 60.0, "high": 80.0},
        source=_BLOG,
    ),
    "paged_waste": PaperFigure(
        value="under 4%",
        measures="memory wasted with PagedAttention (the paper's Fig. 2 shows 96.3% holding token states)",
        where="section 'The Secret Sauce: PagedAttention'",
        quote="In PagedAttention, memory waste only happens in the last block of a sequence. In practice, "
        "this results in near-optimal memory usage, with a mere waste of under 4%.",
        numbers={"max": 4.0},
        source=_BLOG,
    ),
    "sharing_saving": PaperFigure(
        value="up to 55%; up to 2.2x throughput",
        measures="memory saved by sharing in parallel sampling and beam search, and the throughput gain",
        where="section 'The Secret Sauce: PagedAttention'",
        quote="cutting their memory usage by up to 55%. This can translate into up to 2.2x improvement in "
        "throughput.",
        numbers={"memory_pct": 55.0, "throughput_x": 2.2},
        source=_BLOG,
    ),
}
"""Figures the vLLM authors gave in their launch blog post, not in the paper; kept apart on purpose."""


_LMSYS_BLOG = "LMSYS blog, 'Fast and Expressive LLM Inference with RadixAttention and SGLang', 2024-01-17"

SGLANG_FIGURES: dict[str, PaperFigure] = {
    "sglang_lmsys_5x": PaperFigure(
        value="up to 5 times",
        measures="throughput of SGLang against Guidance and vLLM on the post's workloads (Llama-7B and Mixtral-8x7B "
        "on A10G, vLLM 0.2.5, Guidance 0.1.8); the figure the long Japanese comparison (seed 003) repeats as "
        "'最大5倍高速なスループット'",
        where="the post's results section",
        quote="SGLang achieves up to 5 times higher throughput compared to existing systems, namely Guidance and vLLM",
        numbers={"max": 5.0},
        source=_LMSYS_BLOG,
    ),
}
"""Figures about SGLang's prefix cache (chapter 04): the SGLang team's launch post."""


def figures_table() -> pd.DataFrame:
    """All paper and blog figures as one tidy table (key, value, measures, where, source, quote)."""
    rows = [
        {
            "key": k,
            "value": f.value,
            "measures": f.measures,
            "where": f.where,
            "source": f.source,
            "quote": f.quote,
        }
        for k, f in {**PAPER_FIGURES, **BLOG_FIGURES}.items()
    ]
    return pd.DataFrame(rows)


def quote_markdown(*keys: str) -> str:
    """The figures `keys` as Markdown: each quote in full, with its value, where it is, and its source.

    Meant for `IPython.display.Markdown(...)`, so the rendered book shows the words that were quoted,
    not a table cell cut to a column width.
    """
    from servelab.book.quoted_figures_speculative import SPECULATIVE_FIGURES  # it imports PaperFigure from here

    figures = {**PAPER_FIGURES, **BLOG_FIGURES, **SPECULATIVE_FIGURES, **SGLANG_FIGURES}
    unknown = [k for k in keys if k not in figures]
    if unknown or not keys:
        raise ValueError(f"unknown figure(s) {unknown or '(none given)'}; accepted: {', '.join(figures)}")
    parts = []
    for k in keys:
        f = figures[k]
        parts.append(f"> {f.quote}\n>\n> — {f.source}, {f.where}. *{f.value}*: {f.measures}.")
    return "\n\n".join(parts)


FIG2_SEGMENTS = ("token states", "reservation", "internal frag.", "external frag. & others")


def fig2_breakdown() -> pd.DataFrame:
    """Fig. 2's bar labels as a table: one row per system, one column per segment (%), NaN where unlabelled."""
    numbers = PAPER_FIGURES["fig2_breakdown"].numbers
    systems = list(dict.fromkeys(k.split("/")[0] for k in numbers))
    return pd.DataFrame([[numbers.get(f"{s}/{seg}", float("nan")) for seg in FIG2_SEGMENTS] for s in systems],
                        index=pd.Index(systems, name="system"), columns=list(FIG2_SEGMENTS))
