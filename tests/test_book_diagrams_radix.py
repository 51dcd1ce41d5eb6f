import json

import matplotlib
import pandas as pd
import pytest
from matplotlib import pyplot as plt

from servelab.book.diagrams_radix import COLORS, NODE_GID, draw_radix_tree, tree_frame
from servelab.sim.prefix_cache import RadixTree

matplotlib.use("Agg")  # tests only; notebooks keep their inline backend


def _tree() -> tuple[RadixTree, object]:
    tree = RadixTree()
    tree.insert([1, 2, 3, 4, 5, 6])
    tree.insert([1, 2, 3, 9])  # splits [1..6] into [1,2,3] -> {[4,5,6], [9]}
    tree.insert([7, 8])
    held = tree.match_prefix([1, 2, 3, 9]).node
    tree.inc_lock_ref(held)  # [1,2,3] and [9] locked
    return tree, held


def _boxes(ax):
    return [p for p in ax.patches if p.get_gid() == NODE_GID]


def test_one_box_per_node_and_colours_that_say_what_eviction_may_take():
    tree, _ = _tree()
    ax = draw_radix_tree(tree)
    boxes = _boxes(ax)
    assert len(boxes) == len(list(tree.nodes())) + 1 == 5  # root, [1,2,3], [4,5,6], [9], [7,8]
    colors = [matplotlib.colors.to_hex(b.get_facecolor()[:3]) for b in boxes]
    assert colors.count(matplotlib.colors.to_hex(COLORS["locked"])) == 2
    # The oldest unlocked leaf is the one the tree's own eviction takes first.
    assert colors.count(matplotlib.colors.to_hex(COLORS["next"])) == 1
    frame = tree_frame(tree)
    next_node = next(r for r, b in zip(frame.itertuples(), boxes, strict=True)
                     if matplotlib.colors.to_hex(b.get_facecolor()[:3]) == matplotlib.colors.to_hex(COLORS["next"]))
    survivors = {n.node_id for n, _ in tree.nodes()}
    first = tree.evict(1)
    gone = survivors - {n.node_id for n, _ in tree.nodes()}
    assert gone == {next_node.node} and first == next_node.tokens
    plt.close("all")


def test_labels_show_tokens_locks_and_last_access_and_the_text_hook():
    tree, _ = _tree()
    ax = draw_radix_tree(tree, text=lambda ids: "-".join(f"t{i}" for i in ids), legend=False)
    texts = sorted(t.get_text() for t in ax.texts)
    assert "root" in texts and len(texts) == 5 and ax.get_legend() is None
    assert any(t.startswith("t1-t2-t3\n3 tokens, lock 1\nlast access ") for t in texts)
    assert any(t.startswith("t7-t8\n2 tokens, lock 0") for t in texts)
    plt.close("all")


def test_a_saved_state_draws_the_same_tree_later():
    tree, held = _tree()
    saved = json.loads(tree_frame(tree).to_json(orient="records"))
    tree.dec_lock_ref(held)
    tree.evict(100)  # the live tree is empty now; the saved state is not
    ax = draw_radix_tree(pd.DataFrame(saved))
    assert len(_boxes(ax)) == 5
    assert len(_boxes(draw_radix_tree(tree))) == 1  # only the root
    plt.close("all")


def test_a_table_without_the_columns_or_a_root_is_refused():
    with pytest.raises(ValueError, match="missing: lock_ref"):
        draw_radix_tree(tree_frame(RadixTree()).drop(columns="lock_ref"))
    with pytest.raises(ValueError, match="exactly one root"):
        draw_radix_tree(tree_frame(RadixTree()).assign(parent=0))


def test_a_long_edge_is_wrapped_and_cut_after_its_first_tokens() -> None:
    tree = RadixTree()
    tree.insert(list(range(30)))
    ax = draw_radix_tree(tree, text=lambda ids: " ".join(f"word{i}" for i in ids), legend=False)
    (label,) = [t.get_text() for t in ax.texts if t.get_text().startswith("word0")]
    lines = label.split("\n")
    assert len(lines) == 3 + 2 and lines[-2] == "30 tokens, lock 0"  # three lines of tokens at most
    assert all(len(line) <= 20 for line in lines[:3]) and lines[2].endswith("…")
    plt.close("all")
