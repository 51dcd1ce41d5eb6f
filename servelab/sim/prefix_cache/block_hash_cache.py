"""vLLM's automatic prefix caching: full KV blocks found again by a hash chained over the prefix.

vLLM (V1 engine) stores KV in fixed-size *blocks* (PagedAttention) and caches a block once it is
full: its *block hash* is ``hash(parent block's hash, the block's token ids)``, so equal hashes mean
equal prefixes, not only equal blocks. A new request hashes its prompt block by block and looks the
hashes up in order; the first miss ends the hit (every later hash depends on the missing one). This
module mirrors ``vllm/v1/core`` of vLLM 0.32 (``kv_cache_manager.py``, ``kv_cache_utils.py``,
``block_pool.py``, ``single_type_kv_cache_manager.py``):

* Only **full** blocks are cached; a prompt of ``block_size`` tokens or fewer never hits.
* The hit is capped at ``num_tokens - 1`` tokens and rounded down to whole blocks: the last prompt
  token is always computed (its logits give the first output token), so a prompt that is entirely
  cached still recomputes its last block (``max_cache_hit_length`` in ``get_computed_blocks``).
* Blocks are reference-counted. A hit *touches* its blocks (``ref_cnt += 1``; a block at 0 leaves the
  free queue). A finished request *frees* its blocks tail first: cached ones go to the back of the
  free queue, uncached ones to the front. New blocks are taken from the front, and taking a cached
  block *evicts* it (its hash is forgotten). So the free queue is the LRU order, and a request's
  tail blocks are evicted before its head.
* No de-duplication: when a block is recomputed (the capped last block), its hash maps to both
  blocks, and lookups return the first one cached.
* Counters in tokens, as ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits``: at admission a
  request adds its prompt length to ``queries`` and its hit length to ``hits``.

Simplifications: the whole prompt is admitted in one step (no chunked prefill), a request that does
not fit is refused (``None``) instead of waiting, there is no watermark and no preemption, the null
block vLLM keeps aside (block 0) is not counted in ``num_blocks``, and the hash is SHA-256 of
``(parent, tokens)`` with no extra keys (LoRA, multimodal, cache salt).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from servelab.integers import ceil_div, int_at_least

BlockHash = bytes
ROOT_HASH: BlockHash = hashlib.sha256(b"servelab-none-hash").digest()  # vLLM's NONE_HASH: the first block's parent


def hash_block(parent: BlockHash | None, tokens: Sequence[int]) -> BlockHash:
    """The key of a full block: a hash of its parent's key and its own token ids."""
    data = repr((parent or ROOT_HASH, tuple(tokens))).encode()
    return hashlib.sha256(data).digest()


def block_hashes(tokens: Sequence[int], block_size: int) -> list[BlockHash]:
    """The chained keys of every *full* block of ``tokens`` (a trailing partial block has none)."""
    hashes: list[BlockHash] = []
    parent: BlockHash | None = None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block(parent, tokens[start:start + block_size])
        hashes.append(parent)
    return hashes


@dataclass
class Block:
    """One physical KV block: who uses it (``ref_cnt``) and, once full and cached, its key."""

    block_id: int
    ref_cnt: int = 0
    block_hash: BlockHash | None = None


@dataclass(frozen=True)
class Admission:
    """A request admitted: ``hit_tokens`` came from the cache, ``computed_tokens`` are prefilled."""

    request_id: str
    prompt_tokens: int
    hit_tokens: int
    new_blocks: int

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens


@dataclass
class _Request:
    tokens: list[int]
    blocks: list[Block] = field(default_factory=list)
    num_cached_blocks: int = 0


class OutOfBlocks(RuntimeError):
    """A running request needs a new block and none is free (vLLM would preempt someone)."""


