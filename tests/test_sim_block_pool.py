"""Property and example tests for the paged KV block allocator."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from servelab.sim.paging.block_pool import AllocatorStats, BlockAllocator, CopyOnWrite, OutOfBlocks


def snapshot(a: BlockAllocator) -> tuple:
    """Everything observable about an allocator, to check that a failed call changed nothing."""
    seqs = sorted(a.sequences(), key=repr)
    return (
        tuple((s, tuple(a.block_table(s)), a.num_tokens(s)) for s in seqs),
        tuple(a.free_block_ids()),
        tuple(a.refcount(b) for b in range(a.num_blocks)),
        a.stats(),
        len(a.copies),
    )


class AllocatorMachine(RuleBasedStateMachine):
    """Random allocate / append / fork / free sequences against a shadow KV memory.

    The machine plays the block engine: it keeps the "KV data" of every physical block, performs the
    copies the allocator asks for, and writes each token where the block table says. If the allocator
    ever let two sequences write into one block, or reused a block still in use, some sequence would
    read back tokens that are not its own.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count()
        self.tokens = itertools.count(1)
        self.expected: dict[int, list[int]] = {}

    @initialize(num_blocks=st.integers(0, 12), block_size=st.integers(1, 4))
    def setup(self, num_blocks: int, block_size: int) -> None:
        self.a = BlockAllocator(num_blocks, block_size)
        self.memory: list[list[int | None]] = [[None] * block_size for _ in range(num_blocks)]

    def write(self, seq: int, value: int) -> None:
        bs = self.a.block_size
        pos = self.a.num_tokens(seq) - 1
        self.memory[self.a.block_table(seq)[pos // bs]][pos % bs] = value

    @rule(num_tokens=st.integers(0, 14))
    def allocate(self, num_tokens: int) -> None:
        seq = next(self.ids)
        before = snapshot(self.a)
        if self.a.blocks_needed(num_tokens) > self.a.num_free_blocks:
            with pytest.raises(OutOfBlocks):
                self.a.allocate(seq, num_tokens)
            assert snapshot(self.a) == before
            return
        table = self.a.allocate(seq, num_tokens)
        assert len(table) == self.a.blocks_needed(num_tokens)
        values = [next(self.tokens) for _ in range(num_tokens)]
        bs = self.a.block_size
        for pos, v in enumerate(values):
            self.memory[table[pos // bs]][pos % bs] = v
        self.expected[seq] = values

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.expected)))
        n, bs = self.a.num_tokens(seq), self.a.block_size
        table = self.a.block_table(seq)
        shared_partial = n % bs != 0 and self.a.refcount(table[-1]) > 1
        needs_block = n % bs == 0 or shared_partial
        before = snapshot(self.a)
        if needs_block and self.a.num_free_blocks == 0:
            with pytest.raises(OutOfBlocks):
                self.a.append_token(seq)
            assert snapshot(self.a) == before
            return
        free_before = self.a.num_free_blocks
        cow = self.a.append_token(seq)
        # copy-on-write happens exactly when appending into a shared, partially filled last block
        assert (cow is not None) == shared_partial
        assert self.a.num_free_blocks == free_before - int(needs_block)
        if cow is not None:
            assert cow == CopyOnWrite(seq, len(table) - 1, table[-1], self.a.block_table(seq)[-1])
            assert self.a.copies[-1] == cow
            self.memory[cow.dst] = list(self.memory[cow.src])
        value = next(self.tokens)
        self.write(seq, value)
        self.expected[seq].append(value)

    @precondition(lambda self: self.expected)
    @rule(data=st.data(), count=st.integers(0, 9))
    def append_many(self, data: st.DataObject, count: int) -> None:
        """``append_tokens(k)`` is all-or-nothing and equals k single appends."""
        seq = data.draw(st.sampled_from(sorted(self.expected)))
        n, bs = self.a.num_tokens(seq), self.a.block_size
        shared_partial = n % bs != 0 and self.a.refcount(self.a.block_table(seq)[-1]) > 1
        slack = (-n) % bs
        needed = (int(shared_partial) + self.a.blocks_needed(max(0, count - slack))) if count else 0
        before = snapshot(self.a)
        if needed > self.a.num_free_blocks:
            with pytest.raises(OutOfBlocks):
                self.a.append_tokens(seq, count)
            assert snapshot(self.a) == before
            return
        cow = self.a.append_tokens(seq, count)
        assert (cow is not None) == (shared_partial and count > 0)
        if cow is not None:
            self.memory[cow.dst] = list(self.memory[cow.src])
        assert self.a.num_tokens(seq) == n + count
        for pos in range(n, n + count):
            value = next(self.tokens)
            self.memory[self.a.block_table(seq)[pos // bs]][pos % bs] = value
            self.expected[seq].append(value)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = data.draw(st.sampled_from(sorted(self.expected)))
        child = next(self.ids)
        free_before = self.a.num_free_blocks
        self.a.fork(parent, child)
        assert self.a.block_table(child) == self.a.block_table(parent)
        assert self.a.num_free_blocks == free_before  # sharing costs no block
        self.expected[child] = list(self.expected[parent])

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.expected)))
        table = self.a.block_table(seq)
        self.a.free(seq)
        del self.expected[seq]
        for b in table:  # poison freed blocks: a sequence still reading one would notice
            if self.a.refcount(b) == 0:
                self.memory[b] = [None] * self.a.block_size

    @invariant()
    def invariants_hold(self) -> None:
        if not hasattr(self, "a"):
            return
        self.a.check_invariants()
        bs = self.a.block_size
        for seq, values in self.expected.items():
            table = self.a.block_table(seq)
            assert [self.memory[table[i // bs]][i % bs] for i in range(len(values))] == values
        s = self.a.stats()
        assert s.used_blocks + s.free_blocks == s.num_blocks
        assert 0 <= s.internal_fragmentation <= (bs - 1) * s.used_blocks
        assert s.logical_tokens == sum(len(v) for v in self.expected.values())


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


ops = st.lists(
    st.tuples(st.sampled_from(["alloc", "append", "fork", "free"]), st.integers(0, 10)), max_size=40
)


def run_ops(a: BlockAllocator, program: list[tuple[str, int]]) -> None:
    """Apply a random program, skipping what is impossible (unknown sequence, pool exhausted)."""
    ids = itertools.count()
    for op, arg in program:
        seqs = a.sequences()
        try:
            if op == "alloc":
                a.allocate(next(ids), arg)
            elif op == "append" and seqs:
                a.append_token(seqs[arg % len(seqs)])
            elif op == "fork" and seqs:
                a.fork(seqs[arg % len(seqs)], next(ids))
            elif op == "free" and seqs:
                a.free(seqs[arg % len(seqs)])
        except OutOfBlocks:
            pass


@settings(deadline=None)
@given(num_blocks=st.integers(0, 10), block_size=st.integers(1, 4), program=ops)
def test_freeing_everything_returns_the_pool_to_all_free(
    num_blocks: int, block_size: int, program: list[tuple[str, int]]
) -> None:
    a = BlockAllocator(num_blocks, block_size)
    run_ops(a, program)
    for seq in a.sequences():
        a.free(seq)
    a.check_invariants()
    assert sorted(a.free_block_ids()) == list(range(num_blocks))
    assert all(a.refcount(b) == 0 for b in range(num_blocks))
    assert a.stats() == AllocatorStats(num_blocks, block_size, 0, num_blocks, 0, 0, 0)


@settings(deadline=None)
@given(num_blocks=st.integers(0, 8), block_size=st.integers(1, 4), program=ops, extra=st.integers(1, 40))
def test_out_of_blocks_leaves_state_unchanged(
    num_blocks: int, block_size: int, program: list[tuple[str, int]], extra: int
) -> None:
    a = BlockAllocator(num_blocks, block_size)
    run_ops(a, program)
    before = snapshot(a)
    too_many = (a.num_free_blocks + 1) * block_size + extra - 1  # needs at least one block too many
    with pytest.raises(OutOfBlocks) as err:
        a.allocate("big", too_many)
    assert err.value.needed > err.value.free == a.num_free_blocks
    assert snapshot(a) == before
    for seq in a.sequences():
        with pytest.raises(OutOfBlocks):
            a.append_tokens(seq, too_many)
        assert snapshot(a) == before
    a.check_invariants()


def test_parallel_sampling_example_from_the_paper() -> None:
    """Fig. 8 of the paper: two samples share a 7-token prompt in blocks of 4; the first writer copies."""
    a = BlockAllocator(num_blocks=8, block_size=4)
    prompt = a.allocate("A1", 7)
    a.fork("A1", "A2")
    assert [a.refcount(b) for b in prompt] == [2, 2]
    assert a.stats().sharing_saving == 7

    cow = a.append_token("A1")  # A1 writes slot 4 of the shared second block: copy first
    assert cow is not None and cow.src == prompt[1] and cow.logical_block == 1
    assert a.block_table("A1") == [prompt[0], cow.dst]
    assert a.refcount(prompt[1]) == 1  # "decreases the reference count to 1"
    assert a.append_token("A2") is None  # A2 now owns the original block and writes in place
    assert a.block_table("A2") == prompt
    assert a.refcount(prompt[0]) == 2  # the full first block stays shared

    assert a.append_token("A1") is None  # A1's block 1 is full now: a fresh block, no copy
    assert len(a.block_table("A1")) == 3
    assert a.copies == [cow]
    a.check_invariants()


def test_freed_blocks_are_reused_first_last_block_first_as_vllm_does() -> None:
    """vLLM V1 prepends freed blocks without a prefix-cache hash, tail first (BlockPool.free_blocks)."""
    a = BlockAllocator(num_blocks=6, block_size=4)
    a.allocate("old", 8)  # blocks 0, 1
    a.allocate("new", 8)  # blocks 2, 3
    a.free("old")
    assert a.free_block_ids() == [1, 0, 4, 5]  # most recently freed first, the sequence's tail first
    a.free("new")
    assert a.free_block_ids() == [3, 2, 1, 0, 4, 5]
    assert a.allocate("next", 4) == [3]  # the block freed last is handed out first


def test_shared_blocks_return_to_the_free_list_only_with_their_last_reference() -> None:
    a = BlockAllocator(num_blocks=4, block_size=4)
    a.allocate("p", 6)  # blocks 0, 1
    a.fork("p", "c")
    a.free("p")
    assert a.free_block_ids() == [2, 3]
    a.free("c")
    assert a.free_block_ids() == [1, 0, 2, 3]


def test_blocks_are_taken_only_when_the_last_one_is_full() -> None:
    a = BlockAllocator(num_blocks=3, block_size=4)
    a.allocate("s", 0)
    used = []
    for _ in range(12):
        a.append_token("s")
        used.append(a.stats().used_blocks)
    assert used == [1] * 4 + [2] * 4 + [3] * 4
    assert a.stats().internal_fragmentation == 0
    with pytest.raises(OutOfBlocks, match="need 1 free KV block"):
        a.append_token("s")


def test_stats_count_internal_fragmentation_in_last_blocks() -> None:
    a = BlockAllocator(num_blocks=10, block_size=8)
    a.allocate("x", 10)  # 2 blocks, 6 slots empty
    a.allocate("y", 16)  # 2 full blocks
    a.fork("x", "z")
    s = a.stats()
    assert (s.used_blocks, s.free_blocks, s.shared_blocks) == (4, 6, 2)
    assert (s.logical_tokens, s.stored_tokens, s.reserved_slots) == (36, 26, 32)
    assert s.internal_fragmentation == 6


def test_append_tokens_matches_single_appends() -> None:
    one, bulk = BlockAllocator(20, 4), BlockAllocator(20, 4)
    for a in (one, bulk):
        a.allocate("p", 5)
        a.fork("p", "c")
    cows = [one.append_token("p") for _ in range(9)]
    assert bulk.append_tokens("p", 9) == cows[0] and all(c is None for c in cows[1:])
    assert snapshot(one) == snapshot(bulk)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_blocks": 4, "block_size": 0}, r"block_size must be an integer >= 1 \(tokens per KV block\), got 0"),
        ({"num_blocks": -1, "block_size": 16}, r"num_blocks must be an integer >= 0, got -1"),
        ({"num_blocks": 4, "block_size": 2.5}, r"block_size must be an integer >= 1 .* got 2.5"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BlockAllocator(**kwargs)


def test_bad_sequence_operations() -> None:
    a = BlockAllocator(4, 4)
    a.allocate("s", 3)
    with pytest.raises(ValueError, match="already exists"):
        a.allocate("s", 1)
    with pytest.raises(ValueError, match="already exists"):
        a.fork("s", "s")
    with pytest.raises(KeyError, match="unknown sequence 'nope'"):
        a.append_token("nope")
    with pytest.raises(ValueError, match="num_tokens must be an integer >= 0, got -3"):
        a.allocate("t", -3)
    with pytest.raises(ValueError, match="count must be an integer >= 0, got -1"):
        a.append_tokens("s", -1)
    a.check_invariants()


def test_parallel_sampling_shares_the_full_prompt_blocks():
    from servelab.sim.paging.parallel_sampling import parallel_sampling_blocks

    # 1006-token prompt, block 128: 7 full blocks shared; each sample copies the partial 8th
    # block and grows it to 1006 - 896 + 64 = 174 tokens, i.e. 2 blocks of its own.
    assert parallel_sampling_blocks(1006, 64, 1, 128) == {"shared": 9, "unshared": 9}
    assert parallel_sampling_blocks(1006, 64, 8, 128) == {"shared": 7 + 8 * 2, "unshared": 72}
    with pytest.raises(ValueError, match="n must be >= 1"):
        parallel_sampling_blocks(10, 10, 0, 16)
