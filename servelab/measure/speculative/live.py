"""Chapter 06 on a live engine: what one forward over n tokens costs, and what speculation gives.

Three measurements, all on a running server, all timed by the engine itself (its Prometheus
histograms), so the HTTP round trip does not enter:

* :func:`forward_costs`: one forward over n new tokens. A prompt of whole KV blocks is sent once,
  so the prefix cache holds it; the same prefix plus n new tokens then costs one forward over those
  n tokens with the prefix as context. vLLM's ``vllm:request_prefill_time_seconds`` is the time
  from scheduling that request to its first token: one step. Only the last position gets logits
  there, while a verification computes them at all k + 1 positions, so this slightly understates
  what verifying costs.
* :func:`answer_tasks`: greedy answers, one request at a time, with token ids, each position's
  candidates, the decode time (``vllm:request_decode_time_seconds``: first to last token) and, on
  a speculative server, the spec-decode counters of that answer.
* :func:`sweep`: repeated waves of b requests at once (b = 1, 2, 4, ...), each forced to the same
  length, and the median over the waves of the mean decode rate per request, with whether the
  engine had to queue or preempt any of them (``speculative_load.py`` prices and judges it).

Drafts cut from the model (:func:`draft_source`) and, without starting an engine, how every depth
of cut would have fared on the answers the engine gave (:func:`depth_sweep`): one transformers pass
per answer in the engine's venv keeps the output of every layer (``layer_agreement.py``), and
:func:`greedy_verifications` replays vLLM's greedy verification over which tokens a draft of that
depth would have proposed. Exact for greedy decoding; it ignores where vLLM cuts a draft at the
end of an answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from openai import OpenAI

from servelab.engines.client import Endpoint, chat_response, run_load
from servelab.engines.engine_side import script
from servelab.engines.metrics import Metrics, delta, scrape
from servelab.integers import int_at_least
from servelab.machine import engine_envs, models
from servelab.machine.profiles import Profile
from servelab.measure.chunked_prefill.streams import prompt_ids
from servelab.measure.setup.check import CANDIDATES, Answer, answer_from_choice
from servelab.measure.speculative.verification import ACCEPTED_PER_POS, DRAFTS, SpecDecodeCounts, spec_decode_counts
from servelab.sim.speculative.acceptance import iid_alpha

PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
QUEUE = "vllm:request_queue_time_seconds"


# ----------------------------------------------------------------------------- engine-timed measurements

def _histogram(metrics: Metrics, name: str) -> tuple[float, float]:
    return metrics.value(f"{name}_sum"), metrics.value(f"{name}_count")


def forward_costs(server: Endpoint, block_size: int, tokens: Sequence[int], *, repeats: int = 3,
                  prefix_blocks: int = 2, seed: int = 0) -> pd.DataFrame:
    """Engine time of one forward over n new tokens after a cached prefix of ``prefix_blocks`` blocks.

    One row per (n, repeat): ``seconds`` (the request's prefill time) and ``cached_tokens`` (should
    be the whole prefix; a row where it is not measured more than n tokens).
    """
    client = OpenAI(base_url=server.api_url, api_key="servelab", timeout=600, max_retries=0)
    prefix = prompt_ids(int_at_least("block_size", block_size, 1) * int_at_least("prefix_blocks", prefix_blocks, 1),
                        seed=seed)
    client.completions.create(model=server.served_model, prompt=prefix, max_tokens=1)  # now cached
    rows = []
    for rep in range(int_at_least("repeats", repeats, 1)):
        for n in tokens:
            extra = prompt_ids(int_at_least("tokens", n, 1), seed=seed + 1 + 1000 * rep + n)
            before = scrape(server.url)
            out = client.completions.create(model=server.served_model, prompt=prefix + extra, max_tokens=1)
            seconds, count = np.subtract(_histogram(scrape(server.url), PREFILL), _histogram(before, PREFILL))
            details = out.usage.prompt_tokens_details
            rows.append({"tokens": n, "repeat": rep, "seconds": seconds if count == 1 else np.nan,
                         "cached_tokens": details.cached_tokens if details else 0, "prefix_tokens": len(prefix)})
    return pd.DataFrame(rows)


def decode_seconds(before: Metrics, after: Metrics) -> tuple[float, float]:
    """(summed decode seconds, finished requests) between two scrapes: vLLM's own histogram, or for
    SGLang end-to-end minus first-token time."""
    if f"{DECODE}_sum" in after.samples:
        return tuple(np.subtract(_histogram(after, DECODE), _histogram(before, DECODE)))
    e2e, ttft = "sglang:e2e_request_latency_seconds", "sglang:time_to_first_token_seconds"
    seconds = delta(before, after, f"{e2e}_sum") - delta(before, after, f"{ttft}_sum")
    return seconds, delta(before, after, f"{e2e}_count")


def accepted(before: Metrics, after: Metrics) -> dict[str, float]:
    """What the engine counted between two scrapes: verifications ("drafts"), tokens per verification
    (bonus included) and, from vLLM, the draft acceptance rate and per-position survival. Empty
    without speculation; NaN rates when nothing was drafted."""
    if after.samples.get(f"{ACCEPTED_PER_POS}_total"):
        if delta(before, after, "vllm:spec_decode_num_drafts") == 0:
            return {"drafts": 0.0, "acceptance rate": np.nan, "tokens per verification": np.nan}
        counts = spec_decode_counts(before, after)
        return {"drafts": counts.drafts, "acceptance rate": counts.acceptance_rate,
                "tokens per verification": counts.mean_acceptance_length,
                **{f"survival {i}": s for i, s in enumerate(counts.survival())}}
    if "sglang:spec_verify_calls_total" in after.samples:
        calls = delta(before, after, "sglang:spec_verify_calls")
        generated = delta(before, after, "sglang:generation_tokens")
        return {"drafts": calls, "tokens per verification": generated / calls if calls else np.nan}
    return {}


@dataclass(frozen=True)
class TaskAnswers:
    table: pd.DataFrame  # per task: tokens generated, decode rate, the engine's counters for that answer
    answers: list[Answer]  # greedy answers with each position's candidates
    prompts: list[list[int]]  # the prompts' token ids, chat template applied (as the engine saw them)
    generated: list[list[int]]  # every generated id, the stop token included
    counts: SpecDecodeCounts | None  # vLLM's counters over the answers, repeats left out (None without speculation)


def warm_up(server: Endpoint, tasks: Mapping[str, str], task_tokens: int, sweep_prompts: Sequence[str],
            concurrency: int, sweep_tokens: int) -> None:
    """Untimed and unrecorded: the requests a round times, once, before the first round. Every task is
    answered as :func:`answer_tasks` asks it, then one wave of :func:`sweep` runs at ``concurrency`` (the
    sweep's smallest). The first requests a server answers pay for work done once (compiling, allocating,
    filling the prefix cache), which would otherwise fall on its first timed round alone."""
    for prompt in tasks.values():
        chat_response(server, prompt, max_tokens=int_at_least("task_tokens", task_tokens, 1), logprobs=True,
                      top_logprobs=CANDIDATES, extra_body={"return_token_ids": True})  # as answer_tasks asks
    wave(server, sweep_prompts, concurrency, sweep_tokens)


def answer_tasks(server: Endpoint, tasks: Mapping[str, str], max_tokens: int, *, repeats: int = 1) -> TaskAnswers:
    """Each task's greedy answer, one request at a time, timed and counted by the engine.

    With ``repeats`` > 1 every task is answered that many times in a row and its decode rate is the
    median of the repeats (greedy: the same tokens each time), and their spread (slowest / fastest
    repeat; 1 with one repeat) measures the timing noise; answers and counters are the first's.
    """
    rows, answers, prompts, generated, per_task = [], [], [], [], []
    for name, prompt in tasks.items():
        before = scrape(server.url)
        response = chat_response(server, prompt, max_tokens=max_tokens, logprobs=True, top_logprobs=CANDIDATES,
                                 extra_body={"return_token_ids": True}).model_dump()
        after = scrape(server.url)
        if after.samples.get(f"{ACCEPTED_PER_POS}_total") and delta(before, after, DRAFTS) > 0:
            per_task.append(spec_decode_counts(before, after))
        choice = response["choices"][0]
        ids = list(choice.get("token_ids") or choice.get("response_token_ids") or [])  # vLLM's or SGLang's key
        seconds, _ = decode_seconds(before, after)
        rates = [(len(ids) - 1) / seconds if seconds > 0 else np.nan]
        for _ in range(int_at_least("repeats", repeats, 1) - 1):
            again = scrape(server.url)
            chat_response(server, prompt, max_tokens=max_tokens)
            again_seconds, _ = decode_seconds(again, scrape(server.url))
            rates.append((len(ids) - 1) / again_seconds if again_seconds > 0 else np.nan)
        rows.append({"task": name, "tokens": len(ids), "decode tokens/s": float(np.nanmedian(rates)),
                     "repeats": len(rates), "slowest / fastest repeat": float(np.nanmax(rates) / np.nanmin(rates)),
                     **accepted(before, after)})
        answers.append(answer_from_choice(choice))
        prompts.append(list(response.get("prompt_token_ids") or []))
        generated.append(ids)
    counts = None
    if per_task:  # summed over the tasks' first answers
        per_pos = [float(a) for a in np.sum([c.accepted_per_pos for c in per_task], axis=0)]
        counts = SpecDecodeCounts(sum(c.drafts for c in per_task), sum(c.draft_tokens for c in per_task),
                                  sum(c.accepted for c in per_task), per_pos)
    return TaskAnswers(pd.DataFrame(rows), answers, prompts, generated, counts)


def predicted_speedup(tokens: float, drafts: float, accepted_tokens: float, k: int, c: float,
                      verify_cost: float) -> float:
    """The theory's walltime factor for one answer of ``tokens`` tokens, from what the engine counted.

    Without speculation the answer takes ``tokens - 1`` decode steps (the first token comes with the
    prompt). With it, each of the ``drafts`` verifications costs ``k c + verify_cost`` steps and
    yields its accepted tokens plus one; the tokens left over came from steps without a draft (the
    n-gram method has none when nothing matches), one step each. With a draft every step, this is
    the papers' ``E / (k c + v)`` with the measured tokens per verification in place of E. The last
    verification of an answer may count tokens past its end (accepted, then cut at the stop token
    or at max_tokens), so up to k + 1 tokens too many are tolerated.
    """
    plain_steps = tokens - 1
    undrafted = plain_steps - drafts - accepted_tokens
    if plain_steps <= 0 or drafts < 0 or undrafted < -(k + 1):
        raise ValueError(f"inconsistent counts: {tokens} tokens, {drafts} drafts, {accepted_tokens} accepted")
    return plain_steps / (drafts * (k * c + verify_cost) + max(undrafted, 0.0))


def fitted_cost(tokens: float, drafts: float, accepted_tokens: float, k: int, verify_cost: float,
                speedup: float) -> float:
    """The draft cost c that makes :func:`predicted_speedup` equal a measured speedup (NaN without drafts)."""
    if drafts <= 0 or speedup <= 0:
        return float("nan")
    undrafted = max(tokens - 1 - drafts - accepted_tokens, 0.0)
    return ((tokens - 1) / speedup - undrafted - drafts * verify_cost) / (drafts * k)


def _queueing(before: Metrics, after: Metrics) -> dict[str, float]:
    """vLLM's preemptions and mean queue time per request between two scrapes (empty from SGLang)."""
    if "vllm:num_preemptions_total" not in after.samples:
        return {}
    queued = np.subtract(_histogram(after, QUEUE), _histogram(before, QUEUE))
    return {"preemptions": delta(before, after, "vllm:num_preemptions_total"),
            "queue seconds per request": queued[0] / queued[1] if queued[1] else np.nan}


