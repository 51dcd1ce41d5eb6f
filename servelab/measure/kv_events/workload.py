"""The requests a recording sends, and the one call a chapter makes per engine: record them, referee them.

The workload is chapter 04's kind (token-id prompts sent one at a time, one output token each), sized in vLLM
blocks so that every rule the referee checks happens once, on both engines, with the same token ids:

0. a document A of ``doc_blocks`` blocks and 40 tokens: both engines store it (vLLM its full blocks only);
1. A's whole blocks and a question one token short of a block: both hit A's blocks; SGLang splits A's node and
   stores the question, vLLM stores nothing: the question's block would be completed only by the output token,
   which is never cached;
2. A's whole blocks alone: SGLang matches all but the last token; vLLM's hit is capped one token short of the
   prompt, so it recomputes A's last block and stores that block again (a second block, the same hash);
3. a document B of ``other_blocks`` blocks and 50 tokens, which does not fit beside what is cached: vLLM evicts
   A's blocks tail first, SGLang its least recently used leaves;
4. A again: each engine finds what it kept of A.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from servelab.engines.server import Server
from servelab.measure.chapter_servers import VLLM_BLOCK_SIZE
from servelab.measure.kv_events.record import Recorder, Trace, recording
from servelab.measure.kv_events.replay import Replay, replay
from servelab.measure.kv_memory.capacity import engine_capacity

TOKEN_RANGE = (1000, 20000)  # ordinary token ids of the model's vocabulary: no special tokens, no chat template
# Tokens past the whole blocks of A and of B, for 128-token blocks; scaled to the block (`tails`), so that B's tail
# stays under one block: SGLang then frees B's room from A's tail and the question alone, and keeps A's head.
DOC_TAIL, B_TAIL = 40, 50


def tails(block_size: int) -> tuple[int, int]:
    """A's and B's tokens past their whole blocks, in proportion to the block (both under one block)."""
    return max(1, DOC_TAIL * block_size // 128), max(1, B_TAIL * block_size // 128)


@dataclass(frozen=True)
class Workload:
    """Requests by name, each a token-id prompt, with a few plain words on what it is."""

    names: tuple[str, ...]
    prompts: tuple[tuple[int, ...], ...]
    about: tuple[str, ...]

    def head(self, n: int) -> Workload:
        """The first ``n`` requests."""
        return Workload(self.names[:n], self.prompts[:n], self.about[:n])


def workload(doc_blocks: int, other_blocks: int, block_size: int = 128, *, seed: int = 0) -> Workload:
    """The five requests above, for blocks of ``block_size`` tokens (vLLM's, 128 on CPU)."""
    if doc_blocks < 1 or other_blocks < 1 or block_size < 2:
        raise ValueError(f"need doc_blocks >= 1, other_blocks >= 1, block_size >= 2; got {doc_blocks}, "
                         f"{other_blocks}, {block_size}")
    rng = random.Random(seed)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(*TOKEN_RANGE) for _ in range(n))

    doc_tail, b_tail = tails(block_size)
    doc, question = tokens(doc_blocks * block_size + doc_tail), tokens(block_size - 1)
    other, head = tokens(other_blocks * block_size + b_tail), doc[:doc_blocks * block_size]
    return Workload(tuple("01234"), (doc, head + question, head, other, doc),
                    ("document A", "A's blocks and a question", "A's blocks again", "document B", "document A again"))


def eviction_workload(kv_tokens: int, block_size: int = 128, *, seed: int = 0) -> Workload:
    """The workload for a KV budget of ``kv_tokens``: A takes half of vLLM's usable blocks (the budget's blocks but
    the null block), B the other half, so B evicts part of A on both engines."""
    usable = kv_tokens // block_size - 1
    if usable < 3:
        raise ValueError(f"a budget of {kv_tokens} tokens holds {usable} usable {block_size}-token blocks; "
                         "the eviction workload needs at least 3")
    return workload(usable // 2, usable - usable // 2, block_size, seed=seed)


def record_workload(server: Server, recorder: Recorder, requests: Workload, *, flush_first: bool = True,
                    stop: bool = True) -> Trace:
    """Send ``requests`` one at a time on a started server whose events go to ``recorder``; the trace."""
    too_long = [n for n, p in zip(requests.names, requests.prompts, strict=True)
                if len(p) >= server.profile.max_model_len]
    if too_long:
        raise ValueError(f"requests {too_long} do not fit max_model_len {server.profile.max_model_len}")
    with recording(server, recorder, flush_first=flush_first, stop=stop) as session:
        for name, prompt in zip(requests.names, requests.prompts, strict=True):
            session.send(prompt, name)
    return session.trace


def workload_block(server: Server, capacity: dict[str, Any], block: int | None = None) -> int:
    """The block a workload is sized in: ``block`` when given, else the block vLLM reports (``capacity``, from
    ``engine_capacity``), else, for SGLang, vLLM's default block on the profile's device. SGLang gets the same token
    ids as vLLM for the same budget and the same block: pass it vLLM's reported block where that differs."""
    if block is not None:
        return block
    return capacity["block_size"] if server.engine == "vllm" else VLLM_BLOCK_SIZE[server.profile.device]


def record_eviction(server: Server, recorder: Recorder, *, seed: int = 0,
                    block: int | None = None) -> tuple[Trace, Replay]:
    """Chapter 04's eviction story on one engine: the workload sized for the server's KV budget, recorded from an
    emptied cache, and refereed. Start the recorder before the server::

        with Recorder("vllm", prof) as recorder, Server("vllm", prof, **options, **recorder.options()) as server:
            trace, verdict = record_eviction(server, recorder)

    (vLLM needs ``cache_options("vllm")`` for the flush.) Both engines get the same token ids for the same budget
    and block (:func:`workload_block`).
    """
    capacity = engine_capacity(server)
    kv_tokens = capacity["tokens"]  # vLLM: whole blocks, its null block included; SGLang: its pool
    trace = record_workload(server, recorder, eviction_workload(kv_tokens, workload_block(server, capacity, block),
                                                                seed=seed))
    return trace, replay(trace)
