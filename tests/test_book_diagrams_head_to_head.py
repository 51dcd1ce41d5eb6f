"""The head-to-head sweep figure: both engines on three panels, every series in view, the caveat inside."""

from __future__ import annotations

import matplotlib
import pandas as pd

matplotlib.use("Agg")  # tests only; notebooks keep their inline backend

from matplotlib import pyplot as plt

from servelab.book.diagrams_head_to_head import draw_sweep


def _rows() -> pd.DataFrame:
    rows = []
    for engine, scale in (("vllm", 1.0), ("sglang", 2.0)):
        for c in (1, 4, 8):
            rows.append({"engine": engine, "concurrency": c, "output_throughput": 10 * c / scale,
                         **{f"{q}_{m}_ms": scale * c * f for q, f in (("p50", 1), ("p90", 1.5), ("max", 3))
                            for m in ("ttft", "itl")}})
    return pd.DataFrame(rows)


def test_three_panels_one_line_per_engine_and_the_caveat_across_the_top() -> None:
    fig = draw_sweep(_rows(), "concurrency", ("output_throughput", "Output throughput", "tokens/s"),
                     "requests in flight", caveat="no engine ranking")
    ttft, itl, rate = fig.axes
    assert [a.get_title() for a in fig.axes] == ["Time to first token", "Inter-token latency", "Output throughput"]
    assert [line.get_label() for line in rate.get_lines()] == ["vllm", "sglang"]
    assert max(line.get_ydata().max() for line in ttft.get_lines()) <= ttft.get_ylim()[1]  # the largest x in view
    assert ttft.get_ylim()[0] == 0 and list(rate.get_xticks()) == [1, 4, 8]
    assert fig._suptitle is not None and fig._suptitle.get_text() == "no engine ranking"
    plt.close(fig)
    fig = draw_sweep(_rows(), "concurrency", ("output_throughput", "Output throughput", "tokens/s"), "x",
                     sent=[1, 8])
    assert fig._suptitle is None and "sent" in [line.get_label() for line in fig.axes[2].get_lines()]
    plt.close(fig)