def wave(server: Endpoint, prompts: Sequence[str], b: int, max_tokens: int) -> None:
    """One wave of :func:`sweep`: ``b`` requests at once, prompts taken in turn, each exactly ``max_tokens`` long."""
    b = int_at_least("concurrency", b, 1)
    run_load(server, [prompts[i % len(prompts)] for i in range(b)], concurrency=b, max_tokens=max_tokens,
             progress=False, extra_body={"min_tokens": max_tokens})


def sweep(server: Endpoint, prompts: Sequence[str], concurrency: Sequence[int], max_tokens: int, *,
          repeats: int = 3) -> pd.DataFrame:
    """``repeats`` waves of b requests per b (prompts taken in turn), each exactly ``max_tokens`` long:
    the median over the waves of the mean decode rate per request (tokens after the first / engine
    decode time), the counters summed over the waves and, from vLLM, the requests it preempted and
    the mean time a request waited to be scheduled (``vllm:request_queue_time_seconds``)."""
    rows = []
    for b in concurrency:
        rates, first = [], scrape(server.url)
        for _ in range(int_at_least("repeats", repeats, 1)):
            before = scrape(server.url)
            wave(server, prompts, b, max_tokens)
            seconds, finished = decode_seconds(before, scrape(server.url))
            rates.append((max_tokens - 1) * finished / seconds)
        last = scrape(server.url)
        rows.append({"concurrency": b, "requests": b, "waves": len(rates), "tokens per request": max_tokens,
                     "decode tokens/s per request": float(np.median(rates)),
                     "slowest / fastest wave": max(rates) / min(rates), **accepted(first, last),
                     **_queueing(first, last)})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- drafts of every depth, offline

