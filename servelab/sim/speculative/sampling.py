"""Speculative sampling from scratch, in NumPy, on toy language models.

The algorithm (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative Sampling", who swap
the letters: their q is the target, p the draft). A cheap draft q proposes k tokens, one after the other; the
target p scores all of them in one pass. Draft token x is accepted with probability
``min(1, p(x) / q(x))``, left to right. At the first rejection the target's token is drawn from the
normalised residual ``max(0, p - q)`` and the step ends; if all k are accepted, one bonus token is
drawn from p after them. Every emitted token is then distributed exactly as p (the papers prove
it), which is what "lossless" means. Greedy decoding is the limit where p and q are one-hot.

Toy language models: a bigram table ``probs[t]`` = the distribution of the next token after token
t, for a vocabulary of V tokens. Contexts differ per position, so the draft and the target disagree
by different amounts at different positions, as real models do. When every row of both tables is
the same, acceptance is i.i.d. with ``alpha = sum_x min(p(x), q(x))`` (Leviathan et al.), the
assumption of :mod:`servelab.sim.speculative.theory`.

Broken variants, for a test to catch: ``resample_from_q`` draws the replacement from q instead of
the residual (the output leans towards q), ``accept_all`` keeps every draft token (the output is q).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from servelab.integers import int_at_least
from servelab.sim.speculative.theory import leading_kept

Variant = Literal["exact", "resample_from_q", "accept_all"]
VARIANTS: tuple[Variant, ...] = ("exact", "resample_from_q", "accept_all")


def softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Row-wise softmax at ``temperature``; temperature 0 is greedy: one-hot on the first maximum."""
    z = np.asarray(logits, dtype=float)
    if temperature == 0:
        return np.eye(z.shape[-1])[np.argmax(z, axis=-1)]
    if not temperature > 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    e = np.exp((z - z.max(axis=-1, keepdims=True)) / temperature)
    return e / e.sum(axis=-1, keepdims=True)


