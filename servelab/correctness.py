"""Do two engines and plain transformers produce the same greedy tokens for the same prompts?"""

from __future__ import annotations

import pandas as pd

from servelab import envs, models
from servelab.client import Endpoint, chat
from servelab.profiles import Profile


def greedy_answers(server: Endpoint, questions: list[str], max_tokens: int = 32) -> list[str]:
    return [chat(server, q, max_tokens=max_tokens, temperature=0.0) for q in questions]


def reference_answers(profile: Profile, questions: list[str], max_tokens: int = 32) -> list[str]:
    """Greedy answers from transformers (fp32, CPU) for the profile's model, run in the vLLM venv."""
    python = envs.get(profile.vllm_env).require().python
    source = models.resolve(profile.model).source
    return [r["text"] for r in models.reference_completions(python, source, questions, max_tokens)]


def agreement(questions: list[str], answers: dict[str, list[str]]) -> pd.DataFrame:
    """One row per question, one column per source, and whether all sources said the same thing."""
    frame = pd.DataFrame({"question": questions, **answers})
    frame["identical"] = frame[list(answers)].nunique(axis=1) == 1
    return frame
