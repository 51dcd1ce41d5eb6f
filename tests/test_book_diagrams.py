"""The block-table diagram is drawn from the allocator's state: every table entry, refcount and copy."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests only; notebooks keep their inline backend

from matplotlib import pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from servelab.book.diagrams import PRIVATE, SHARED, draw_block_tables
from servelab.sim.paging import BlockAllocator


def _example() -> BlockAllocator:
    a = BlockAllocator(num_blocks=8, block_size=4)
    a.allocate("A", 10)
    a.fork("A", "B")
    a.append_token("A")  # copy-on-write of the shared last block
    a.append_token("B")
    return a


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_one_arrow_per_table_entry_and_one_dashed_arrow_per_copy() -> None:
    a = _example()
    ax = draw_block_tables(a)
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    entries = sum(len(a.block_table(s)) for s in a.sequences())
    assert len(arrows) == entries + len(a.copies) == 6 + 1
    plt.close(ax.figure)


def test_each_physical_block_shows_its_refcount_fill_and_colour() -> None:
    a = _example()
    ax = draw_block_tables(a)
    texts = _texts(ax)
    assert "#0  rc=2  4/4" in texts and "#1  rc=2  4/4" in texts  # full prompt blocks stay shared
    assert "#2  rc=1  3/4" in texts and "#3  rc=1  3/4" in texts  # B's original and A's copy
    assert sum(t.endswith("free") for t in texts) == a.num_free_blocks
    colours = {tuple(p.get_facecolor()) for p in ax.patches if isinstance(p, Rectangle)}
    assert tuple(matplotlib.colors.to_rgba(SHARED)) in colours
    assert tuple(matplotlib.colors.to_rgba(PRIVATE)) in colours
    plt.close(ax.figure)


def test_an_empty_pool_draws_only_free_blocks() -> None:
    a = BlockAllocator(num_blocks=3, block_size=2)
    ax = draw_block_tables(a, title="empty")
    assert not [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert sum(t.endswith("free") for t in _texts(ax)) == 3
    assert ax.get_title() == "empty"
    plt.close(ax.figure)


def _run():
    import pandas as pd

    from servelab.measure.kv_pressure import PressureRun

    requests = pd.DataFrame({"req": [0, 1], "sent_s": [0.0, 0.0], "first_token_s": [0.5, 1.0], "finish_s": [4.0, 6.0]})
    tokens = pd.DataFrame({"req": [0, 1], "t_s": [0.5, 1.0]})
    timeline = pd.DataFrame({"t_s": [0, 1, 2, 3], "kv_used": [0, 0.5, 1.0, 0.2], "running": [0, 2, 1, 1],
                             "waiting": [2, 0, 1, 0], "evictions": [0, 0, 0, 1], "cached_tokens": [0, 0, 0, 0]})
    pauses = pd.DataFrame({"req": [1], "start_s": [2.0], "end_s": [3.5]})
    return PressureRun("sglang", requests, tokens, timeline), pauses


def test_request_lanes_draw_queued_generating_and_paused_segments() -> None:
    from servelab.book.diagrams import plot_request_lanes

    run, pauses = _run()
    ax = plot_request_lanes(run, pauses, "lanes")
    segments = [(tuple(line.get_xdata()), line.get_color()) for line in ax.lines]
    assert ((0.0, 0.5), "lightgrey") in segments and ((1.0, 6.0), "tab:blue") in segments
    assert ((2.0, 3.5), "tab:red") in segments
    assert "retracted, waiting" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(ax.figure)


def test_pressure_plot_marks_each_pause_on_both_panels() -> None:
    from servelab.book.diagrams import plot_pressure

    run, pauses = _run()
    fig = plot_pressure(run, pauses, "pressure")
    top, bottom = fig.axes
    for ax in (top, bottom):
        assert [tuple(line.get_xdata()) for line in ax.lines].count((2.0, 2.0)) == 1  # one axvline at the pause
    plt.close(fig)
