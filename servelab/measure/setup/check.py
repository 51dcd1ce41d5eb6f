"""Chapter 00: do the engines (and transformers) give the same greedy tokens; what the engines accept.

Greedy answers with token ids and top candidates, the fp32 transformers reference, the token-level
comparison and its verdict, one request's decode speed, SGLang's frontend programs and the articles'
`sgl.Runtime` call (run in SGLang's venv), and launch commands judged by each engine's own parser."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from servelab.engines import flags
from servelab.engines.client import Endpoint, chat_response, run_load
from servelab.engines.engine_side import script
from servelab.engines.server import Server
from servelab.machine import engine_envs, models
from servelab.machine.model_shapes import dtype_bytes
from servelab.machine.profiles import Profile

PROGRAMS_START = "# --- programs (notebook 00 prints this part) ---"
PROGRAMS_END = "# --- end of programs ---"

# Explicit mantissa bits of each dtype an engine may run in: a number is rounded to a relative
# step of 2**-bits, so two candidates closer than that can swap places between two kernels.
MANTISSA_BITS = {"float32": 23, "float16": 10, "bfloat16": 7}
# Where the book claims the same greedy tokens in every implementation: measured, not a property of the
# dtype (chapter 00 shows the smallest margins of its questions beside float32's rounding step).
EXACT_DTYPES = frozenset({"float32"})
CANDIDATES = 5  # top alternatives each engine reports per generated token
# A divergence counts as rounding only between each side's best two candidates, this close (nats) on both
# sides: a few times |z| x eps for logits of magnitude |z| ~ 10-30 and bfloat16's eps = 2**-7 (rounding_step).
NEAR_TIE_RANK, NEAR_TIE_NATS = 2, 0.5
# The dtype the chapter compares a profile's dtype with: bfloat16 beside float32, float32 beside the 16-bit
# dtypes. Not float16 beside bfloat16: Qwen2.5 was trained in bfloat16, and float16's smaller range can overflow
# its activations (`dtype_comparison` runs the 16-bit profiles' comparison on their small draft model, whose
# float32 weights fit every GPU profile).
OTHER_DTYPE = {"float32": "bfloat16", "bfloat16": "float32", "float16": "float32"}


def dtype_comparison(profile: Profile) -> tuple[str | None, str, str]:
    """(model, profile's dtype, the other dtype) chapter 00 compares. model None: the profile's own model, whose
    run in the profile's dtype is the baseline. A 16-bit profile's model would not fit in float32, so there both
    sides run its draft model (which the profile names for speculative decoding)."""
    other = other_dtype(profile.dtype)
    if dtype_bytes(other) <= dtype_bytes(profile.dtype):
        return None, profile.dtype, other
    if not profile.draft_model:
        raise ValueError(f"profile {profile.name!r} runs {profile.dtype} and names no draft_model to compare "
                         f"{other} on")
    return profile.draft_model, profile.dtype, other


def _check_dtype(dtype: str) -> str:
    if dtype not in MANTISSA_BITS:
        raise ValueError(f"unknown dtype {dtype!r}; accepted: {', '.join(MANTISSA_BITS)}")
    return dtype


def rounding_step(dtype: str) -> float:
    """The relative rounding step (machine epsilon) of `dtype`: 2**-mantissa bits."""
    return 2.0 ** -MANTISSA_BITS[_check_dtype(dtype)]


def other_dtype(dtype: str) -> str:
    """The dtype compared with `dtype` in chapter 00 (`OTHER_DTYPE`)."""
    return OTHER_DTYPE[_check_dtype(dtype)]


def vllm_omp_threads(log: str) -> int:
    """How many OpenMP threads vLLM's CPU worker runs: the core ids its log lists ("core ids=[0, 1]")."""
    found = re.findall(r"core ids=\[([\d, ]*)\]", log)
    if not found:
        raise ValueError("vLLM's log lists no 'core ids=[...]' (only its CPU build binds OpenMP threads)")
    return len([c for c in found[-1].split(",") if c.strip()])


def exact_expected(dtype: str) -> bool:
    """Whether greedy tokens are expected to agree exactly between implementations running in `dtype`."""
    return _check_dtype(dtype) in EXACT_DTYPES


@dataclass(frozen=True)
class Answer:
    """One greedy answer: its text and token ids, and (from an engine) each position's candidates.

    `token_ids` leave out the stop token (as transformers' stripped output does); `tokens` and
    `candidates` keep it, so a divergence where one side stopped can still be judged.
    """

    text: str
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...] = ()
    candidates: tuple[tuple[tuple[str, float], ...], ...] = ()  # per position: (token, logprob), best first


