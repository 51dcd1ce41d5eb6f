"""Requests that decode, replayed on our caches one at a time: the simulator's side of the paging referee.

A request is a prompt of ``P`` tokens and the ``N`` output tokens the engine generated. The prefill computes the
prompt's KV and samples output 1; decode step ``j`` (1 <= j < N) computes the KV of output ``j`` and samples output
``j + 1``. The last output is sampled and the request finishes: its KV is never computed. So ``P + N - 1`` tokens of
KV exist at the end, on both engines.

* vLLM: each step allocates slots for the tokens it computes (``allocate_slots`` in
  ``vllm/v1/core/kv_cache_manager.py``, ``num_tokens_need_slot``; no async scheduling on CPU,
  ``vllm/platforms/cpu.py``) and caches every block that became full (``num_tokens_to_cache``, capped at
  ``request.num_tokens``; ``cache_full_blocks`` in ``vllm/v1/core/block_pool.py``). A decode step is
  ``BlockHashCache.append`` of one output; a new block comes from the front of the free queue, evicting the hash it
  held. The block the last output would open is never allocated. ``free`` gives every block back, tail first.
* SGLang: the prompt is matched and locked as in ``sims.SglangSim``; the prefill allocates the unmatched prompt,
  evicting least recently used leaves for the shortfall beyond the free pool (``evict_to_free_tokens`` in
  ``sglang/srt/mem_cache/allocator/base.py``). A request not finished by its prefill is checkpointed
  (``checkpoint_kv_cache`` in ``sglang/srt/mem_cache/common.py``, called from
  ``managers/scheduler_components/batch_result_processor.py``): ``UnifiedRadixCache.checkpoint_into_tree`` inserts
  the prompt and moves the request's lock onto the node the insert ended on, so the prompt is stored right after
  the prefill and stays locked while the request decodes. Each decode step allocates one token, evicting as above.
  At the end ``release_kv_cache`` inserts the committed KV, the prompt and the first ``N - 1`` outputs: the outputs
  become a leaf below the prompt's node, so eviction drops a request's outputs before its prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servelab.measure.kv_events.sims import Op, SglangSim, VllmSim


@dataclass
class Decoding:
    """One decode step worth a figure step: output ``output`` (1-based) whose KV completes the request's block
    ``block`` (0-based, in ``block_tokens``-token blocks), what the simulator stored and removed in it, its cache."""

    output: int
    block: int
    stored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    state: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DecodeOp(Op):
    """An :class:`Op` of a request that decodes: ``output_tokens`` and its ``decoding`` steps."""

    output_tokens: int = 0
    decoding: list[Decoding] = field(default_factory=list)
    prefill_stored: list[str] = field(default_factory=list)  # of ``stored``, those stored right after the prefill


def figure_steps(prompt_tokens: int, output_tokens: int, block_tokens: int) -> list[tuple[int, int]]:
    """(output j, block index) for each decode step whose KV completes a ``block_tokens``-token block."""
    return [(j, (prompt_tokens + j) // block_tokens - 1) for j in range(1, output_tokens)
            if (prompt_tokens + j) % block_tokens == 0]


class VllmDecodeSim(VllmSim):
    """vLLM's block pool, requests decoding."""

    def _cached_keys(self) -> dict[int, str]:
        return {b.block_id: self.key_of[b.block_hash] for b in self.cache.blocks if b.block_hash is not None}

    def _step(self, before: dict[int, str], op: Op | Decoding) -> None:
        after = self._cached_keys()
        op.removed += [k for b, k in before.items() if after.get(b) != k]
        op.stored += [k for b, k in after.items() if before.get(b) != k]

    def decode(self, request: str, prompt: Sequence[int], output: Sequence[int], block_tokens: int) -> DecodeOp:
        tokens = [*prompt, *output[:-1]]
        self._keys(tokens)
        before = self._cached_keys()
        admission = self.cache.allocate(request, prompt)
        if admission is None:
            raise ValueError(f"request {request} ({len(prompt)} tokens) does not fit {self.cache.num_blocks} blocks")
        op = DecodeOp(request, len(prompt), admission.hit_tokens, output_tokens=len(output))
        self._step(before, op)
        op.admitted = self.blocks(request, prompt)
        marks = dict(figure_steps(len(prompt), len(output), block_tokens))
        for j in range(1, len(output)):
            before = self._cached_keys()
            self.cache.append(request, [output[j - 1]])
            if j in marks:
                step = Decoding(j, marks[j])
                self._step(before, step)
                step.state = self.blocks(request, tokens[:len(prompt) + j])
                op.decoding.append(step)
            self._step(before, op)
        self.cache.free(request)
        op.finished = self.blocks()
        return op


class SglangDecodeSim(SglangSim):
    """SGLang's radix tree, requests decoding."""

    def _evict(self, shortfall: int, op: Op) -> None:
        if shortfall > 0:
            before = self.page_keys()
            self.tree.evict(shortfall)
            after = set(self.page_keys())
            op.removed += [k for k in before if k not in after]

    def _insert(self, tokens: Sequence[int]) -> tuple[Any, list[str]]:
        """Insert ``tokens`` cut to whole pages; the node the insert ended on and the page keys it added."""
        before = set(self.page_keys())
        node = self.tree.insert(tokens[: len(tokens) // self.unit_tokens * self.unit_tokens]).node
        return node, [k for k in self.page_keys() if k not in before]

    def decode(self, request: str, prompt: Sequence[int], output: Sequence[int], block_tokens: int) -> DecodeOp:
        match = self.tree.match_prefix(prompt[:-1])
        op = DecodeOp(request, len(prompt), match.length, output_tokens=len(output))
        self.tree.inc_lock_ref(match.node)
        nodes_before = self.nodes()
        self._evict(len(prompt) - match.length - (self.capacity - self.tree.total_tokens), op)
        alive = {n["id"] for n in self.nodes()}
        gone = [n for n in nodes_before if n["id"] not in alive]
        locked = match.node
        if len(output) > 1:  # not finished by its prefill: checkpoint_kv_cache stores the prompt, the lock moves
            locked, op.prefill_stored = self._insert(prompt)
            self.tree.inc_lock_ref(locked)
            self.tree.dec_lock_ref(match.node)
            op.stored += op.prefill_stored
        op.admitted = self.nodes(gone)
        marks = dict(figure_steps(len(prompt), len(output), block_tokens))
        held = 0 if len(output) > 1 else len(prompt) - match.length  # the request's KV outside the tree
        for j in range(1, len(output)):
            held += 1
            removed = len(op.removed)
            self._evict(held - (self.capacity - self.tree.total_tokens), op)
            if j in marks:
                op.decoding.append(Decoding(j, marks[j], removed=op.removed[removed:], state=self.nodes()))
        _, added = self._insert([*prompt, *output[:-1]])  # release_kv_cache: the committed KV
        self.tree.dec_lock_ref(locked)
        op.stored += added
        op.finished = self.nodes()
        return op


def decode_simulator(engine: str, capacity: dict[str, Any]) -> VllmDecodeSim | SglangDecodeSim:
    """The decoding simulator of ``engine`` at the size a server reported (``engine_capacity``)."""
    if engine == "vllm":
        return VllmDecodeSim(capacity["usable"] // capacity["block_size"], capacity["block_size"])
    if engine == "sglang":
        return SglangDecodeSim(capacity["usable"], capacity["block_size"])
    raise ValueError(f"unknown engine {engine!r}; accepted: vllm, sglang")
