"""The referee: our radix tree against SGLang's own RadixCache, on seeded operation streams.

The fast tests show the streams are worth refereeing: they exercise splits, locks and evictions, and
trees with a different policy (no refresh on match, no cascade, most recently used first) disagree
with ours on them. The engine_venv test replays the same streams in SGLang's venv.
"""

from __future__ import annotations

import heapq

import pytest

from servelab.measure.prefix_caching import agreement, compare_with_sglang, radix_ops, replay_radix_tree
from servelab.sim.prefix_cache import RadixTree

SEEDS = list(range(24))
AGREE = ["match lengths agree", "insert prefixes agree", "evictions agree", "lock deltas agree",
         "token counts agree", "cached sequences agree"]


class _NoRefreshOnMatch(RadixTree):
    def match_prefix(self, tokens):
        stamps = {id(n): n.last_access for n, _ in self.nodes()}
        result = super().match_prefix(tokens)
        for node, _ in self.nodes():
            node.last_access = stamps.get(id(node), node.last_access)
        return result


class _MostRecentFirst(RadixTree):
    def evictable_leaves(self):
        return sorted(super().evictable_leaves(), key=lambda n: -n.last_access)

    def evict(self, num_tokens):
        freed = 0
        while freed < num_tokens and (leaves := self.evictable_leaves()):
            leaf = leaves[0]
            del leaf.parent.children[leaf.tokens[0]]
            leaf.evicted = True
            self._evictable -= len(leaf)
            freed += len(leaf)
        return freed


class _NoCascade(RadixTree):
    def evict(self, num_tokens):
        heap = [(n.last_access, n.node_id, n) for n in self.evictable_leaves()]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            del leaf.parent.children[leaf.tokens[0]]
            leaf.evicted = True
            self._evictable -= len(leaf)
            freed += len(leaf)
        return freed


def _all_agree(row: dict) -> bool:
    return all(row[k] for k in AGREE)


def test_ops_are_deterministic_and_exercise_every_operation():
    assert radix_ops(3) == radix_ops(3) and radix_ops(3) != radix_ops(4)
    kinds = {op["op"] for seed in SEEDS for op in radix_ops(seed)}
    assert kinds == {"insert", "match", "lock", "unlock", "evict"}
    ops = radix_ops(0)
    result = replay_radix_tree(ops)["results"]
    evictions = [r["evicted"] for op, r in zip(ops, result, strict=True) if op["op"] == "evict"]
    partial = [r["length"] for op, r in zip(ops, result, strict=True)
               if op["op"] == "match" and 0 < r["length"] < len(op["tokens"])]
    assert sum(evictions[:-1]) > 0 and partial  # evictions under pressure, and matches that end mid-way
    assert any(r["protected"] > 0 for r in result)
    assert result[-1]["total"] == 0  # every lock released, everything evicted at the end


@pytest.mark.parametrize("variant", [_NoRefreshOnMatch, _MostRecentFirst, _NoCascade], ids=lambda v: v.__name__)
def test_the_streams_tell_a_different_policy_apart(variant):
    rows = []
    for seed in SEEDS:
        ops = radix_ops(seed)
        rows.append(agreement(ops, replay_radix_tree(ops), replay_radix_tree(ops, variant())))
    assert not all(_all_agree(r) for r in rows)


def test_agreement_of_a_tree_with_itself():
    ops = radix_ops(1)
    row = agreement(ops, replay_radix_tree(ops), replay_radix_tree(ops))
    assert _all_agree(row) and row["ops"] == len(ops)


@pytest.mark.engine_venv
def test_our_radix_tree_agrees_with_sglangs(require_engine, cpu):
    require_engine("sglang")
    frame = compare_with_sglang(cpu, SEEDS)
    assert len(frame) == len(SEEDS) and frame["evicted tokens"].sum() > 0 and frame["matched tokens"].sum() > 0
    disagree = frame[~frame[AGREE].all(axis=1)]
    assert disagree.empty, f"SGLang {frame.attrs['sglang']} disagrees on seeds {disagree['seed'].tolist()}"
