"""vLLM-style block prefix cache: the rules read from vLLM's source as examples, then a state machine.

The state machine's model knows only the sequences admitted so far and the running requests. It
checks hit lengths against them: exactly while nothing was evicted, between bounds once something
was (blocks held by running requests can never be evicted; nothing never seen can hit).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from servelab.sim.prefix_cache import BlockHashCache, OutOfBlocks, block_hashes, hash_block


def test_hashes_are_chained_over_the_prefix_and_only_full_blocks_get_one():
    a = block_hashes([1, 2, 3, 4, 5], 2)
    assert len(a) == 2 and a == block_hashes([1, 2, 3, 4, 9], 2)
    b = block_hashes([9, 9, 3, 4], 2)
    assert a[1] != b[1]  # same tokens [3, 4], different parent
    assert a[1] == hash_block(hash_block(None, [1, 2]), [3, 4])


def test_a_prompt_of_one_block_never_hits_and_the_last_block_is_recomputed():
    cache = BlockHashCache(num_blocks=8, block_size=4)
    cache.allocate("a", list(range(4)))
    cache.free("a")
    assert cache.allocate("b", list(range(4))).hit_tokens == 0  # hit capped at num_tokens - 1 = 3 -> 0 blocks
    cache.free("b")
    assert cache.lookup(list(range(5))) == 4
    cache.allocate("c", list(range(12)))
    cache.free("c")
    assert cache.lookup(list(range(12))) == 8  # the whole prompt is cached, the last block is computed again
    assert cache.lookup(list(range(13))) == 12


def test_counters_are_tokens_queried_and_hit_at_admission():
    cache = BlockHashCache(num_blocks=8, block_size=4)
    cache.allocate("a", list(range(10)))
    cache.free("a")
    adm = cache.allocate("b", list(range(10)) + [7, 7])
    assert (adm.hit_tokens, adm.computed_tokens, adm.new_blocks) == (8, 4, 1)
    assert (cache.requests, cache.queries, cache.hits) == (2, 22, 8)
    assert cache.hit_rate() == pytest.approx(8 / 22)


def test_free_queue_order_follows_vllm():
    # A request's blocks are freed tail first: uncached ones go to the front (reused first),
    # cached ones to the back (evicted last), so the tail of a chain is evicted before its head.
    cache = BlockHashCache(num_blocks=6, block_size=2)
    cache.allocate("a", [1, 2, 3, 4, 5])  # blocks 0, 1 full and cached, 2 partial
    cache.free("a")
    assert cache.free_queue() == [2, 3, 4, 5, 1, 0]
    cache.allocate("b", [7, 7, 7, 7, 7, 7, 7, 7])  # 4 new blocks: 2, 3, 4, 5 -- nothing evicted yet
    assert cache.evicted_blocks == 0 and cache.lookup([1, 2, 3, 4, 5]) == 4
    cache.allocate("c", [8, 8])  # takes block 1 (the tail of a's chain) first
    assert cache.evicted_blocks == 1 and cache.lookup([1, 2, 3, 4, 5]) == 2


def test_a_request_that_does_not_fit_is_refused_without_side_effects():
    cache = BlockHashCache(num_blocks=3, block_size=2)
    cache.allocate("a", [1, 2, 3, 4])
    queue = cache.free_queue()
    assert cache.allocate("b", [5, 6, 7, 8]) is None
    assert cache.free_queue() == queue and cache.queries == 4 and cache.running() == ["a"]
    with pytest.raises(OutOfBlocks):
        cache.append("a", [5, 6, 7])


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        BlockHashCache(4, 0)
    cache = BlockHashCache(4, 2)
    with pytest.raises(ValueError, match="empty prompt"):
        cache.allocate("a", [])
    with pytest.raises(KeyError, match="no running request 'x'"):
        cache.free("x")


def _longest_seen(tokens: tuple[int, ...], seen: set[tuple[int, ...]], block_size: int) -> int:
    """Longest block-aligned prefix (at most len - 1 tokens) whose every block prefix is in ``seen``."""
    hit = 0
    while hit + block_size <= len(tokens) - 1 and tokens[:hit + block_size] in seen:
        hit += block_size
    return hit


def _block_prefixes(tokens: tuple[int, ...], block_size: int) -> set[tuple[int, ...]]:
    return {tokens[:end] for end in range(block_size, len(tokens) + 1, block_size)}


prompts = st.lists(st.integers(0, 2), min_size=1, max_size=14).map(tuple)


class BlockCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.bs = 2
        self.cache = BlockHashCache(num_blocks=8, block_size=self.bs)
        self.seen: set[tuple[int, ...]] = set()  # every full-block prefix ever computed
        self.running: dict[str, tuple[int, ...]] = {}
        self.queries = self.hits = 0
        self.next_id = 0

    @rule(tokens=prompts)
    def allocate(self, tokens):
        held: set[tuple[int, ...]] = set()
        for seq in self.running.values():
            held |= _block_prefixes(seq, self.bs)
        queue, evicted = self.cache.free_queue(), self.cache.evicted_blocks
        rid = f"r{self.next_id}"
        self.next_id += 1
        adm = self.cache.allocate(rid, list(tokens))
        if adm is None:
            assert self.cache.free_queue() == queue and rid not in self.cache.running()
            return
        assert adm.hit_tokens % self.bs == 0 and adm.hit_tokens < len(tokens)
        upper = _longest_seen(tokens, self.seen, self.bs)
        if evicted == 0:
            assert adm.hit_tokens == upper
        else:
            assert _longest_seen(tokens, held, self.bs) <= adm.hit_tokens <= upper
        self.queries += len(tokens)
        self.hits += adm.hit_tokens
        self.seen |= _block_prefixes(tokens, self.bs)
        self.running[rid] = tokens

    @precondition(lambda self: self.running)
    @rule(data=st.data(), more=st.lists(st.integers(0, 2), min_size=1, max_size=4))
    def append(self, data, more):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        try:
            self.cache.append(rid, more)
        except OutOfBlocks:
            return
        self.running[rid] += tuple(more)
        self.seen |= _block_prefixes(self.running[rid], self.bs)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def free(self, data):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        self.cache.free(rid)
        del self.running[rid]

    @invariant()
    def refcounts_and_the_free_queue_agree(self):
        blocks = self.cache.blocks
        assert all(b.ref_cnt >= 0 for b in blocks)
        assert sorted(self.cache.free_queue()) == sorted(b.block_id for b in blocks if b.ref_cnt == 0)
        tables = [self.cache.request_blocks(r) for r in self.running]
        assert sum(b.ref_cnt for b in blocks) == sum(len(t) for t in tables)
        for rid, table in zip(self.running, tables, strict=True):
            assert len(table) == -(-len(self.running[rid]) // self.bs) == len(set(table))

    @invariant()
    def the_lookup_table_and_the_blocks_agree(self):
        index = self.cache.cache_index()
        listed = sorted(b for holders in index.values() for b in holders)
        assert listed == sorted(b.block_id for b in self.cache.blocks if b.block_hash is not None)
        assert all(self.cache.blocks[b].block_hash == h for h, holders in index.items() for b in holders)
        for rid, seq in self.running.items():
            table = self.cache.request_blocks(rid)
            hashes = block_hashes(seq, self.bs)
            assert [self.cache.blocks[b].block_hash for b in table[:len(hashes)]] == hashes

    @invariant()
    def running_requests_keep_their_full_blocks_cached(self):
        for seq in self.running.values():
            probe = seq + (99,)  # one more token, so the num_tokens - 1 cap does not hide the last full block
            assert self.cache.lookup(probe) == len(seq) // self.bs * self.bs

    @invariant()
    def counters_are_the_tokens_queried_and_hit(self):
        assert (self.cache.queries, self.cache.hits) == (self.queries, self.hits)
        assert self.cache.num_cached_blocks <= self.cache.num_blocks


BlockCacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])
TestBlockHashCache = BlockCacheMachine.TestCase
