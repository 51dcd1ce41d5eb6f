"""RadixAttention's radix tree: the KV cache of every finished and running request, shared by prefix.

SGLang (Zheng et al. 2024, "SGLang: Efficient Execution of Structured Language Model Programs", §3)
keeps the KV cache of past requests instead of freeing it, indexed by a *radix tree*: each edge is
labelled with a run of token ids, and the path from the root to a node spells a token sequence whose
KV cache is resident. A new request walks the tree along its prompt; the tokens it matches are a
*prefix cache hit* and need no prefill. The tree is token-granular (SGLang's ``page_size`` is 1 by
default), so a hit can end anywhere, not only on a block boundary.

This module mirrors ``sglang/srt/mem_cache/radix_cache.py`` (``RadixCache``, SGLang 0.5.23, the
classic tree used by ``RadixCache.create_simulated``), page size 1, LRU policy:

* ``match_prefix`` stamps the root and every node it walks with one access time; when the match ends
  inside a node's edge, that node is *split* so the match ends on a node boundary (the prefix
  becomes a new parent; the original node object keeps the suffix, so a handle to it still means the
  whole path).
* ``insert`` walks and stamps the same way, splits where the new sequence leaves an edge, and hangs
  the rest as a new leaf. Nodes created by a split or an insert get a fresh (later) time.
* ``inc_lock_ref``/``dec_lock_ref`` add/remove one reference on every node from a node up to the root:
  a running request locks the path it uses, and a locked node is never evicted.
* ``evict(num_tokens)`` frees whole unlocked leaves, least recently used first, until at least
  ``num_tokens`` tokens are freed (it may free more: a leaf goes as a whole). A parent that becomes an
  unlocked leaf joins the candidates, so eviction cascades up a branch.

Time is a logical clock (one tick per stamp), where SGLang reads ``time.monotonic()``: the order is
the same, and ties cannot happen. Not modelled: the KV values themselves (only token counts), pages
larger than one token, other eviction policies, priorities, hit counts, the hierarchical cache. The
SGLang *server* of 0.5.23 builds a ``UnifiedRadixCache`` (``mem_cache/registry.py``) whose tree core
keeps the same LRU-by-leaf rule.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field


class LockError(RuntimeError):
    """An unlock without a matching lock, or a lock on a node that is no longer in the tree."""


@dataclass(eq=False)
class RadixNode:
    """One node: the edge ``tokens`` leading to it, its children by first token, lock count, access time."""

    tokens: tuple[int, ...]
    parent: RadixNode | None
    node_id: int
    last_access: int
    children: dict[int, RadixNode] = field(default_factory=dict)
    lock_ref: int = 0
    evicted: bool = False

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return (f"RadixNode(id={self.node_id}, tokens={len(self.tokens)}, lock_ref={self.lock_ref}, "
                f"last_access={self.last_access}, children={len(self.children)})")


@dataclass(frozen=True)
class MatchResult:
    """``length`` tokens of the query are cached; ``node`` is the deepest node matched (the root if none)."""

    length: int
    node: RadixNode


@dataclass(frozen=True)
class InsertResult:
    """``prefix_len`` tokens were already in the tree; ``node`` now ends the inserted sequence."""

    prefix_len: int
    node: RadixNode


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class RadixTree:
    """A token-granular radix tree of cached KV, with SGLang ``RadixCache``'s match, insert, lock and evict."""

    def __init__(self) -> None:
        self._clock = 0
        self._next_id = 0
        # The root holds no tokens and one permanent reference, so it is never an eviction candidate.
        self.root = self._new_node((), None)
        self.root.lock_ref = 1
        self._evictable = 0
        self._protected = 0

    # ---- bookkeeping -------------------------------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _new_node(self, tokens: tuple[int, ...], parent: RadixNode | None) -> RadixNode:
        node = RadixNode(tokens=tokens, parent=parent, node_id=self._next_id, last_access=self._tick())
        self._next_id += 1
        return node

    @property
    def clock(self) -> int:
        """The logical time of the last access stamp."""
        return self._clock

    @property
    def total_tokens(self) -> int:
        """Tokens whose KV the tree holds: the sum of every node's edge length."""
        return self._evictable + self._protected

    @property
    def evictable_tokens(self) -> int:
        """Tokens on nodes no request locks (SGLang's ``evictable_size()``)."""
        return self._evictable

    @property
    def protected_tokens(self) -> int:
        """Tokens on nodes some request locks (SGLang's ``protected_size()``)."""
        return self._protected

    def nodes(self) -> Iterator[tuple[RadixNode, int]]:
        """Every node but the root with its depth (1 = child of the root), depth first, children by first token."""
        stack = [(c, 1) for _, c in sorted(self.root.children.items(), reverse=True)]
        while stack:
            node, depth = stack.pop()
            yield node, depth
            stack += [(c, depth + 1) for _, c in sorted(node.children.items(), reverse=True)]

    def sequences(self) -> list[tuple[int, ...]]:
        """The token sequence spelled by the path to each leaf."""
        return [self.path_tokens(n) for n, _ in self.nodes() if n.is_leaf]

    def path_tokens(self, node: RadixNode) -> tuple[int, ...]:
        """The tokens from the root down to and including ``node``."""
        parts: list[tuple[int, ...]] = []
        while node.parent is not None:
            parts.append(node.tokens)
            node = node.parent
        return tuple(t for part in reversed(parts) for t in part)

    def _split(self, child: RadixNode, split_len: int) -> RadixNode:
        """Cut ``child``'s edge after ``split_len`` tokens: a new node takes the prefix and becomes its parent.

        The new node inherits the lock count (every lock through ``child`` passes through it too);
        ``child`` keeps the suffix, its own access time and its identity.
        """
        parent = child.parent
        assert parent is not None and 0 < split_len < len(child)
        new = self._new_node(child.tokens[:split_len], parent)
        new.lock_ref = child.lock_ref
        child.tokens = child.tokens[split_len:]
        child.parent = new
        new.children[child.tokens[0]] = child
        parent.children[new.tokens[0]] = new
        return new

    def _walk(self, tokens: tuple[int, ...], now: int) -> tuple[int, RadixNode]:
        """Follow ``tokens`` down from the root, stamping every node passed with ``now``; where they part
        inside a node, split it there. Returns (tokens matched, the node the match ends in)."""
        node = self.root
        node.last_access = now
        matched = 0
        while matched < len(tokens) and (child := node.children.get(tokens[matched])) is not None:
            child.last_access = now
            n = _common_prefix(child.tokens, tokens[matched:])
            matched += n
            if n < len(child):
                return matched, self._split(child, n)
            node = child
        return matched, node

    # ---- the cache operations ---------------------------------------------------------------------
    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        """The longest cached prefix of ``tokens``; stamps the path and splits the node the match ends in."""
        tokens = tuple(tokens)
        if not tokens:
            return MatchResult(0, self.root)
        matched, node = self._walk(tokens, self._tick())
        return MatchResult(matched, node)

    def insert(self, tokens: Sequence[int]) -> InsertResult:
        """Cache ``tokens``: walk and stamp the shared prefix, split where they part, add the rest as a leaf."""
        tokens = tuple(tokens)
        matched, node = self._walk(tokens, self._tick())
        if matched < len(tokens):
            leaf = self._new_node(tokens[matched:], node)
            node.children[leaf.tokens[0]] = leaf
            self._evictable += len(leaf)
            node = leaf
        return InsertResult(matched, node)

    def inc_lock_ref(self, node: RadixNode) -> int:
        """Lock the path from ``node`` to the root; returns the change in evictable tokens (<= 0)."""
        if node.evicted:
            raise LockError(f"cannot lock node {node.node_id}: it was evicted")
        delta = 0
        while node is not self.root:
            if node.lock_ref == 0:
                self._evictable -= len(node)
                self._protected += len(node)
                delta -= len(node)
            node.lock_ref += 1
            assert node.parent is not None
            node = node.parent
        return delta

    def dec_lock_ref(self, node: RadixNode) -> int:
        """Unlock the path from ``node`` to the root; returns the change in evictable tokens (>= 0)."""
        walk = node
        while walk is not self.root:
            if walk.lock_ref < 1:
                raise LockError(f"unlock of node {node.node_id} without a lock (node {walk.node_id} has lock_ref 0)")
            assert walk.parent is not None
            walk = walk.parent
        delta = 0
        while node is not self.root:
            if node.lock_ref == 1:
                self._evictable += len(node)
                self._protected -= len(node)
                delta += len(node)
            node.lock_ref -= 1
            assert node.parent is not None
            node = node.parent
        return delta

    def evictable_leaves(self) -> list[RadixNode]:
        """Unlocked leaves: the only nodes eviction may take next."""
        return [n for n, _ in self.nodes() if n.is_leaf and n.lock_ref == 0]

    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves, least recently used first, until ``num_tokens`` are freed; tokens freed.

        A leaf is freed whole, so the count can exceed ``num_tokens``; it is smaller only when every
        remaining node is locked (or the tree is empty).
        """
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        heap = [(n.last_access, n.node_id, n) for n in self.evictable_leaves()]
        heapq.heapify(heap)
        evicted = 0
        while evicted < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.tokens[0]]
            leaf.evicted = True
            self._evictable -= len(leaf)
            evicted += len(leaf)
            if parent.is_leaf and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.node_id, parent))
        return evicted
