"""Measuring KV sharing on a live engine: n samples of one prompt, blocks held vs the allocator's prediction."""

from __future__ import annotations

import pandas as pd

from servelab.engines.client import chat_response
from servelab.engines.metrics import Sampler
from servelab.engines.server import Server
from servelab.measure.workloads import long_prompt
from servelab.sim.paging.parallel_sampling import parallel_sampling_blocks


def measure_parallel_sampling(server: Server, n_values: list[int], *, num_blocks: int,
                              block_size: int, prompt_words: int, output_tokens: int,
                              seed: int = 0) -> pd.DataFrame:
    """For each n: peak KV blocks vLLM held while generating n samples, and what paging predicts.

    Each n gets a fresh prompt so nothing is already in the prefix cache. vLLM keeps one block
    aside (the "null block"), so its usage gauge is used / (num_blocks - 1).
    """
    rows = []
    for n in n_values:
        prompt = long_prompt(prompt_words, seed=10_000 + 100 * seed + n)
        with Sampler(server.url, ["vllm:kv_cache_usage_perc"], every_s=0.05) as sampler:
            response = chat_response(server, prompt, n=n, max_tokens=output_tokens, temperature=1.0, seed=seed,
                                     extra_body={"ignore_eos": True})
        prompt_tokens = response.usage.prompt_tokens
        details = response.usage.prompt_tokens_details
        predicted = parallel_sampling_blocks(prompt_tokens, output_tokens, n, block_size)
        rows.append({
            "block size": block_size,
            "n": n,
            "prompt tokens": prompt_tokens,
            "shared prompt tokens": (details.cached_tokens or 0) if details and n > 1 else 0,
            "measured blocks": round(sampler.frame()["vllm:kv_cache_usage_perc"].max() * (num_blocks - 1)),
            "predicted blocks": predicted["shared"],
            "blocks without sharing": predicted["unshared"],
        })
    frame = pd.DataFrame(rows)
    frame["KV tokens held"] = frame["measured blocks"] * block_size
    frame["memory saved by sharing (%)"] = 100 * (1 - frame["measured blocks"] / frame["blocks without sharing"])
    return frame
