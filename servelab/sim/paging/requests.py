"""The workload: seeded requests with ShareGPT-like, log-normal lengths and Poisson arrivals."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from servelab.integers import int_at_least

SHAREGPT_MEAN_PROMPT = 161.31  # paper Fig. 11a
SHAREGPT_MEAN_OUTPUT = 337.99  # paper Fig. 11a
DEFAULT_MAX_LEN = 2048  # OPT's context length; "Orca (Max)" reserves this much (paper §6.1)
DEFAULT_CAPACITY = 15_744  # 123 * 128: the paper's 15.7K slots (Table 1), divisible by every block size
DEFAULT_SIGMA = 1.0  # spread of log(length): our choice, the paper gives only the means
DEFAULT_RATE = 1.0  # requests per step: far above what any policy serves, so memory is the bottleneck
DEFAULT_POLICIES = ("max_len", "exact", "paged:1", "paged:8", "paged:16", "paged:32", "paged:128")


def sample_requests(
    n: int,
    seed: int,
    *,
    rate: float = DEFAULT_RATE,
    max_len: int = DEFAULT_MAX_LEN,
    prompt_mean: float = SHAREGPT_MEAN_PROMPT,
    output_mean: float = SHAREGPT_MEAN_OUTPUT,
    prompt_sigma: float = DEFAULT_SIGMA,
    output_sigma: float = DEFAULT_SIGMA,
) -> pd.DataFrame:
    """A seeded workload: one row per request with ``req_id, arrival, prompt_len, output_len``.

    * Arrivals are a Poisson process of ``rate`` requests per step (exponential gaps, rounded down to
      whole steps; the first request arrives at step 0), as in the paper's evaluation (§6.1).
    * Prompt and output lengths are log-normal, the usual heavy-tailed fit for chat traces: most
      requests are short, a few are very long. ``mu`` is set so the *unclipped* mean equals
      ``prompt_mean``/``output_mean`` (default: the ShareGPT means of the paper's Fig. 11, 161.31 and
      337.99 tokens); ``sigma`` (spread of the log, default 1.0) is our choice, not the paper's.
    * Lengths are rounded and clipped so every request fits the context: the prompt to
      ``[1, max_len - 1]``, the output to ``[1, max_len - prompt]``. Clipping trims the tail a little,
      so the sample means come out slightly below the targets.
    """
    n = int_at_least("n", n, 1, "number of requests")
    seed = int_at_least("seed", seed, 0, "a non-negative integer seed")
    max_len = int_at_least("max_len", max_len, 2, "context length in tokens")
    for name, value in (("rate", rate), ("prompt_mean", prompt_mean), ("output_mean", output_mean)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    for name, value in (("prompt_sigma", prompt_sigma), ("output_sigma", output_sigma)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, n)
    gaps[0] = 0.0
    arrival = np.floor(np.cumsum(gaps)).astype(np.int64)

    def lognormal(mean: float, sigma: float) -> np.ndarray:
        return np.rint(rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, n))

    prompt = np.clip(lognormal(prompt_mean, prompt_sigma), 1, max_len - 1).astype(np.int64)
    output = np.clip(lognormal(output_mean, output_sigma), 1, max_len - prompt).astype(np.int64)
    return pd.DataFrame(
        {"req_id": np.arange(n), "arrival": arrival, "prompt_len": prompt, "output_len": output}
    )

