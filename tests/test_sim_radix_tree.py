"""The radix tree: worked examples, then a hypothesis state machine against an independent model.

The model keeps the cached content as a prefix-closed set of token tuples (one tuple per cached token),
the locked sequences, and nothing else: match lengths, token counts, lock counts and what eviction may
take are all checked against it, never against the tree's own bookkeeping.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from servelab.sim.prefix_cache import LockError, RadixNode, RadixTree


def test_sglang_main_example():
    # The example at the bottom of sglang/srt/mem_cache/radix_cache.py (0.5.23).
    tree = RadixTree()
    for seq in ([1, 2, 3], [1, 2, 3], [1, 2, 4, 5], [1, 2, 4, 5, 6, 7], [8, 9, 10, 11, 12]):
        tree.insert(seq)
    assert tree.total_tokens == 12
    assert sorted(tree.sequences()) == [(1, 2, 3), (1, 2, 4, 5, 6, 7), (8, 9, 10, 11, 12)]
    assert tree.match_prefix([1, 2, 3, 13, 14]).length == 3


def test_match_inside_an_edge_splits_it_and_the_handle_keeps_the_whole_path():
    tree = RadixTree()
    leaf = tree.insert([1, 2, 3, 4]).node
    match = tree.match_prefix([1, 2, 9])
    assert match.length == 2 and tree.path_tokens(match.node) == (1, 2)
    assert len(leaf) == 2 and tree.path_tokens(leaf) == (1, 2, 3, 4)  # the old node keeps the suffix
    assert [len(n) for n, _ in tree.nodes()] == [2, 2]
    assert tree.insert([1, 2, 3, 4]).prefix_len == 4 and tree.total_tokens == 4


def test_lru_leaf_goes_first_and_match_refreshes():
    tree = RadixTree()
    tree.insert([1, 1, 1])
    tree.insert([2, 2])
    tree.match_prefix([1, 1])  # touches the [1,1,1] leaf (split: [1,1] + [1])
    assert tree.evict(1) == 2  # [2,2] is now the least recently used leaf, freed whole
    assert tree.sequences() == [(1, 1, 1)]


def test_eviction_cascades_to_parents_that_become_leaves():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])  # [1,2] -> {[3], [4]}
    tree.insert([7])
    tree.match_prefix([7])
    assert tree.evict(3) == 4  # [3], [4], then their parent [1,2]; [7] was used last
    assert tree.sequences() == [(7,)]


def test_a_locked_path_survives_any_eviction_and_unlock_releases_it():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    node = tree.match_prefix([1, 2, 3]).node
    assert tree.inc_lock_ref(node) == -3
    assert (tree.protected_tokens, tree.evictable_tokens) == (3, 0)
    assert tree.evict(100) == 0 and tree.total_tokens == 3
    assert tree.dec_lock_ref(node) == 3
    assert tree.evict(100) == 3 and tree.total_tokens == 0


def test_bad_unlock_and_lock_of_evicted_node_are_errors():
    tree = RadixTree()
    node = tree.insert([5, 6]).node
    with pytest.raises(LockError, match="without a lock"):
        tree.dec_lock_ref(node)
    tree.evict(2)
    with pytest.raises(LockError, match="evicted"):
        tree.inc_lock_ref(node)
    with pytest.raises(ValueError, match="num_tokens must be >= 0"):
        tree.evict(-1)


def _prefixes(seq: tuple[int, ...]) -> set[tuple[int, ...]]:
    return {seq[:i] for i in range(1, len(seq) + 1)}


tokens = st.lists(st.integers(0, 3), max_size=10).map(tuple)


class RadixTreeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tree = RadixTree()
        self.cached: set[tuple[int, ...]] = set()  # every cached prefix: one per cached token
        self.locks: list[tuple[RadixNode, tuple[int, ...]]] = []  # (handle, its path when locked)

    @rule(seq=tokens)
    def insert(self, seq):
        known = max((i for i in range(1, len(seq) + 1) if seq[:i] in self.cached), default=0)
        assert self.tree.insert(seq).prefix_len == known
        self.cached |= _prefixes(seq)

    @rule(seq=tokens, lock=st.booleans())
    def match(self, seq, lock):
        result = self.tree.match_prefix(seq)
        longest = max((i for i in range(1, len(seq) + 1) if seq[:i] in self.cached), default=0)
        assert result.length == longest
        assert self.tree.path_tokens(result.node) == seq[:longest]
        if lock:
            self.tree.inc_lock_ref(result.node)
            self.locks.append((result.node, seq[:longest]))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        node, path = self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1)))
        assert self.tree.path_tokens(node) == path  # splits never move a handle's end
        self.tree.dec_lock_ref(node)

    @rule(n=st.integers(0, 15))
    def evict(self, n):
        before = [node for node, _ in self.tree.nodes()]
        candidates = self.tree.evictable_leaves()
        freed = self.tree.evict(n)
        after = set()
        for node, _ in self.tree.nodes():
            after |= _prefixes(self.tree.path_tokens(node))
        assert after <= self.cached and len(self.cached - after) == freed
        gone = [node for node in before if node.evicted]
        assert sum(len(node) for node in gone) == freed
        assert all(node.lock_ref == 0 for node in gone)
        if freed < n:
            assert not self.tree.evictable_leaves()  # stopped early only because nothing is left to take
        # Least recently used first: nothing evicted is newer than a leaf that was a candidate and stayed.
        survivors = [leaf.last_access for leaf in candidates if not leaf.evicted]
        if gone and survivors:
            assert max(node.last_access for node in gone) <= min(survivors)
        self.cached = after

    @invariant()
    def token_counts_match_the_model(self):
        locked: set[tuple[int, ...]] = set()
        for _, path in self.locks:
            locked |= _prefixes(path)
        nodes = list(self.tree.nodes())
        assert self.tree.total_tokens == len(self.cached) == sum(len(n) for n, _ in nodes)
        assert self.tree.protected_tokens == len(locked)
        assert self.tree.evictable_tokens == len(self.cached) - len(locked)
        assert locked <= self.cached  # a locked node is never evicted

    @invariant()
    def lock_counts_are_the_locks_through_each_node(self):
        for node, _ in self.tree.nodes():
            path = self.tree.path_tokens(node)
            assert node.lock_ref == sum(1 for _, p in self.locks if p[:len(path)] == path) >= 0
            assert len(node) > 0 and all(k == c.tokens[0] and c.parent is node for k, c in node.children.items())


RadixTreeMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestRadixTree = RadixTreeMachine.TestCase