def greedy_verifications(matches: str, k: int) -> list[int]:
    """Accepted draft tokens of each verification of one greedy answer, replayed.

    ``matches[j]`` is "1" where the draft's greedy choice after the answer's first j tokens is
    answer token j. Token 0 comes from the prompt's forward; from then on every verification takes
    the k drafted tokens up to the first mismatch, then one token of the target's, and the next
    draft starts after it. A last verification that runs into the answer's end before a mismatch
    or its k-th token is left out: what the draft would have proposed after the end is unknown.
    """
    k = int_at_least("k", k, 1)
    if set(matches) - {"0", "1"}:
        raise ValueError(f"matches must be a string of 0 and 1, got {matches[:20]!r}...")
    out, t = [], 1
    while t < len(matches):
        a = 0
        while a < k and t + a < len(matches) and matches[t + a] == "1":
            a += 1
        if a < k and t + a == len(matches):
            break
        out.append(a)
        t += a + 1
    return out


def replay_counts(match_strings: Sequence[str], k: int) -> SpecDecodeCounts:
    """vLLM's four counters as they would read after these answers, from :func:`greedy_verifications`."""
    lengths = np.array([a for m in match_strings for a in greedy_verifications(m, k)])
    if lengths.size == 0:
        raise ValueError("no verification to replay: every answer is a single token")
    return SpecDecodeCounts(float(lengths.size), float(k * lengths.size), float(lengths.sum()),
                            [float((lengths > i).sum()) for i in range(k)])


