"""The token strip: each verification's kept, rejected and discarded drafts and the target's own token."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")  # tests only; notebooks keep their inline backend

from matplotlib import pyplot as plt

from servelab.book.diagrams_speculative import CELL_GID, KINDS, draw_token_strip, strip_cells


def test_cells_keep_drafts_up_to_the_first_rejection_then_one_token_of_the_target() -> None:
    assert strip_cells([0, 2, 3], 3) == [["correction", "discarded", "discarded", ""],
                                         ["kept", "kept", "correction", ""],
                                         ["kept", "kept", "kept", "bonus"]]
    with pytest.raises(ValueError, match="keeps 0 to 3 of them, got 4"):
        strip_cells([4], 3)


def test_the_strip_draws_one_cell_per_drafted_or_bonus_token_and_what_each_emitted() -> None:
    ax = draw_token_strip([4, 0, 1], 4)
    cells = [p for p in ax.patches if p.get_gid() == CELL_GID]
    assert len(cells) == 5 + 4 + 4  # all kept + bonus; rejected at once; one kept, rejected, two discarded
    colors = [matplotlib.colors.to_hex(c.get_facecolor()[:3]) for c in cells]
    assert colors.count(matplotlib.colors.to_hex(KINDS["bonus"][0])) == 1
    assert colors.count(matplotlib.colors.to_hex(KINDS["correction"][0])) == 2
    assert [t.get_text() for t in ax.texts if t.get_text().startswith("+")] == ["+5", "+1", "+2"]
    assert len(ax.get_legend().get_texts()) == len(KINDS)
    plt.close(ax.figure)
