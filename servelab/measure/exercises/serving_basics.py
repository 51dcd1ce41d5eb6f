"""Chapter 01's exercises: the decode roofline, a step cost fitted to vLLM, and the batch cap's trade."""

from __future__ import annotations

from typing import Any

import pandas as pd

from servelab.measure.batching.serving import batch_roofline
from servelab.measure.speculative.verification import Roofline
from servelab.sim.batching import continuous, poisson_arrivals, summarize
from servelab.sim.chunked_prefill.cost import CostModel

Cases = dict[str, tuple[tuple[Any, ...], Any]]

# Exercise 1: a 7B model in bfloat16 on an H100 SXM's 3.35 TB/s, a KV cache of 128 KiB per token
H100 = Roofline(weight_bytes=int(7e9 * 2), kv_bytes_per_context_token=128 * 1024, bandwidth_gb_s=3350.0)


def roofline_cases() -> Cases:
    """Exercise 1: the server's decode tokens/s bound at batch 1 (no KV) and at batch 32 (1,000 tokens each)."""
    return {"batch 1": ((1, 0), batch_roofline(H100, 1, 0)),
            "batch 32, 1,000 tokens each": ((32, 1000), batch_roofline(H100, 32, 1000))}


def fitted_cost(prefill: pd.DataFrame, scaling: pd.DataFrame, engine: str = "vllm") -> CostModel:
    """Exercise 2: a step cost from the shortest and longest prompt's TTFT (cost per prompt token) and the ITL at
    batch 1 and the largest batch (cost per decoding request; the rest of the batch-1 ITL is the fixed step)."""
    pre = prefill[prefill.engine == engine].sort_values("prompt_tokens")
    slope_s = (pre.ttft_ms.iloc[-1] - pre.ttft_ms.iloc[0]) / 1000 / (pre.prompt_tokens.iloc[-1]
                                                                      - pre.prompt_tokens.iloc[0])
    dec = scaling[scaling.engine == engine].sort_values("batch")
    itl_one, itl_top = 1 / dec.request_tok_s.iloc[0], 1 / dec.request_tok_s.iloc[-1]
    per_decode = max(0.0, (itl_top - itl_one) / (dec.batch.iloc[-1] - 1))
    return CostModel(step_s=float(max(1e-4, itl_one - per_decode)), prefill_token_s=float(max(0.0, slope_s)),
                     decode_s=float(per_decode), context_token_s=0.0)


def fit_cases(prefill: pd.DataFrame, scaling: pd.DataFrame) -> Cases:
    return {"vLLM": ((prefill, scaling), fitted_cost(prefill, scaling))}


def cap_point(rate: float, cap: int, cost: CostModel, slo: dict[str, float], seed: int,
              requests: int = 40, prompt_tokens: int = 200) -> dict[str, float]:
    """Exercise 3: p90 TTFT and p50 TPOT of continuous batching with `max_batch=cap` at `rate` requests/s."""
    arrivals = poisson_arrivals(rate, requests, prompt_tokens=prompt_tokens, output_tokens=(4, 40), seed=seed)
    summary = summarize(continuous(arrivals, cost, max_batch=cap), **slo)
    return {"ttft_p90_s": summary["ttft_p90_s"], "tpot_p50_s": summary["tpot_p50_s"]}


def cap_cases(cost: CostModel, slo: dict[str, float], seed: int) -> Cases:
    return {f"rate {rate:g}/s, cap {cap}": ((rate, cap), cap_point(rate, cap, cost, slo, seed))
            for rate in (2.0, 4.0, 8.0) for cap in (2, 4, 16)}