class BlockHashCache:
    """A pool of ``num_blocks`` KV blocks of ``block_size`` tokens with vLLM's hash-chained prefix cache."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = int_at_least("num_blocks", num_blocks, 1)
        self.block_size = int_at_least("block_size", block_size, 1)
        self.blocks = [Block(i) for i in range(self.num_blocks)]
        # Free blocks in eviction order: the front is taken first. Starts in block-id order.
        self._free: OrderedDict[int, None] = OrderedDict((b.block_id, None) for b in self.blocks)
        # hash -> the blocks holding it, oldest first (vLLM's BlockHashToBlockMap).
        self._cached: dict[BlockHash, dict[int, Block]] = {}
        self._requests: dict[str, _Request] = {}
        self.queries = 0
        self.hits = 0
        self.requests = 0
        self.evicted_blocks = 0

    # ---- state -------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds (cached or empty): what a new allocation can take."""
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a cached (hashed) full block, held by a request or not."""
        return sum(1 for b in self.blocks if b.block_hash is not None)

    def free_queue(self) -> list[int]:
        """Block ids in the order new allocations take them (the first is evicted first)."""
        return list(self._free)

    def cache_index(self) -> dict[BlockHash, list[int]]:
        """The lookup table: each cached block hash and the blocks holding it, the one lookups return first."""
        return {h: list(holders) for h, holders in self._cached.items()}

    def running(self) -> list[str]:
        return list(self._requests)

    def request_blocks(self, request_id: str) -> list[int]:
        """The block table of a running request."""
        return [b.block_id for b in self._request(request_id).blocks]

    def hit_rate(self) -> float:
        """``hits / queries`` in tokens (0 before any query)."""
        return self.hits / self.queries if self.queries else 0.0

    def _request(self, request_id: str) -> _Request:
        if request_id not in self._requests:
            raise KeyError(f"no running request {request_id!r}; running: {sorted(self._requests)}")
        return self._requests[request_id]

    # ---- lookup ------------------------------------------------------------------------------------
    def _hit_blocks(self, tokens: Sequence[int]) -> list[Block]:
        max_hit = len(tokens) - 1  # the last token is always computed
        hits = []
        for h in block_hashes(tokens, self.block_size)[: max(max_hit, 0) // self.block_size]:
            holders = self._cached.get(h)
            if not holders:
                break
            hits.append(next(iter(holders.values())))
        return hits

    def lookup(self, tokens: Sequence[int]) -> int:
        """The tokens of ``tokens`` a request would find cached now (changes nothing, counts nothing)."""
        return len(self._hit_blocks(tokens)) * self.block_size

    # ---- request lifecycle -------------------------------------------------------------------------
    def allocate(self, request_id: str, tokens: Sequence[int]) -> Admission | None:
        """Admit a request with prompt ``tokens``: reuse its cached prefix, take blocks for the rest.

        Returns ``None`` and changes nothing when the free blocks do not suffice (hit blocks that
        sit in the free queue count against them: touching takes them out).
        """
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already running")
        if not tokens:
            raise ValueError(f"request {request_id!r} has an empty prompt; a prompt needs at least one token")
        hits = self._hit_blocks(tokens)
        new = ceil_div(len(tokens), self.block_size) - len(hits)
        needed = new + sum(1 for b in hits if b.ref_cnt == 0)
        if needed > self.num_free_blocks:
            return None
        for block in hits:  # touch
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1
        req = _Request(tokens=list(tokens), blocks=hits + self._take(new), num_cached_blocks=len(hits))
        self._requests[request_id] = req
        self._cache_full_blocks(req)
        self.requests += 1
        self.queries += len(tokens)
        self.hits += len(hits) * self.block_size
        return Admission(request_id, len(tokens), len(hits) * self.block_size, new)

    def append(self, request_id: str, tokens: Sequence[int]) -> None:
        """Grow a running request by ``tokens`` (decoded output); blocks that become full are cached."""
        req = self._request(request_id)
        new = ceil_div(len(req.tokens) + len(tokens), self.block_size) - len(req.blocks)
        if new > self.num_free_blocks:
            raise OutOfBlocks(f"request {request_id!r} needs {new} more block(s), {self.num_free_blocks} free")
        req.tokens += list(tokens)
        req.blocks += self._take(new)
        self._cache_full_blocks(req)

    def free(self, request_id: str) -> None:
        """Finish a request: drop its references, tail block first, so its tail is evicted first."""
        req = self._requests.pop(request_id, None)
        if req is None:
            raise KeyError(f"no running request {request_id!r}; running: {sorted(self._requests)}")
        to_front, to_back = [], []
        for block in reversed(req.blocks):
            block.ref_cnt -= 1
            assert block.ref_cnt >= 0, block
            if block.ref_cnt == 0:
                (to_back if block.block_hash is not None else to_front).append(block.block_id)
        for block_id in reversed(to_front):  # prepend, keeping their order at the front
            self._free[block_id] = None
            self._free.move_to_end(block_id, last=False)
        for block_id in to_back:
            self._free[block_id] = None

    # ---- internals ---------------------------------------------------------------------------------
    def _take(self, n: int) -> list[Block]:
        taken = []
        for _ in range(n):
            block_id, _ = self._free.popitem(last=False)
            block = self.blocks[block_id]
            if block.block_hash is not None:  # evict: forget the hash of the block being reused
                holders = self._cached[block.block_hash]
                del holders[block_id]
                if not holders:
                    del self._cached[block.block_hash]
                block.block_hash = None
                self.evicted_blocks += 1
            block.ref_cnt = 1
            taken.append(block)
        return taken

    def _cache_full_blocks(self, req: _Request) -> None:
        full = len(req.tokens) // self.block_size
        if full <= req.num_cached_blocks:
            return
        hashes = block_hashes(req.tokens, self.block_size)
        for i in range(req.num_cached_blocks, full):
            block = req.blocks[i]
            if block.block_hash is None:
                block.block_hash = hashes[i]
                self._cached.setdefault(hashes[i], {})[block.block_id] = block
        req.num_cached_blocks = full
