"""Chapter 04's scenarios beyond the five workloads: a short prompt sent twice, a loop over documents
that overflows the cache, and a burst in which fresh prompts arrive ahead of requests reusing a cached
prefix. Seeded chat requests (``ChatRequest``) like those of :mod:`servelab.measure.prefix_cache.workloads`.
"""

from __future__ import annotations

import hashlib

from servelab.measure.prefix_cache.workloads import ChatRequest
from servelab.measure.workloads import filler


def _text(seed: int, tag: str, words: int) -> str:
    return filler(words, int.from_bytes(hashlib.sha256(f"{seed}:{tag}".encode()).digest()[:8], "big"))


def _request(workload: str, rid: str, *contents: tuple[str, str]) -> ChatRequest:
    return ChatRequest(workload, rid, tuple({"role": role, "content": text} for role, text in contents))


def repeat_requests(seed: int, words: int, times: int = 2) -> list[ChatRequest]:
    """One prompt of about ``words`` words, sent ``times`` times."""
    content = ("user", _text(seed, "short", words))
    return [_request("short_repeat", f"short_repeat-{i}", content) for i in range(times)]


def cycle_requests(seed: int, documents: int, rounds: int, doc_words: int,
                   question_words: int = 10) -> list[ChatRequest]:
    """``rounds`` passes over ``documents`` documents, in the same order each pass, one question each."""
    return [_request("cycle", f"cycle-{r}-{d}", ("user", f"Document {d}. {_text(seed, f'doc-{d}', doc_words)}\n\n"
                                                         f"Question: {_text(seed, f'q-{r}-{d}', question_words)}"))
            for r in range(rounds) for d in range(documents)]


def burst_requests(seed: int, shared_words: int, reusers: int, newcomers: int, newcomer_words: int,
                   question_words: int = 10) -> tuple[ChatRequest, list[ChatRequest]]:
    """A warm-up request that caches a shared prefix, then a burst: ``newcomers`` fresh prompts first,
    ``reusers`` requests that start with the shared prefix after them."""
    shared = ("system", _text(seed, "burst-shared", shared_words))
    warm = _request("burst", "warm-up", shared, ("user", _text(seed, "burst-q-warm", question_words)))
    new = [_request("burst", f"new-{i}", ("user", f"Topic {i}. {_text(seed, f'burst-new-{i}', newcomer_words)}"))
           for i in range(newcomers)]
    reuse = [_request("burst", f"reuse-{i}", shared, ("user", _text(seed, f"burst-q-{i}", question_words)))
             for i in range(reusers)]
    return warm, new + reuse
