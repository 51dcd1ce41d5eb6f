"""Measuring KV sharing on a live engine: n samples of one prompt, blocks held vs the allocator's prediction."""

from __future__ import annotations

import httpx
import pandas as pd

from servelab.engines.client import chat_response
from servelab.engines.metrics import Sampler
from servelab.engines.server import Server
from servelab.measure.workloads import long_prompt
from servelab.sim.paging.parallel_sampling import parallel_sampling_blocks

SEED_TRIES = 5  # prompts with other seeds to try when no word count gives the exact token count


def count_tokens(server: Server, prompt: str) -> int:
    """Tokens the chat prompt `prompt` becomes on `server` (vLLM's /tokenize, with the chat template)."""
    response = httpx.post(f"{server.url}/tokenize", timeout=30, json={
        "model": server.served_model, "messages": [{"role": "user", "content": prompt}]})
    response.raise_for_status()
    return int(response.json()["count"])


def prompt_with_tokens(server: Server, tokens: int, seed: int = 0) -> str:
    """A `long_prompt` that is exactly `tokens` tokens long on `server` (chat template included)."""
    for attempt in range(SEED_TRIES):
        prompt_seed = seed + 1000 * attempt
        overhead = count_tokens(server, long_prompt(0, prompt_seed))
        words = max(0, tokens - overhead)
        seen: dict[int, int] = {}
        while words not in seen and words >= 0:
            seen[words] = got = count_tokens(server, long_prompt(words, prompt_seed))
            if got == tokens:
                return long_prompt(words, prompt_seed)
            per_word = max(1.0, (got - overhead) / max(words, 1))  # most words are one token, some two
            words += round((tokens - got) / per_word) or (1 if got < tokens else -1)
    raise ValueError(f"no prompt of exactly {tokens} tokens found in {SEED_TRIES} seeds; try a length one "
                     "token longer or shorter")


def measure_parallel_sampling(server: Server, n_values: list[int], *, num_blocks: int,
                              block_size: int, prompt_tokens: int, output_tokens: int,
                              seed: int = 0) -> pd.DataFrame:
    """For each n: peak KV blocks vLLM held while generating n samples, and what paging predicts.

    Each n gets a fresh prompt of exactly `prompt_tokens` tokens, so nothing is already in the prefix
    cache. vLLM keeps one block aside (the "null block"), so its usage gauge is used / (num_blocks - 1).
    `output_tokens` must be at least 2 (one generated token is never stored).
    """
    if output_tokens < 2:
        raise ValueError(f"output_tokens must be >= 2 (the last token is never stored), got {output_tokens!r}")
    rows = []
    for n in n_values:
        # A request holds blocks while it runs, so a peak of 0 means the gauge was not published while it ran
        # (seen once, on a server's first request under load): send it again, with a fresh prompt, up to twice.
        for attempt in range(3):
            prompt = prompt_with_tokens(server, prompt_tokens, seed=10_000 + 100 * seed + n + 1_000_000 * attempt)
            with Sampler(server.url, ["vllm:kv_cache_usage_perc"], every_s=0.05) as sampler:
                response = chat_response(server, prompt, n=n, max_tokens=output_tokens, temperature=1.0, seed=seed,
                                         extra_body={"ignore_eos": True})
            peak = sampler.frame()["vllm:kv_cache_usage_perc"].max()
            if peak > 0:
                break
        else:
            raise RuntimeError(f"vLLM's vllm:kv_cache_usage_perc stayed 0 while {n} samples ran, three times")
        got = response.usage.prompt_tokens
        if got != prompt_tokens:
            raise RuntimeError(f"/tokenize counted {prompt_tokens} tokens but the chat request used {got}")
        details = response.usage.prompt_tokens_details
        # An engine stores the KV of the prompt and of every generated token but the last, which is
        # sampled and returned, never fed back: each sample holds prompt + output - 1 tokens at the end.
        predicted = parallel_sampling_blocks(got, output_tokens - 1, n, block_size)
        rows.append({
            "block size": block_size,
            "n": n,
            "prompt tokens": got,
            "shared prompt tokens": (details.cached_tokens or 0) if details and n > 1 else 0,
            "measured blocks": round(peak * (num_blocks - 1)),
            "predicted blocks": predicted["shared"],
            "blocks without sharing": predicted["unshared"],
        })
    frame = pd.DataFrame(rows)
    frame["KV tokens held"] = frame["measured blocks"] * block_size
    frame["memory saved by sharing (%)"] = 100 * (1 - frame["measured blocks"] / frame["blocks without sharing"])
    return frame