def check_model(name: str, probs: np.ndarray) -> np.ndarray:
    """A (V, V) bigram table whose rows are probability distributions, or one ValueError naming it."""
    m = np.asarray(probs, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or np.any(m < 0) or not np.allclose(m.sum(axis=1), 1.0):
        raise ValueError(f"{name} must be a (V, V) table of next-token distributions (rows >= 0 summing to 1), "
                         f"got shape {m.shape}")
    return m


def acceptance_probability(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Chance that a token drawn from q is accepted against p: ``sum_x min(p(x), q(x))`` (per row)."""
    return np.minimum(p, q).sum(axis=-1)


def first_token_distribution(p: np.ndarray, q: np.ndarray, variant: Variant) -> np.ndarray:
    """What one verification emits first, exactly: p for the exact rule, something else when broken."""
    if variant == "exact":
        return np.asarray(p, dtype=float)
    if variant == "resample_from_q":
        return np.minimum(p, q) + (1 - acceptance_probability(p, q))[..., None] * q
    if variant == "accept_all":
        return np.asarray(q, dtype=float)
    raise ValueError(f"unknown variant {variant!r}; accepted: {', '.join(VARIANTS)}")


def _sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``probs`` (rows need not be normalised) by inverting the CDF."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cdf[:, -1]
    picked = (cdf <= u[:, None]).sum(axis=1)
    last_possible = probs.shape[1] - 1 - np.argmax(probs[:, ::-1] > 0, axis=1)
    return np.minimum(picked, last_possible)  # u rounding up to the total would pick past the end


@dataclass(frozen=True)
class Step:
    """One verification for N sequences: ``tokens[i, :emitted[i]]`` are what sequence i gained."""

    tokens: np.ndarray  # (N, k + 1), -1 after the emitted ones
    emitted: np.ndarray  # (N,) in 1..k+1
    accepted: np.ndarray  # (N,) accepted draft tokens, in 0..k
    drafted: np.ndarray | None = None  # (N, k) the draft's proposals


def speculative_step(target: np.ndarray, draft: np.ndarray, context: np.ndarray, k: int,
                     rng: np.random.Generator, variant: Variant = "exact") -> Step:
    """Draft k tokens after each context token, verify them against the target, emit 1..k+1 tokens."""
    k = int_at_least("k (draft tokens per step)", k, 1)
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; accepted: {', '.join(VARIANTS)}")
    context = np.asarray(context, dtype=int)
    n, rows = len(context), np.arange(len(context))
    drafted = np.empty((n, k), dtype=int)
    prev = context
    for i in range(k):
        drafted[:, i] = prev = _sample_rows(draft[prev], rng)
    before = np.column_stack([context, drafted[:, :-1]])  # the token each draft position follows
    p_x, q_x = target[before, drafted], draft[before, drafted]
    accept = rng.random((n, k)) * q_x < p_x  # u < p(x)/q(x); q(x) > 0 for a drafted x
    accept |= variant == "accept_all"
    n_accepted = leading_kept(accept)
    rejected = n_accepted < k
    last = np.empty(n, dtype=int)
    if rejected.any():
        r, at = rows[rejected], n_accepted[rejected]
        p_rows, q_rows = target[before[r, at]], draft[before[r, at]]
        residual = q_rows if variant == "resample_from_q" else np.maximum(p_rows - q_rows, 0.0)
        last[r] = _sample_rows(residual, rng)
    if (~rejected).any():
        last[~rejected] = _sample_rows(target[drafted[~rejected, -1]], rng)
    tokens = np.full((n, k + 1), -1, dtype=int)
    keep = np.arange(k)[None, :] < n_accepted[:, None]
    tokens[:, :k][keep] = drafted[keep]
    tokens[rows, n_accepted] = last
    return Step(tokens=tokens, emitted=n_accepted + 1, accepted=n_accepted, drafted=drafted)


def generate(target: np.ndarray, draft: np.ndarray, k: int, n_sequences: int, length: int, *,
             seed: int, start: int = 0, variant: Variant = "exact") -> np.ndarray:
    """``n_sequences`` continuations of token ``start``, ``length`` tokens each, by speculative decoding.

    Sequences advance together, one verification per loop, each from its own last token; a
    verification that runs past ``length`` is cut there. Returns an (n_sequences, length) array.
    """
    target, draft = check_model("target", target), check_model("draft", draft)
    if target.shape != draft.shape:
        raise ValueError(f"target and draft need the same vocabulary, got {target.shape} and {draft.shape}")
    n = int_at_least("n_sequences", n_sequences, 1)
    length = int_at_least("length", length, 1)
    rng = np.random.default_rng(seed)
    out = np.full((n, length), -1, dtype=int)
    filled, context = np.zeros(n, dtype=int), np.full(n, start, dtype=int)
    while (active := np.flatnonzero(filled < length)).size:
        step = speculative_step(target, draft, context[active], k, rng, variant)
        for j in range(k + 1):
            put = (j < step.emitted) & (filled[active] + j < length)
            out[active[put], filled[active[put]] + j] = step.tokens[put, j]
        context[active] = step.tokens[np.arange(active.size), step.emitted - 1]
        filled[active] += step.emitted
    return out


def sequence_probabilities(target: np.ndarray, length: int, start: int = 0) -> np.ndarray:
    """Exact probability of every continuation of ``start`` of ``length`` tokens: an array (V,) * length."""
    target = check_model("target", target)
    joint = target[start]
    for _ in range(int_at_least("length", length, 1) - 1):
        joint = joint[..., None] * target  # [..., a, b] = P(..., a) * P(b | a)
    return joint


def sequence_counts(sequences: np.ndarray, vocab: int) -> np.ndarray:
    """How often each continuation occurs: an array (V,) * length of counts, for the GoF test."""
    seqs = np.asarray(sequences, dtype=int)
    flat = np.ravel_multi_index(tuple(seqs.T), (vocab,) * seqs.shape[1])
    return np.bincount(flat, minlength=vocab ** seqs.shape[1]).reshape((vocab,) * seqs.shape[1])


def greedy_continuation(target: np.ndarray, length: int, start: int = 0) -> np.ndarray:
    """Plain greedy decoding with the target alone: the argmax chain after ``start``."""
    out, token = [], start
    for _ in range(int_at_least("length", length, 1)):
        token = int(np.argmax(target[token]))
        out.append(token)
    return np.array(out)
