"""What a run of either scheduler gives a user: latency percentiles, throughput and goodput."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servelab.sim.batching.schedule import Served


def summarize(served: Sequence[Served], *, ttft_slo_s: float, tpot_slo_s: float) -> dict[str, float]:
    """Median and 90th-percentile TTFT and TPOT, output tokens per second over the run (first arrival to
    last token), and *goodput*: requests per second that met both latency objectives."""
    if not served:
        raise ValueError("nothing to summarize: no request was served")
    if not (ttft_slo_s > 0 and tpot_slo_s > 0):
        raise ValueError(f"latency objectives must be > 0 s, got {ttft_slo_s} and {tpot_slo_s}")
    ttft = np.array([s.ttft_s for s in served])
    tpot = np.array([s.tpot_s for s in served])
    span = max(s.finished_s for s in served) - min(s.request.arrival_s for s in served)
    good = sum(1 for s in served if s.ttft_s <= ttft_slo_s and s.tpot_s <= tpot_slo_s)
    return {"requests": len(served), "ttft_p50_s": float(np.median(ttft)), "ttft_p90_s": float(np.quantile(ttft, 0.9)),
            "tpot_p50_s": float(np.median(tpot)), "tpot_p90_s": float(np.quantile(tpot, 0.9)),
            "output_tokens_per_s": sum(s.request.output_tokens for s in served) / span,
            "goodput_requests_per_s": good / span, "met_slo": good / len(served)}
