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
