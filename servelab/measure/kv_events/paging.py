"""Chapter 03's story in the engines' own KV events: requests that decode, paged into blocks, given back, reused
and evicted; the one call a chapter makes per engine (:func:`record_paging`).

Four requests, sent one at a time, each decoding a forced number of tokens greedily (``decode_send``), sized in
vLLM blocks of ``block`` tokens (128 on CPU) for a pool of ``usable`` blocks:

0. a document A of ``A_BLOCKS`` whole blocks, decoding ``block + 1`` tokens: its output fills a whole block, which
   vLLM stores in the middle of the request (the last output's KV is never computed, so no block more);
1. A, request 0's output and a question ending 2 tokens short of a block, decoding 4 tokens: it finds A and the
   answer's block cached, and its own second output completes a block mid-request;
2. a document B and 3. a document C, each ``doc_blocks`` blocks and half a block, decoding 2 tokens: B fills most of
   the free pool, C does not fit beside what is cached and evicts least recently used blocks (pages in SGLang).

Request 1's prompt holds request 0's output, so the prompts are built while recording; both engines get the same
token ids up to the outputs (greedy, fp32: the engines agree token for token on the cpu profile).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from servelab.engines.server import Server
from servelab.measure.kv_events.decode_send import generate
from servelab.measure.kv_events.paging_replay import replay_paging
from servelab.measure.kv_events.record import Recorder, Trace, recording
from servelab.measure.kv_events.replay import Replay
from servelab.measure.kv_events.workload import TOKEN_RANGE, workload_block
from servelab.measure.kv_memory.capacity import engine_capacity

A_BLOCKS = 2  # document A's whole blocks
QUESTION_SHORT = 2  # request 1's prompt ends this many tokens short of a block
OUTPUTS_1, OUTPUTS_DOC = 4, 2  # tokens requests 1 and 2, 3 decode


@dataclass(frozen=True)
class PagingWorkload:
    """The four requests: token ids of A, the question, B and C; how many tokens each decodes; vLLM's block."""

    block: int
    doc: tuple[int, ...]
    question: tuple[int, ...]
    others: tuple[tuple[int, ...], tuple[int, ...]]
    outputs: tuple[int, int, int, int]
    names: tuple[str, ...] = tuple("0123")
    about: tuple[str, ...] = ("document A", "A, its answer and a question", "document B", "document C")

    def prompt(self, index: int, outputs: Sequence[Sequence[int]]) -> tuple[int, ...]:
        """Request ``index``'s prompt, given the outputs of the requests before it."""
        if index == 0:
            return self.doc
        if index == 1:
            return (*self.doc, *outputs[0], *self.question)
        return self.others[index - 2]


def paging_workload(usable_blocks: int, block: int = 128, max_model_len: int = 2048, *,
                    seed: int = 0) -> PagingWorkload:
    """The workload for a pool of ``usable_blocks`` vLLM blocks of ``block`` tokens: B and C are sized so that C
    evicts two or three blocks (vLLM: what is not cached is handed out first, ``free`` puts cached blocks last)."""
    if block < 2 * QUESTION_SHORT + 2:
        raise ValueError(f"block must be at least {2 * QUESTION_SHORT + 2} tokens, got {block}")
    doc_blocks = -(-(usable_blocks - A_BLOCKS - 1) // 2)
    doc_tokens = doc_blocks * block + block // 2
    if doc_blocks < 1 or doc_tokens + OUTPUTS_DOC > max_model_len:
        raise ValueError(f"a pool of {usable_blocks} usable {block}-token blocks needs documents of {doc_tokens} "
                         f"tokens, which max_model_len {max_model_len} does not allow")
    if (A_BLOCKS + 2) * block - QUESTION_SHORT + OUTPUTS_1 > max_model_len:
        raise ValueError(f"request 1 ({(A_BLOCKS + 2) * block} tokens) does not fit max_model_len {max_model_len}")
    rng = random.Random(seed)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(*TOKEN_RANGE) for _ in range(n))

    question = tokens(block - 1 - QUESTION_SHORT)  # A (2 blocks) + 129 outputs + this = 4 blocks - 2 tokens
    return PagingWorkload(block, tokens(A_BLOCKS * block), question, (tokens(doc_tokens), tokens(doc_tokens)),
                          (block + 1, OUTPUTS_1, OUTPUTS_DOC, OUTPUTS_DOC))


def record_paging_workload(server: Server, recorder: Recorder, requests: PagingWorkload, *,
                           flush_first: bool = True, stop: bool = True) -> Trace:
    """Send ``requests`` one at a time on a started server whose events go to ``recorder``; the trace, each mark
    with its prompt ``tokens``, the engine's ``output`` token ids and ``block_tokens`` (vLLM's block)."""
    outputs: list[list[int]] = []
    with recording(server, recorder, flush_first=flush_first, stop=stop) as session:
        for index, name in enumerate(requests.names):
            prompt = requests.prompt(index, outputs)
            start = time.time()
            reply = generate(server, prompt, requests.outputs[index])
            outputs.append(reply["output"])
            mark = {"request": name, "tokens": list(prompt), "output": reply["output"], "send": start,
                    "finish": time.time(), "cached_tokens": reply["cached_tokens"], "block_tokens": requests.block}
            recorder.wait_quiet(session.quiet_s)
            session.trace.requests.append(mark)
    return session.trace


def record_paging(server: Server, recorder: Recorder, *, seed: int = 0,
                  block: int | None = None) -> tuple[Trace, Replay]:
    """Chapter 03's paging story on one engine: the workload sized for the server's KV budget, recorded from an
    emptied cache, and refereed (:func:`replay_paging`). Start the recorder before the server::

        with Recorder("vllm", prof) as recorder, Server("vllm", prof, **options, **recorder.options()) as server:
            trace, verdict = record_paging(server, recorder)

    (vLLM needs ``cache_options("vllm")`` for the flush, SGLang ``cache_options("sglang")`` to report its hits.)
    Both engines get the same prompts for the same budget: the pool is counted in vLLM blocks, vLLM's as its server
    reports them (``block``: see :func:`workload_block`).
    """
    capacity = engine_capacity(server)
    block = workload_block(server, capacity, block)
    usable = capacity["tokens"] // block - 1  # vLLM's usable blocks: its null block left out
    requests = paging_workload(usable, block, server.profile.max_model_len, seed=seed)
    trace = record_paging_workload(server, recorder, requests)
    return trace, replay_paging(trace)
