"""A KV-cache block allocator in the style of vLLM's PagedAttention block manager.

The problem it solves: a sequence's KV cache grows by one token per decoding step and nobody knows in
advance how long it will get. Reserving one contiguous chunk per sequence forces a guess (reserve the
maximum length and waste most of it, or reserve less and risk running out). Paging removes the guess:

* GPU memory for the KV cache is cut into ``num_blocks`` *physical blocks*, each holding the keys and
  values of ``block_size`` tokens. All blocks have the same size, so any free block fits any request:
  there is no external fragmentation.
* Each sequence has a *block table*: logical block ``i`` (its tokens ``i*block_size ..``) maps to some
  physical block anywhere in the pool. The attention kernel follows the table, so the blocks need not
  be contiguous.
* A new physical block is taken from the free list only when the sequence's last block is full, so a
  sequence wastes at most ``block_size - 1`` slots (internal fragmentation, all in its last block).
* Blocks are reference-counted. ``fork`` makes a child sequence that shares every block of its parent
  (parallel sampling with n > 1, beam search): the prompt's KV is stored once. Before anyone writes into
  a block that others still share, the writer gets a private copy (*copy-on-write*); full shared blocks
  are never written again, so only the partially filled last block is ever copied.

This file only does the bookkeeping (which block holds what); it moves no data. When a write needs a
copy, :meth:`BlockAllocator.append_token` returns a :class:`CopyOnWrite` record telling the caller (the
"block engine" that owns the real tensors) which block to copy where, as the paper's design (and vLLM's
V0 block manager, with ``blocks_to_copy``) did. vLLM V1 has no copy-on-write for ordinary models: each
sample gets a fresh last block and finds the full prompt blocks through the prefix cache, which ends in
the same blocks held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from servelab.integers import ceil_div, int_at_least

SeqId = Hashable


class OutOfBlocks(RuntimeError):
    """The pool has fewer free blocks than an operation needs.

    Raised *before* any state changes, so the caller can preempt a sequence (free or swap it) and retry.
    """

    def __init__(self, needed: int, free: int, total: int) -> None:
        super().__init__(f"need {needed} free KV block(s) but only {free} of {total} are free")
        self.needed = needed
        self.free = free
        self.total = total


@dataclass(frozen=True)
class CopyOnWrite:
    """A write into a shared, partially filled block gave ``seq_id`` a private copy.

    The caller must copy the KV data of physical block ``src`` into ``dst`` before writing the new
    token; ``seq_id``'s logical block ``logical_block`` now points at ``dst``.
    """

    seq_id: SeqId
    logical_block: int
    src: int
    dst: int


@dataclass(frozen=True)
class AllocatorStats:
    """A snapshot of how the pool is used. All token counts are in KV slots (one slot = one token)."""

    num_blocks: int
    block_size: int
    used_blocks: int
    free_blocks: int
    shared_blocks: int
    logical_tokens: int
    stored_tokens: int

    @property
    def reserved_slots(self) -> int:
        """Slots in blocks that are in use (``used_blocks * block_size``)."""
        return self.used_blocks * self.block_size

    @property
    def internal_fragmentation(self) -> int:
        """Slots reserved but holding no token: the unfilled tails of last blocks."""
        return self.reserved_slots - self.stored_tokens

    @property
    def sharing_saving(self) -> int:
        """Slots saved by sharing: tokens the sequences see minus tokens physically stored."""
        return self.logical_tokens - self.stored_tokens


class BlockAllocator:
    """Fixed-size KV blocks, a free list, reference counts and one block table per sequence.

    >>> a = BlockAllocator(num_blocks=4, block_size=4)
    >>> a.allocate("A", 7)          # a 7-token prompt takes 2 blocks, 1 slot left in the second
    [0, 1]
    >>> a.fork("A", "B")            # parallel sampling: B shares both blocks
    >>> a.append_token("A")         # A writes into shared block 1, so it gets a copy first
    CopyOnWrite(seq_id='A', logical_block=1, src=1, dst=2)
    >>> a.append_token("B") is None # block 1 is now B's alone: B writes in place
    True
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self._num_blocks = int_at_least("num_blocks", num_blocks, 0)
        self._block_size = int_at_least("block_size", block_size, 1, "tokens per KV block")
        # The free list, next block to hand out first: in id order at first; free() puts blocks back in front.
        self._free: deque[int] = deque(range(self._num_blocks))
        self._refcount = [0] * self._num_blocks
        self._fill = [0] * self._num_blocks  # tokens written into each physical block
        self._tables: dict[SeqId, list[int]] = {}
        self._num_tokens: dict[SeqId, int] = {}
        self.copies: list[CopyOnWrite] = []  # every copy-on-write so far, oldest first

    # ----------------------------------------------------------------------------- queries

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks a sequence of ``num_tokens`` tokens occupies: ``ceil(num_tokens / block_size)``."""
        return ceil_div(num_tokens, self._block_size)

    def can_allocate(self, num_tokens: int) -> bool:
        return self.blocks_needed(num_tokens) <= len(self._free)

    def sequences(self) -> list[SeqId]:
        return list(self._tables)

    def block_table(self, seq_id: SeqId) -> list[int]:
        """The physical block of each logical block of ``seq_id`` (a copy)."""
        return list(self._table(seq_id))

    def num_tokens(self, seq_id: SeqId) -> int:
        self._table(seq_id)
        return self._num_tokens[seq_id]

    def refcount(self, block: int) -> int:
        return self._refcount[block]

    def free_block_ids(self) -> list[int]:
        """The free list, next block to hand out first."""
        return list(self._free)

    def stats(self) -> AllocatorStats:
        used = [b for b in range(self._num_blocks) if self._refcount[b] > 0]
        return AllocatorStats(
            num_blocks=self._num_blocks,
            block_size=self._block_size,
            used_blocks=len(used),
            free_blocks=len(self._free),
            shared_blocks=sum(1 for b in used if self._refcount[b] > 1),
            logical_tokens=sum(self._num_tokens.values()),
            stored_tokens=sum(self._fill[b] for b in used),
        )

    # ----------------------------------------------------------------------------- operations

    def allocate(self, seq_id: SeqId, num_tokens: int) -> list[int]:
        """Create ``seq_id`` holding ``num_tokens`` tokens (its prompt) and return its block table.

        Takes ``ceil(num_tokens / block_size)`` blocks, and no more: the rest of the sequence's future
        is allocated one block at a time by :meth:`append_token`, only when it is needed.
        """
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists; free it first or use a new id")
        num_tokens = int_at_least("num_tokens", num_tokens, 0)
        blocks = self._take(self.blocks_needed(num_tokens))
        remaining = num_tokens
        for b in blocks:
            self._fill[b] = min(remaining, self._block_size)
            remaining -= self._fill[b]
        self._tables[seq_id] = blocks
        self._num_tokens[seq_id] = num_tokens
        return list(blocks)

    def append_token(self, seq_id: SeqId) -> CopyOnWrite | None:
        """Make room for one more token of ``seq_id``; return the copy-on-write if one was needed.

        Three cases, by the state of the sequence's last block:

        * full (or no block yet): take a fresh block from the free list;
        * partially filled and owned by this sequence alone: write in place, nothing to allocate;
        * partially filled and shared (refcount > 1): copy-on-write. Take a fresh block, record that
          the caller must copy the old block into it, point this sequence at the copy and drop one
          reference to the old block. The other owners keep the original untouched.
        """
        table = self._table(seq_id)
        n = self._num_tokens[seq_id]
        if n % self._block_size == 0:  # last block full, or no block at all
            table.append(self._take(1)[0])
            self._fill[table[-1]] = 1
            self._num_tokens[seq_id] = n + 1
            return None
        last = table[-1]
        cow = None
        if self._refcount[last] > 1:
            new = self._take(1)[0]
            self._fill[new] = self._fill[last]
            self._refcount[last] -= 1
            table[-1] = new
            cow = CopyOnWrite(seq_id=seq_id, logical_block=len(table) - 1, src=last, dst=new)
            self.copies.append(cow)
        self._fill[table[-1]] += 1
        self._num_tokens[seq_id] = n + 1
        return cow

    def append_tokens(self, seq_id: SeqId, count: int) -> CopyOnWrite | None:
        """Append ``count`` tokens at once: the same result as ``count`` calls to :meth:`append_token`.

        All-or-nothing: the blocks for all ``count`` tokens (and the copy, if any) are checked before
        anything changes. At most one copy-on-write can happen, on the first token.
        """
        count = int_at_least("count", count, 0)
        table = self._table(seq_id)
        n = self._num_tokens[seq_id]
        if count == 0:
            return None
        bs = self._block_size
        slack = (-n) % bs  # free slots in the last block
        shared_tail = slack > 0 and self._refcount[table[-1]] > 1
        needed = int(shared_tail) + self.blocks_needed(max(0, count - slack))
        if needed > len(self._free):
            raise OutOfBlocks(needed, len(self._free), self._num_blocks)
        cow = self.append_token(seq_id) if shared_tail else None
        done = int(shared_tail)
        in_place = min(count - done, (-(n + done)) % bs)  # fill what is left of the (private) last block
        if in_place:
            self._fill[table[-1]] += in_place
        rest = count - done - in_place
        for b in self._take(self.blocks_needed(rest)):  # then whole new blocks, the last maybe partial
            self._fill[b] = min(rest, bs)
            rest -= self._fill[b]
            table.append(b)
        self._num_tokens[seq_id] = n + count
        return cow

    def fork(self, parent: SeqId, child: SeqId) -> None:
        """Create ``child`` sharing every block of ``parent`` (no copy, no new block).

        This is how parallel sampling (n > 1) and beam search store a common prefix once. It can never
        run out of blocks; the cost is paid later, one block at most per sequence, by copy-on-write.
        """
        table = self._table(parent)
        if child in self._tables:
            raise ValueError(f"sequence {child!r} already exists; pick a new id for the fork")
        for b in table:
            self._refcount[b] += 1
        self._tables[child] = list(table)
        self._num_tokens[child] = self._num_tokens[parent]

    def free(self, seq_id: SeqId) -> None:
        """Drop ``seq_id``; blocks nobody else references go back to the *front* of the free list.

        This is what vLLM V1 does with blocks that hold no prefix-cache hash, which are all blocks here
        (this allocator has no prefix cache): ``BlockPool.free_blocks`` prepends them, the sequence's
        last block first, so the most recently freed block is reused first ("LIFO reuse of non-cached
        blocks for better GPU locality", ``vllm/v1/core/block_pool.py``). Blocks that carry a hash go
        to the *back* instead, so cached blocks are evicted least recently used first.
        """
        table = self._table(seq_id)
        freed = []
        for b in table:
            self._refcount[b] -= 1
            if self._refcount[b] == 0:
                self._fill[b] = 0
                freed.append(b)
        self._free.extendleft(freed)  # extendleft reverses: the last block of the table ends up first
        del self._tables[seq_id]
        del self._num_tokens[seq_id]

    # ----------------------------------------------------------------------------- checking

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` naming the first broken invariant; do nothing if all hold.

        1. The free list holds no block twice.
        2. Every block is either free (refcount 0, empty) or in use (refcount > 0), never both.
        3. Each block's refcount equals the number of block-table entries pointing at it.
        4. Each table has ``ceil(num_tokens / block_size)`` blocks, all full except the last, whose fill
           is what is left over, so a sequence wastes fewer than ``block_size`` slots.
        """
        free = list(self._free)
        assert len(free) == len(set(free)), f"a block is on the free list twice: {free}"
        free_set = set(free)
        refs = [0] * self._num_blocks
        for table in self._tables.values():
            for b in table:
                refs[b] += 1
        for b in range(self._num_blocks):
            rc = self._refcount[b]
            assert (b in free_set) != (rc > 0), f"block {b}: on free list={b in free_set}, refcount={rc}"
            assert rc == refs[b], f"block {b}: refcount {rc} but {refs[b]} table entries point at it"
            if b in free_set:
                assert self._fill[b] == 0, f"free block {b} still holds {self._fill[b]} tokens"
        bs = self._block_size
        for seq, table in self._tables.items():
            n = self._num_tokens[seq]
            assert len(table) == self.blocks_needed(n), f"{seq!r}: {n} tokens but {len(table)} blocks"
            for i, b in enumerate(table):
                want = bs if i < len(table) - 1 else n - bs * (len(table) - 1)
                assert self._fill[b] == want, f"{seq!r} block {i} (physical {b}): fill {self._fill[b]}"

    # ----------------------------------------------------------------------------- internals

    def _table(self, seq_id: SeqId) -> list[int]:
        try:
            return self._tables[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r}") from None

    def _take(self, count: int) -> list[int]:
        if count > len(self._free):
            raise OutOfBlocks(count, len(self._free), self._num_blocks)
        blocks = [self._free.popleft() for _ in range(count)]  # all checked above: no half-done take
        for b in blocks:
            self._refcount[b] = 1
        return blocks