def counts_agree(engine: SpecDecodeCounts, replayed: SpecDecodeCounts, answers: int) -> bool:
    """Whether the engine's verifications and its accepted count at every draft position are the
    replayed ones, give or take one per answer (the replay leaves out an answer's last verification
    when the answer's end cut it, the engine counts it; either may count tokens past the end)."""
    if engine.k != replayed.k:
        return False
    diffs = [engine.drafts - replayed.drafts, *np.subtract(engine.accepted_per_pos, replayed.accepted_per_pos)]
    return bool(all(abs(d) <= int_at_least("answers", answers, 1) for d in diffs))


@dataclass(frozen=True)
class DepthSweep:
    layers: int
    target_agrees: list[bool]  # the full model's greedy choice reproduces each answer (teacher forced)
    matches: dict[int, list[str]]  # depth -> per answer, "1" where that draft would propose the answer's token

    def table(self, k: int) -> pd.DataFrame:
        """Per depth: the share of positions where the draft agrees, and the replayed counters."""
        rows = []
        for depth, strings in sorted(self.matches.items()):
            counts = replay_counts(strings, k)
            joined = "".join(strings)
            rows.append({"draft layers": depth, "agreement": joined.count("1") / len(joined),
                         "acceptance rate": counts.acceptance_rate,
                         "tokens per verification": counts.mean_acceptance_length,
                         "alpha (i.i.d. fit)": iid_alpha(counts.accepted_per_pos, counts.drafts)})
        return pd.DataFrame(rows)


def depth_sweep(profile: Profile, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]],
                dtype: str | None = None) -> DepthSweep:
    """Which tokens of these answers a draft of each depth 1..N would have proposed (one pass per answer)."""
    if len(prompts) != len(answers) or not answers:
        raise ValueError(f"need one prompt per answer and at least one, got {len(prompts)} and {len(answers)}")
    python = engine_envs.get(profile.vllm_env).require().python
    source = models.resolve(profile.model).source
    request = {"sequences": [{"prompt": list(p), "answer": list(a)} for p, a in zip(prompts, answers, strict=True)],
               "dtype": dtype or profile.dtype}
    report = engine_envs.run_script(python, script("layer_agreement.py"), source, stdin=json.dumps(request))
    return DepthSweep(report["layers"], report["target_agrees"], {int(d): m for d, m in report["matches"].items()})
