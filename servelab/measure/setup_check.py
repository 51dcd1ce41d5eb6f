"""Chapter 00: do both engines and plain transformers give the same greedy tokens; what the engines accept.

Helpers for the set-up check: greedy answers from a live server, the transformers reference, the
agreement table, the SGLang frontend programs and the articles' `sgl.Runtime` call run in SGLang's
venv, and the table of launch commands judged by each engine's own parser.
"""

from __future__ import annotations

import shlex

import pandas as pd

from servelab.engines import flags
from servelab.engines.client import Endpoint, chat
from servelab.engines.engine_side import script
from servelab.machine import engine_envs, models
from servelab.machine.profiles import Profile

PROGRAMS_START = "# --- programs (notebook 00 prints this part) ---"
PROGRAMS_END = "# --- end of programs ---"


def greedy_answers(server: Endpoint, questions: list[str], max_tokens: int = 32) -> list[str]:
    return [chat(server, q, max_tokens=max_tokens, temperature=0.0) for q in questions]


def reference_answers(profile: Profile, questions: list[str], max_tokens: int = 32) -> list[str]:
    """Greedy answers from transformers (fp32, CPU) for the profile's model, run in the vLLM venv."""
    python = engine_envs.get(profile.vllm_env).require().python
    source = models.resolve(profile.model).source
    return [r["text"] for r in models.reference_completions(python, source, questions, max_tokens)]


def agreement(questions: list[str], answers: dict[str, list[str]]) -> pd.DataFrame:
    """One row per question, one column per source, and whether all sources said the same thing."""
    frame = pd.DataFrame({"question": questions, **answers})
    frame["identical"] = frame[list(answers)].nunique(axis=1) == 1
    return frame


def frontend_programs_source() -> str:
    """The SGLang frontend programs of `sgl_agent.py`, as the reader should see them."""
    text = script("sgl_agent.py").read_text()
    return text.split(PROGRAMS_START)[1].split(PROGRAMS_END)[0].strip()


def run_frontend_programs(profile: Profile, server_url: str) -> dict[str, str]:
    """Run the frontend programs against a live SGLang server, inside SGLang's venv; each generated variable."""
    python = engine_envs.get(profile.sglang_env).require().python
    return engine_envs.run_script(python, script("sgl_agent.py"), server_url)


def articles_speculative_runtime(profile: Profile) -> dict[str, object]:
    """What the articles' speculative `sgl.Runtime(...)` call does today, with the profile's model."""
    python = engine_envs.get(profile.sglang_env).require().python
    return engine_envs.run_script(python, script("sgl_runtime_speculative.py"), models.resolve(profile.model).source)


def launch_commands_table() -> pd.DataFrame:
    """Every launch command the book shows, judged by the installed engines' own parsers.

    servelab's own command for each profile and engine, and each article command next to its
    corrected form; one row each with the verdict and the engine's own words.
    """
    rows = [{"command": f"servelab, profile {name}, {kind}", "engine": engine, "argv": argv}
            for (name, engine, kind), argv in flags.profile_commands().items()]
    for entry in flags.article_commands():
        rows += [{"command": f"article: {entry['id']}", "engine": entry["engine"], "argv": entry["command"]},
                 {"command": f"corrected: {entry['id']}", "engine": entry["engine"], "argv": entry["corrected"]}]
    verdicts = flags.check_commands([(row["engine"], row["argv"]) for row in rows])
    return pd.DataFrame([{"command": row["command"], "checked with": v.checked_with, "accepted": v.ok,
                          "the engine says": v.error or " | ".join(v.warnings), "checked": shlex.join(v.argv)}
                         for row, v in zip(rows, verdicts, strict=True)])