def answer_from_choice(choice: dict) -> Answer:
    """An `Answer` from one chat-completion choice asked with `logprobs` and `return_token_ids`.

    vLLM puts the generated ids in `token_ids`, SGLang in `response_token_ids`; both include the
    stop token when `finish_reason` is "stop".
    """
    ids = choice.get("token_ids") or choice.get("response_token_ids")
    if ids is None:
        raise ValueError(f"the engine returned no token ids (keys: {', '.join(choice)}); "
                         "ask with extra_body={'return_token_ids': True}")
    content = (choice.get("logprobs") or {}).get("content") or []
    ids = list(ids)[:-1] if choice.get("finish_reason") == "stop" and ids else list(ids)
    return Answer(
        text=(choice.get("message") or {}).get("content") or "",
        token_ids=tuple(ids),
        tokens=tuple(c["token"] for c in content),
        candidates=tuple(tuple((t["token"], t["logprob"]) for t in c.get("top_logprobs") or []) for c in content),
    )


def greedy_tokens(server: Endpoint, questions: Sequence[str], max_tokens: int = 32) -> list[Answer]:
    """Greedy answers to `questions`, with token ids and the top `CANDIDATES` at every position."""
    return [answer_from_choice(chat_response(server, q, max_tokens=max_tokens, temperature=0.0, logprobs=True,
                                             top_logprobs=CANDIDATES,
                                             extra_body={"return_token_ids": True}).choices[0].model_dump())
            for q in questions]


def greedy_answers(server: Endpoint, questions: list[str], max_tokens: int = 32) -> list[str]:
    return [a.text for a in greedy_tokens(server, questions, max_tokens)]  # the texts of greedy_tokens


def reference_answers(profile: Profile, questions: list[str], max_tokens: int = 32) -> list[str]:  # fp32, CPU
    return [a.text for a in _reference(profile, questions, max_tokens)]


def _reference(profile: Profile, questions: list[str], max_tokens: int) -> list[Answer]:
    python = engine_envs.get(profile.vllm_env).require().python
    source = models.resolve(profile.model).source
    return [Answer(r["text"], tuple(r["token_ids"]))
            for r in models.reference_completions(python, source, questions, max_tokens)]


def references(profile: Profile, questions: list[str], max_tokens: int = 32) -> dict[str, list[Answer]]:
    """{"transformers": fp32 reference answers} where the profile's dtype makes exact agreement meaningful, else {}.

    The reference runs in float32 on the CPU: set beside engines running bfloat16 it could only
    show rounding differences, so it runs only for profiles whose dtype is exact.
    """
    return {"transformers": _reference(profile, questions, max_tokens)} if exact_expected(profile.dtype) else {}


def agreement(questions: list[str], answers: dict[str, list[str]]) -> pd.DataFrame:
    """One row per question, one column per source's text, and whether all texts are the same."""
    frame = pd.DataFrame({"question": questions, **answers})
    frame["identical"] = frame[list(answers)].nunique(axis=1) == 1
    return frame


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (a prefix ends one), or None if they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _at(answer: Answer, position: int) -> tuple[str | None, dict[str, float]]:
    if position >= len(answer.tokens) or position >= len(answer.candidates):
        return None, {}
    return answer.tokens[position], dict(answer.candidates[position])


def _label(answer: Answer, position: int) -> str:  # the token at `position`: its text, else its id, else the end
    if position < len(answer.tokens):
        return repr(answer.tokens[position])
    return f"id {answer.token_ids[position]}" if position < len(answer.token_ids) else "(end)"


def _rank_and_margin(answer: Answer, position: int, token: str | None) -> tuple[int, float] | None:
    """`token`'s rank (1 = chosen) among `answer`'s candidates at `position`, and its gap to the chosen one."""
    chosen, cands = _at(answer, position)
    if token is None or chosen not in cands or token not in cands:
        return None
    return list(cands).index(token) + 1, cands[chosen] - cands[token]


def near_tie(a: Answer, b: Answer, position: int) -> bool:
    """Whether, at `position`, each side's token is within the other's best `NEAR_TIE_RANK` candidates and
    within `NEAR_TIE_NATS` of the other's choice; False where a side has no candidates there (unjudgeable)."""
    seen = (_rank_and_margin(a, position, _at(b, position)[0]), _rank_and_margin(b, position, _at(a, position)[0]))
    return all(s is not None and s[0] <= NEAR_TIE_RANK and s[1] <= NEAR_TIE_NATS for s in seen)


@dataclass(frozen=True)
class Comparison:
    """Every source's greedy tokens compared with the first source's, question by question."""

    table: pd.DataFrame  # one row per (question, compared source)
    exact: bool  # whether identical tokens are claimed

    @property
    def rates(self) -> pd.Series:
        """Per compared source: the share of questions answered with exactly the baseline's tokens."""
        return self.table.groupby("compared", sort=False)["same tokens"].mean()

    @property
    def holds(self) -> bool:
        """Identical tokens everywhere where exactness is claimed; elsewhere every divergence a near tie
        (a divergence that cannot be judged, without candidates, fails)."""
        diverged = self.table[~self.table["same tokens"]]
        return bool((not self.exact or diverged.empty) and diverged["near tie"].astype(bool).all())


