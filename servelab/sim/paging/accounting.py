"""Where every token slot of the KV capacity went, step by step, from a run's trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from servelab.integers import ceil_div
from servelab.sim.paging.policies import Policy
from servelab.sim.paging.trace import Trace

COMPONENTS = ("used", "reserved_for_future", "never_used", "external_frag", "stranded", "idle")


@dataclass(frozen=True)
class SimResult:
    """One policy on one workload.

    ``summary``: one row of time-averaged token counts and batch statistics (see the module docstring).
    ``timeline``: one row per step (running requests and each component, in tokens).
    ``requests``: one row per request (admission, finish, preemptions, its internal fragmentation).
    """

    summary: dict[str, object]
    timeline: pd.DataFrame
    requests: pd.DataFrame



def measure(
    pol: Policy, reqs: pd.DataFrame, trace: Trace, capacity: int, pool_tokens: int, max_len: int
) -> SimResult:
    """Expand the segments into one entry per (request, step) and add everything up with numpy."""
    prompt = reqs["prompt_len"].to_numpy(np.int64)
    output = reqs["output_len"].to_numpy(np.int64)
    seg_req = np.asarray(trace.seg_req, dtype=np.int64)
    seg_start = np.asarray(trace.seg_start, dtype=np.int64)
    seg_len0 = np.asarray(trace.seg_len0, dtype=np.int64)
    seg_steps = np.asarray(trace.seg_steps, dtype=np.int64)
    keep = seg_steps > 0  # a request preempted in the step it was admitted ran no step
    seg_req, seg_start, seg_len0, seg_steps = seg_req[keep], seg_start[keep], seg_len0[keep], seg_steps[keep]

    which = np.repeat(np.arange(len(seg_req)), seg_steps)  # segment of each (request, step) entry
    k = np.arange(len(which)) - np.repeat(np.cumsum(seg_steps) - seg_steps, seg_steps)  # 0-based
    req = seg_req[which]
    step = seg_start[which] + k
    length = seg_len0[which] + k + 1  # tokens held during the step, its new token included
    final = (prompt + output)[req]
    if pol.kind == "paged":
        bs = pol.block_size
        assert bs is not None
        reserved = ceil_div(length, bs) * bs
    elif pol.kind == "max_len":
        reserved = np.full_like(length, max_len)
    else:
        reserved = final
    slack = reserved - length
    future = np.minimum(slack, final - length)

    steps = int(step.max()) + 1
    per_step = {
        "running": np.bincount(step, minlength=steps),
        "used": np.bincount(step, weights=length, minlength=steps),
        "reserved_for_future": np.bincount(step, weights=future, minlength=steps),
        "never_used": np.bincount(step, weights=slack - future, minlength=steps),
    }
    reserved_now = np.bincount(step, weights=reserved, minlength=steps)
    free = pool_tokens - reserved_now
    need = np.zeros(steps)
    blocked = np.zeros(steps, dtype=bool)
    for t0, t1, tokens in trace.blocked:
        blocked[t0:t1] = True
        need[t0:t1] = tokens
    holes = blocked & (free >= need) if pol.kind != "paged" else np.zeros(steps, dtype=bool)
    per_step["external_frag"] = np.where(holes, free, 0.0)
    per_step["stranded"] = np.where(blocked & ~holes, free, 0.0) + (capacity - pool_tokens)
    per_step["idle"] = np.where(blocked, 0.0, free)
    timeline = pd.DataFrame({"policy": pol.label, "step": np.arange(steps), **per_step})

    avg = {c: float(per_step[c].mean()) for c in COMPONENTS}
    internal = avg["reserved_for_future"] + avg["never_used"]
    summary: dict[str, object] = {
        "policy": pol.label,
        "paper_analogue": pol.paper_analogue,
        "block_size": pol.block_size if pol.block_size is not None else pd.NA,
        "capacity_tokens": capacity,
        "requests": len(reqs),
        "steps": steps,
        "mean_batch": float(per_step["running"].mean()),
        "max_batch": int(per_step["running"].max()),
        "preemptions": trace.preemptions,
        **avg,
        "reserved": avg["used"] + internal,
        "internal_frag": internal,
        "wasted": internal + avg["external_frag"],
        "used_pct": 100 * avg["used"] / capacity,
        "wasted_pct": 100 * (internal + avg["external_frag"]) / capacity,
        "saturated_steps": int(blocked.sum()),
        **{f"{c}_pct_saturated": 100 * float(per_step[c][blocked].mean()) / capacity if blocked.any()
           else float("nan") for c in COMPONENTS},
        "tokens_per_step": float(output.sum() / steps),
    }

    n = len(reqs)
    first_admit = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first_admit, seg_req, seg_start)
    max_slack = np.zeros(n, dtype=np.int64)
    np.maximum.at(max_slack, req, slack)
    ran = np.bincount(req, minlength=n)
    per_request = pd.DataFrame(
        {
            "policy": pol.label,
            "req_id": reqs["req_id"].to_numpy() if "req_id" in reqs else np.arange(n),
            "arrival": reqs["arrival"].to_numpy(),
            "prompt_len": prompt,
            "output_len": output,
            "admitted": first_admit,
            "finished": _last_step(req, step, n) + 1,  # first step after its last one
            "preemptions": np.bincount(seg_req, minlength=n) - 1,
            "mean_internal_frag": np.bincount(req, weights=slack, minlength=n) / np.maximum(ran, 1),
            "max_internal_frag": max_slack,
        }
    )
    per_request["queue_steps"] = per_request["admitted"] - per_request["arrival"]
    return SimResult(summary=summary, timeline=timeline, requests=per_request)


def expected_last_block_waste_pct(mean_batch: float, block_size: int, capacity: int) -> float:
    """The paged waste to expect: ``mean_batch`` last blocks, each ``(block_size - 1) / 2`` slots short.

    A sequence of length ``L`` leaves ``(-L) % block_size`` empty slots in its last block; if lengths are
    spread evenly over the residues, that is ``(block_size - 1) / 2`` on average. As a share of the
    ``capacity`` in tokens, in %.
    """
    return 100 * mean_batch * (block_size - 1) / 2 / capacity


def _last_step(req: np.ndarray, step: np.ndarray, n: int) -> np.ndarray:
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, req, step)
    return last

