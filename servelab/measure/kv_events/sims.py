"""Chapter 04's workload replayed on our caches, one request at a time, watching what each operation stores and
removes: the simulator's side of the referee.

Requests are sent alone, each a token-id prompt asking for one token (``servelab.measure.prefix_cache.live``), so
each is admitted and finished before the next, as ``predict_hits`` replays them. What a request does is read off
the simulators' public state before and after each operation, named by content (``keys``):

* vLLM (``BlockHashCache``): ``allocate`` takes the new blocks from the front of the free queue, forgetting the
  hash of each one it takes (vLLM's ``_maybe_evict_cached_block`` in ``get_new_blocks``, one ``BlockRemoved`` per
  hash), then caches every new *full* prompt block (``cache_full_blocks``, one ``BlockStored`` per block, a hash
  already cached included: a recomputed last block is stored again). So *removed* = the hash each new block held
  before, *stored* = the hash each new block holds after. ``free`` changes no hash. The output token is never
  cached: the request finishes in the step that samples it and no later step allocates for it.
* SGLang (``RadixTree``): the request matches all but its last token (``_compute_max_prefix_len``), locks what it
  matched, frees least recently used leaves until its new tokens fit (``evict_to_free_tokens`` in
  ``sglang/srt/mem_cache/allocator/base.py``: the shortfall beyond the free pool) and, when it finishes, its prompt
  is inserted (``release_kv_cache`` in ``sglang/srt/mem_cache/common.py`` inserts the committed KV, which after
  one output token is the prompt). *removed* = the pages eviction took, *stored* = the pages the insert added.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servelab.measure.kv_events.keys import prefix_keys
from servelab.sim.prefix_cache import BlockHashCache, RadixTree, block_hashes


@dataclass
class Op:
    """One request on a simulator: its hit, the units it removed and stored (content keys, in order), and the
    cache as it stood once the request was admitted and once it finished."""

    request: str
    prompt_tokens: int
    hit_tokens: int
    removed: list[str] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)
    admitted: list[dict[str, Any]] = field(default_factory=list)
    finished: list[dict[str, Any]] = field(default_factory=list)


class VllmSim:
    """vLLM's block pool: ``num_blocks`` usable blocks (its null block left out) of ``block_size`` tokens."""

    unit = "block"

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.cache = BlockHashCache(num_blocks, block_size)
        self.unit_tokens = block_size
        self.key_of: dict[bytes, str] = {}  # simulator hash -> content key
        self.parent_of: dict[str, str | None] = {}

    def _keys(self, tokens: Sequence[int]) -> None:
        keys = prefix_keys(tokens, self.unit_tokens)
        for i, (h, key) in enumerate(zip(block_hashes(tokens, self.unit_tokens), keys, strict=True)):
            self.key_of[h] = key
            self.parent_of[key] = keys[i - 1] if i else None

    def blocks(self, request: str | None = None, tokens: Sequence[int] = ()) -> list[dict[str, Any]]:
        """Every block: ``state`` (free, used, cached), its content ``key`` and ``parent`` key, ``tokens`` held."""
        table = self.cache.request_blocks(request) if request is not None else []
        out = []
        for block in self.cache.blocks:
            key = self.key_of.get(block.block_hash) if block.block_hash is not None else None
            held = (min(self.unit_tokens, len(tokens) - table.index(block.block_id) * self.unit_tokens)
                    if block.block_id in table else self.unit_tokens if key else 0)
            state = "used" if block.ref_cnt > 0 else "cached" if key else "free"
            out.append({"id": block.block_id, "state": state, "key": key,
                        "parent": self.parent_of.get(key) if key else None, "tokens": held})
        return out

    def run(self, request: str, tokens: Sequence[int]) -> Op:
        self._keys(tokens)
        before = {b.block_id: b.block_hash for b in self.cache.blocks if b.block_hash is not None}
        admission = self.cache.allocate(request, tokens)
        if admission is None:
            raise ValueError(f"request {request} ({len(tokens)} tokens) does not fit {self.cache.num_blocks} blocks")
        new = self.cache.request_blocks(request)[admission.hit_tokens // self.unit_tokens:]
        op = Op(request, len(tokens), admission.hit_tokens)
        op.removed = [self.key_of[before[b]] for b in new if b in before]
        op.stored = [self.key_of[self.cache.blocks[b].block_hash] for b in new
                     if self.cache.blocks[b].block_hash is not None]
        op.admitted = self.blocks(request, tokens)
        self.cache.free(request)
        op.finished = self.blocks()
        return op


class SglangSim:
    """SGLang's radix tree holding at most ``capacity`` tokens, in pages of ``page_size`` tokens."""

    unit = "page"

    def __init__(self, capacity: int, page_size: int = 1) -> None:
        if page_size < 1 or capacity < 1:
            raise ValueError(f"need capacity >= 1 and page_size >= 1, got {capacity}, {page_size}")
        self.tree, self.capacity, self.unit_tokens = RadixTree(), capacity, page_size
        self.parent_of: dict[str, str | None] = {}

    def page_keys(self) -> list[str]:
        """The content key of every cached page (each leaf's path, cut into pages), root side first."""
        seen: dict[str, None] = {}
        for node, _ in self.tree.nodes():
            if node.is_leaf:
                keys = prefix_keys(self.tree.path_tokens(node), self.unit_tokens)
                for i, key in enumerate(keys):
                    seen.setdefault(key, None)
                    self.parent_of.setdefault(key, keys[i - 1] if i else None)
        return list(seen)

    def nodes(self, gone: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
        """Every node: ``id``, ``parent`` id (None under the root), its first tokens, ``tokens``, ``state`` (locked
        while a request holds it, else cached), and the ``gone`` nodes eviction just took, as evicted."""
        out = [{"id": n.node_id, "parent": n.parent.node_id if n.parent is not self.tree.root else None,
                "first": list(n.tokens[:3]), "tokens": len(n), "state": "locked" if n.lock_ref else "cached"}
               for n, _ in self.tree.nodes()]
        return out + [{**g, "state": "evicted"} for g in gone]

    def run(self, request: str, tokens: Sequence[int]) -> Op:
        page = self.unit_tokens
        match = self.tree.match_prefix(tokens[:-1])
        hit = match.length // page * page
        op = Op(request, len(tokens), hit)
        self.tree.inc_lock_ref(match.node)
        before, nodes_before = self.page_keys(), self.nodes()
        shortfall = len(tokens) - hit - (self.capacity - self.tree.total_tokens)
        if shortfall > 0:
            self.tree.evict(shortfall)
        after = set(self.page_keys())
        op.removed = [k for k in before if k not in after]
        alive = {n["id"] for n in self.nodes()}
        op.admitted = self.nodes([n for n in nodes_before if n["id"] not in alive])
        self.tree.insert(tokens[: len(tokens) // page * page])
        self.tree.dec_lock_ref(match.node)
        op.stored = [k for k in self.page_keys() if k not in after]
        op.finished = self.nodes()
        return op


def simulator(engine: str, capacity: dict[str, Any]) -> VllmSim | SglangSim:
    """The simulator of ``engine`` at the size a server reported (``engine_capacity``: ``block_size``, ``usable``)."""
    if engine == "vllm":
        return VllmSim(capacity["usable"] // capacity["block_size"], capacity["block_size"])
    if engine == "sglang":
        return SglangSim(capacity["usable"], capacity["block_size"])
    raise ValueError(f"unknown engine {engine!r}; accepted: vllm, sglang")