def dtype_answers(profile: Profile, launches: Mapping[str, Any], questions: Sequence[str],
                  profile_answers: list[Answer]) -> dict[str, list[Answer]]:
    """The two sides of chapter 00's dtype comparison, baseline first: the profile's own vLLM answers and its
    "other dtype" server's, or (a 16-bit profile, see `dtype_comparison`) its "dtype baseline" and "other dtype"
    servers' answers, both on the draft model. `launches`: the chapter's declared servers by name."""
    model, base, other = dtype_comparison(profile)
    out = {} if model else {f"vLLM, {base} (profile)": profile_answers}
    for name, dtype in (("dtype baseline", base), ("other dtype", other)):
        if name == "dtype baseline" and not model:
            continue
        with launches[name].server(profile) as server:
            out[f"vLLM, {model + ', ' if model else ''}{dtype}"] = greedy_tokens(server, questions)
    return out


def compare(questions: Sequence[str], answers: dict[str, list[Answer]], *, exact: bool) -> Comparison:
    """Compare every source with the first one (the baseline), token by token. Per question and source:
    same tokens?, the first position where they differ, the two tokens there, the baseline's margin
    (nats) between its token and the other's (when among its candidates), and whether it is a near tie."""
    if len(answers) < 2:
        raise ValueError(f"compare needs at least two sources, got {len(answers)}: {', '.join(answers) or 'none'}")
    for name, given in answers.items():
        if len(given) != len(questions):
            raise ValueError(f"{name} has {len(given)} answers for {len(questions)} questions")
    (base_name, base), *others = answers.items()
    rows = []
    for name, given in others:
        for question, a, b in zip(questions, base, given, strict=True):
            position = first_divergence(a.token_ids, b.token_ids)
            row = {"question": question, "compared": f"{name} vs {base_name}", "same tokens": position is None,
                   "first divergence": position, "tokens there": None, "margin (nats)": None, "near tie": None}
            if position is not None:
                (token_a, cands_a), (token_b, _) = _at(a, position), _at(b, position)
                row["tokens there"] = f"{_label(a, position)} / {_label(b, position)}"
                if token_a in cands_a and token_b in cands_a:
                    row["margin (nats)"] = cands_a[token_a] - cands_a[token_b]
                row["near tie"] = near_tie(a, b, position)
            rows.append(row)
    table = pd.DataFrame(rows).astype({"first divergence": "Int64"})
    return Comparison(table=table, exact=exact)


def smallest_margins(answers: list[Answer]) -> list[float | None]:
    """Per answer: the smallest gap (nats) between the chosen token and the runner-up over its positions."""
    out: list[float | None] = []
    for answer in answers:
        gaps = [c[0][1] - c[1][1] for c in answer.candidates if len(c) >= 2]
        out.append(min(gaps) if gaps else None)
    return out


def what_ran(label: str, server: Server, max_tokens: int = 128) -> dict[str, object]:
    """A live server's version, start time and peak host memory (the sum of its processes' peak resident
    sets; no GPU memory), and one request of `max_tokens` tokens
    (`ignore_eos`) with nothing else running: its time to first token and decode rate."""
    one = run_load(server, ["Tell me about the history of the bicycle."], max_tokens=max_tokens, progress=False,
                   extra_body={"ignore_eos": True}).iloc[0]
    return {"engine": label, "version": server.version(), "start (s)": server.started_s,
            "peak host RSS, sum over processes (GiB)": server.peak_rss_gib(), "TTFT (s)": float(one.ttft_s),
            "decode (tokens/s)": float(one.decode_tokens_per_s)}


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
        label = f"article ({entry['source']})" if "source" in entry else "article"
        rows += [{"command": f"{label}: {entry['id']}", "engine": entry["engine"], "argv": entry["command"]},
                 {"command": f"corrected: {entry['id']}", "engine": entry["engine"], "argv": entry["corrected"]}]
    verdicts = flags.check_commands([(row["engine"], row["argv"]) for row in rows])
    return pd.DataFrame([{"command": row["command"], "checked with": v.checked_with, "accepted": v.ok,
                          "the engine says": v.error or " | ".join(v.warnings), "checked": shlex.join(v.argv)}
                         for row, v in zip(rows, verdicts, strict=True)])


def article_commands_text(launch: pd.DataFrame) -> str:
    """The articles' commands and their corrected forms from `launch_commands_table`, as one would type them."""
    rows = launch[launch.command.str.startswith(("article", "corrected"))]
    return "\n\n".join(f"# {r.command} -> {'accepted' if r.accepted else 'rejected'}\n{r.checked}"
                       for r in rows.itertuples())


def answers_table(questions: Sequence[str], answers: dict[str, list[Answer]]) -> pd.DataFrame:
    """One row per question: each source's text, and the first source's smallest margin over its runner-up."""
    (first, given), *_ = answers.items()
    return pd.DataFrame({"question": list(questions), **{name: [a.text for a in v] for name, v in answers.items()},
                         f"smallest margin, {first} (nats)": smallest_margins(given)})
