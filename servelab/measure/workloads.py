"""Workloads: the prompts the chapters send, deterministic for a seed.

Engines report exact token counts in each response's usage, so prompts here only need to be
roughly the right length; the measurements use the counts the engine reports.
"""

from __future__ import annotations

import random

# Short, common English words: each is about one token for the Llama/SmolLM2/Qwen tokenizers.
_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work number night "
    "point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law "
    "car city name team minute idea kid body back parent face level office door health person art "
    "war history party result change morning reason research "
).split()

# Fixed questions with short factual answers, for comparing engines token for token.
QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "What is 12 times 12?",
    "Which planet is known as the Red Planet?",
    "Translate 'good morning' into Spanish.",
    "Write one sentence about the ocean.",
)


def filler(words: int, seed: int = 0) -> str:
    """About `words` tokens of seeded word salad: stands in for a document or chat history."""
    if words < 0:
        raise ValueError(f"words must be >= 0, got {words}")
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def long_prompt(words: int, seed: int = 0, task: str = "Continue the list of words.") -> str:
    """A prompt of about `words` filler tokens followed by a task; distinct seeds share no prefix."""
    return f"[{seed}] {filler(words, seed)}\n\n{task}"
