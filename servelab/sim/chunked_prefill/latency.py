"""Inter-token latency statistics over a window, the same for simulated and measured token times.

A stream's inter-token gaps are the differences of its consecutive token times. The gaps *during* a
window ``[start_s, end_s]`` are those whose interval overlaps it: the gap from token k-1 to token k
counts when ``t[k] > start_s`` and ``t[k-1] < end_s``. So a stall that began before a long prompt
arrived, or that ends after its first token, is counted whole, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

SUMMARY_KEYS = ("itl_p50_s", "itl_p90_s", "longest_stall_s", "gaps")


def gaps_in_window(times: Sequence[float], start_s: float, end_s: float) -> np.ndarray:
    """The inter-token gaps of one stream that overlap ``[start_s, end_s]`` (seconds, in order)."""
    if end_s < start_s:
        raise ValueError(f"window end {end_s} is before its start {start_s}")
    t = np.asarray(times, dtype=float)
    if t.ndim != 1 or (np.diff(t) < 0).any():
        raise ValueError("token times must be one increasing sequence per stream")
    if len(t) < 2:
        return np.empty(0)
    before, after = t[:-1], t[1:]
    return (after - before)[(after > start_s) & (before < end_s)]


def itl_summary(streams: Mapping[str, Sequence[float]], start_s: float, end_s: float) -> dict[str, float]:
    """p50 and p90 (linear interpolation) and the longest of all streams' gaps in the window, pooled."""
    pooled = np.concatenate([gaps_in_window(t, start_s, end_s) for t in streams.values()] or [np.empty(0)])
    if pooled.size == 0:
        raise ValueError(f"no stream has an inter-token gap in the window [{start_s}, {end_s}] "
                         f"(streams: {', '.join(streams) or 'none'})")
    return {"itl_p50_s": float(np.percentile(pooled, 50)), "itl_p90_s": float(np.percentile(pooled, 90)),
            "longest_stall_s": float(pooled.max()), "gaps": int(pooled.size)}
