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

    from servelab.measure.paging.pressure import PressureRun

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


def test_pressure_plot_shades_the_seconds_before_the_gauges_show_every_request() -> None:
    from servelab.book.diagrams import plot_pressure

    run, pauses = _run()  # two sent at 0; the gauges show both from t = 0 (2 waiting) ...
    fig = plot_pressure(run, pauses, "pressure")
    assert all(not ax.patches for ax in fig.axes)  # ... so nothing is shaded
    plt.close(fig)
    run.timeline.loc[0, "waiting"] = 1  # now only from t = 1
    fig = plot_pressure(run, pauses, "pressure")
    for ax in fig.axes:
        (band,) = ax.patches
        assert band.get_x() == 0.0 and band.get_width() == 1.0
    assert "not every request in the gauges yet" in [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    plt.close(fig)


def test_one_sequence_drawn_contiguous_and_in_its_blocks() -> None:
    import pytest

    from servelab.book.diagrams import draw_contiguous_vs_blocks

    a = BlockAllocator(num_blocks=8, block_size=4)
    a.allocate("X", 8)
    a.allocate("A", 4)
    a.free("X")
    a.append_tokens("A", 6)  # 10 tokens in three blocks, not in order
    ax = draw_contiguous_vs_blocks(a, "A", max_len=32)
    slots = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == 1]
    written = [p for p in slots if matplotlib.colors.to_hex(p.get_facecolor()[:3]) == PRIVATE]
    assert len(slots) == 32 + 8 * 4 and len(written) == 2 * 10  # every slot of both rows; A's tokens in each
    texts = _texts(ax)
    assert [f"A · {i}" for i in range(3)] == sorted(t for t in texts if t.startswith("A · "))
    assert any("32" in t and "10" in t for t in texts) and any("2 " in t and "3 " in t for t in texts)
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="shorter than 'A'"):
        draw_contiguous_vs_blocks(a, "A", max_len=8)
    with pytest.raises(ValueError, match="'B' is not a sequence"):
        draw_contiguous_vs_blocks(a, "B", max_len=32)
