"""Where KV memory goes: a request-level simulator of three ways to reserve KV cache.

Every policy below serves the same seeded workload with the same scheduler: first come, first served,
iteration-level ("continuous") batching, one new token per running request per step, memory freed the
moment a request finishes. Only the way KV memory is reserved differs:

``max_len``
    One contiguous chunk of ``max_len`` tokens per request, reserved at admission. What servers did
    before paging (FasterTransformer, Orca-style systems; the paper's "Orca (Max)"): the output length
    is unknown, so reserve the worst case.
``exact``
    One contiguous chunk of exactly ``prompt + output`` tokens: an oracle that knows the output length
    in advance (the paper's "Orca (Oracle)"; impossible in practice). Chunks differ in size, so they are
    placed by a first-fit allocator over a token-addressed memory and the holes between them are real.
``paged:<block_size>``
    vLLM's PagedAttention, through :class:`~servelab.block_allocator.BlockAllocator`: blocks are taken
    one at a time as the sequence grows. When the pool runs dry the most recently admitted request is
    preempted (its blocks freed, its KV recomputed when it is readmitted), as vLLM does.

Each step, every token slot of the KV capacity is in exactly one of six states, and the summary reports
their time averages (tokens), which add up to the capacity:

``used``                 holds the KV of a token.
``reserved_for_future``  reserved by a running request, empty now, filled before it finishes.
``never_used``           reserved by a running request and never filled (over-reservation).
``external_frag``        free while the next request in line is refused although the total free memory
                         would hold it: the free memory is cut into holes too small for it. Paging has
                         none by construction: any free block fits anywhere.
``stranded``             free while the next request is refused because the total free memory is too
                         small for it (plus, for paging, the ``capacity % block_size`` slots no block
                         can use). With ``max_len`` it is the tail that no whole chunk fits in.
``idle``                 free with nobody waiting: spare capacity, not waste.

``internal_frag = reserved_for_future + never_used`` (reserved inside a request but not holding KV) and
``wasted = internal_frag + external_frag``. The paper's Fig. 2 splits memory the same way ("token
states", "reservation", "internal frag.", "external frag. & others"); see :data:`servelab.paper_figures.PAPER_FIGURES`.

Averaged over a whole run these include the start and the drain at the end, when nobody waits and
memory sits idle; ``used_pct_saturated`` averages only the steps in which a request was waiting for
memory, which is the regime the paper's Fig. 2 measures.

Simplifications, on purpose: a step is one decoding iteration and costs the same whatever is in it, so
prefill is free and so is the recomputation of a preempted request; the point is memory, not latency.
Run ``python -m servelab.kv_sim`` for the default scenario.
"""

from __future__ import annotations

import heapq
import math
import operator
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from servelab.block_allocator import BlockAllocator

# ============================================================================== workload

SHAREGPT_MEAN_PROMPT = 161.31  # paper Fig. 11a
SHAREGPT_MEAN_OUTPUT = 337.99  # paper Fig. 11a
DEFAULT_MAX_LEN = 2048  # OPT's context length; "Orca (Max)" reserves this much (paper §6.1)
DEFAULT_CAPACITY = 15_744  # 123 * 128: the paper's 15.7K slots (Table 1), divisible by every block size
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
    prompt_sigma: float = 1.0,
    output_sigma: float = 1.0,
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
    n = _int_at_least("n", n, 1, "number of requests")
    seed = _int_at_least("seed", seed, 0, "a non-negative integer seed")
    max_len = _int_at_least("max_len", max_len, 2, "context length in tokens")
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


# ============================================================================== policies


@dataclass(frozen=True)
class Policy:
    """A KV reservation policy: ``kind`` is ``"max_len"``, ``"exact"`` or ``"paged"``."""

    kind: str
    block_size: int | None = None

    @property
    def label(self) -> str:
        return f"paged:{self.block_size}" if self.kind == "paged" else self.kind

    @property
    def paper_analogue(self) -> str:
        return {"max_len": "Orca (Max)", "exact": "Orca (Oracle)"}.get(self.kind, "vLLM")


_POLICY_HELP = "'max_len', 'exact', or 'paged:<block_size>' with a positive integer block size, e.g. paged:16"


def parse_policy(spec: str | Policy) -> Policy:
    """``"max_len"``, ``"exact"`` or ``"paged:16"`` (or a :class:`Policy`) as a :class:`Policy`."""
    if isinstance(spec, Policy):
        if spec.kind in ("max_len", "exact") and spec.block_size is None:
            return spec
        if spec.kind == "paged":
            return Policy("paged", _block_size(spec.block_size))
        raise ValueError(f"unknown policy {spec!r}; accepted: {_POLICY_HELP}")
    if spec in ("max_len", "exact"):
        return Policy(spec)
    if isinstance(spec, str) and spec.startswith("paged:"):
        raw = spec.removeprefix("paged:")
        try:
            size = int(raw)
        except ValueError:
            raise ValueError(f"bad block size {raw!r} in policy {spec!r}; accepted: {_POLICY_HELP}") from None
        return Policy("paged", _block_size(size))
    raise ValueError(f"unknown policy {spec!r}; accepted: {_POLICY_HELP}")


def _block_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"block_size must be a positive integer (tokens per KV block), got {size!r}")
    return size


# ============================================================================== contiguous memory


class FirstFitMemory:
    """A token-addressed KV region handing out contiguous chunks, first fit, holes merged on free.

    This is what storing each request's KV as one contiguous tensor amounts to. Chunks of different
    sizes come and go, and the free space ends up cut into holes: a request can be refused while the
    total free space would hold it (external fragmentation).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.holes: list[tuple[int, int]] = [(0, capacity)] if capacity else []  # (start, size), sorted
        self.free_total = capacity

    def alloc(self, size: int) -> int | None:
        """Start address of a new ``size``-token chunk, or ``None`` if no hole is big enough."""
        for k, (start, hole) in enumerate(self.holes):
            if hole >= size:
                if hole == size:
                    del self.holes[k]
                else:
                    self.holes[k] = (start + size, hole - size)
                self.free_total -= size
                return start
        return None

    def free(self, start: int, size: int) -> None:
        """Give a chunk back, merging it with the holes on either side."""
        k = 0
        while k < len(self.holes) and self.holes[k][0] < start:
            k += 1
        end = start + size
        if k < len(self.holes) and self.holes[k][0] == end:  # merge with the hole after
            end += self.holes.pop(k)[1]
        if k > 0 and sum(self.holes[k - 1]) == start:  # merge with the hole before
            start = self.holes[k - 1][0]
            self.holes[k - 1] = (start, end - start)
        else:
            self.holes.insert(k, (start, end - start))
        self.free_total += size

    def largest_hole(self) -> int:
        return max((h for _, h in self.holes), default=0)


# ============================================================================== the two engines


@dataclass
class _Trace:
    """What an engine run leaves behind; metrics are computed from it afterwards, vectorised.

    A *segment* is one stretch of steps a request ran without interruption: it started at step
    ``start`` holding ``len0`` tokens and appended one token in each of its ``steps`` steps. A
    *blocked* interval ``[t0, t1)`` is a stretch in which the head of the queue was refused; ``need`` is
    what it asked for, in tokens.
    """

    seg_req: list[int] = field(default_factory=list)
    seg_start: list[int] = field(default_factory=list)
    seg_len0: list[int] = field(default_factory=list)
    seg_steps: list[int] = field(default_factory=list)
    blocked: list[tuple[int, int, int]] = field(default_factory=list)
    preemptions: int = 0

    def segment(self, req: int, start: int, len0: int, steps: int) -> None:
        self.seg_req.append(req)
        self.seg_start.append(start)
        self.seg_len0.append(len0)
        self.seg_steps.append(steps)


def _run_contiguous(
    arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray, size: np.ndarray, capacity: int
) -> _Trace:
    """Reserve ``size[i]`` contiguous tokens for request ``i`` at admission, free them at the end.

    Event-driven: nothing changes between an arrival and a completion, so the loop jumps between them.
    A request admitted at step ``t`` runs steps ``t .. t + output - 1`` and its chunk is free again for
    admissions at step ``t + output``.
    """
    trace, memory = _Trace(), FirstFitMemory(capacity)
    n, nxt, t = len(arrival), 0, 0
    waiting: deque[int] = deque()
    running: list[tuple[int, int, int]] = []  # heap of (end step, request, chunk start)
    while True:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        while waiting:  # FCFS: stop at the first request that does not fit
            i = waiting[0]
            start = memory.alloc(int(size[i]))
            if start is None:
                break
            waiting.popleft()
            heapq.heappush(running, (t + int(output[i]), i, start))
            trace.segment(i, t, int(prompt[i]), int(output[i]))
        events = [running[0][0]] if running else []
        if nxt < n and not waiting:  # arrivals only matter when nobody is already waiting
            events.append(int(arrival[nxt]))
        if not events:
            if waiting:
                raise RuntimeError(f"request {waiting[0]} does not fit in an empty memory")
            return trace
        t_next = min(events)
        if waiting:
            trace.blocked.append((t, t_next, int(size[waiting[0]])))
        t = t_next
        while running and running[0][0] <= t:
            _, i, start = heapq.heappop(running)
            memory.free(start, int(size[i]))


def _run_paged(
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    block_size: int,
    num_blocks: int,
    watermark_blocks: int,
    check: bool,
) -> _Trace:
    """Serve the workload from a :class:`BlockAllocator`, vLLM style.

    Each step: (1) every running request needs room for one more token; if the free blocks do not
    cover that, preempt the most recently admitted request (free its blocks; it goes back to the front
    of the queue and recomputes its KV when readmitted). (2) If nothing was preempted, admit from the
    queue while the newcomer's blocks plus the running requests' new blocks plus a small watermark fit.
    (3) Everyone appends a token; finished requests free their blocks.

    Event-driven like :func:`_run_contiguous`. Between events the only change is growth, which is
    deterministic, so the next step at which the pool would run dry is found by a binary search on
    ``sum(ceil((len + d + 1) / block_size))`` and the allocator is brought up to date in one
    ``append_tokens`` call per request.
    """
    trace, pool = _Trace(), BlockAllocator(num_blocks, block_size)
    n, nxt, t = len(arrival), 0, 0
    target = prompt + output
    generated = np.zeros(n, dtype=np.int64)  # output tokens kept across preemptions (recomputed)
    length: dict[int, int] = {}  # tokens held by each running request at the start of step t
    started: dict[int, tuple[int, int]] = {}  # request -> (segment start, len0)
    waiting: deque[int] = deque()
    running: list[int] = []  # admission order: the last one is preempted first

    def end_segment(i: int, now: int) -> None:
        start, len0 = started.pop(i)
        trace.segment(i, start, len0, now - start)
        pool.free(i)
        del length[i]

    while True:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        # (1) room for this step's token, preempting the newest request while it does not fit
        preempted = False
        growing = sum(1 for i in running if length[i] % block_size == 0)
        while running and growing > pool.num_free_blocks:
            victim = running.pop()
            growing -= int(length[victim] % block_size == 0)
            generated[victim] = length[victim] - prompt[victim]
            end_segment(victim, t)
            waiting.appendleft(victim)
            trace.preemptions += 1
            preempted = True
        # (2) admission (vLLM does not admit new prefills in a step that preempted)
        need_blocks = 0
        while waiting:
            i = waiting[0]
            len0 = int(prompt[i] + generated[i])
            need_blocks = pool.blocks_needed(len0 + 1) + growing + watermark_blocks
            if preempted or need_blocks > pool.num_free_blocks:
                break
            waiting.popleft()
            pool.allocate(i, len0)
            growing += pool.blocks_needed(len0 + 1) - pool.blocks_needed(len0)
            running.append(i)
            length[i] = len0
            started[i] = (t, len0)
        # (3) jump to the next event: a completion, an arrival, the step after a preemption, or the
        # first step at which growth would need more blocks than the pool has
        lens = np.fromiter((length[i] for i in running), dtype=np.int64, count=len(running))
        events = []
        if running:
            events.append(t + int((target[running] - lens).min()))
        if nxt < n and not waiting:
            events.append(int(arrival[nxt]))
        if preempted:
            events.append(t + 1)
        if not events:
            if waiting:
                raise RuntimeError(f"request {waiting[0]} does not fit in an empty pool")
            return trace
        t_next = min(events)

        if running and _blocks_after(lens, t_next - t - 1, block_size) > num_blocks:
            lo, hi = 1, t_next - t - 1  # _blocks_after(0) fits (checked above); find the first misfit
            while lo < hi:
                mid = (lo + hi) // 2
                if _blocks_after(lens, mid, block_size) > num_blocks:
                    hi = mid
                else:
                    lo = mid + 1
            t_next = t + lo
        if waiting:
            trace.blocked.append((t, t_next, need_blocks * block_size))
        dt = t_next - t
        for i in running:
            pool.append_tokens(i, dt)
            length[i] += dt
        for i in [i for i in running if length[i] == target[i]]:
            running.remove(i)
            end_segment(i, t_next)
        if check:
            pool.check_invariants()
            assert pool.num_free_blocks == num_blocks - sum(pool.blocks_needed(v) for v in length.values())
        t = t_next


def _blocks_after(lens: np.ndarray, d: int, block_size: int) -> int:
    """Blocks held by requests now ``lens`` long once they have appended ``d + 1`` tokens."""
    return int((-(-(lens + d + 1) // block_size)).sum())


# ============================================================================== metrics

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


def simulate(
    requests: pd.DataFrame,
    policy: str | Policy,
    capacity_tokens: int = DEFAULT_CAPACITY,
    *,
    max_len: int = DEFAULT_MAX_LEN,
    watermark: float = 0.01,
    check_invariants: bool = False,
) -> SimResult:
    """Serve ``requests`` (as made by :func:`sample_requests`) with one reservation ``policy``.

    ``capacity_tokens`` is the KV cache size in tokens (slots). ``watermark`` is the share of blocks
    paging keeps free at admission, so newly admitted requests do not get preempted at once (vLLM's
    default is 0.01). ``check_invariants`` re-checks the block allocator after every event (slow; for
    tests).
    """
    pol = parse_policy(policy)
    capacity = _int_at_least("capacity_tokens", capacity_tokens, 1, "KV cache size in tokens")
    max_len = _int_at_least("max_len", max_len, 1, "context length in tokens")
    if not (isinstance(watermark, int | float) and 0 <= watermark < 1):
        raise ValueError(f"watermark must be a fraction in [0, 1), got {watermark!r}")
    missing = {"arrival", "prompt_len", "output_len"} - set(requests.columns)
    if missing:
        raise ValueError(f"requests lacks column(s) {sorted(missing)}; make it with sample_requests()")
    reqs = requests.sort_values("arrival", kind="stable").reset_index(drop=True)
    arrival = reqs["arrival"].to_numpy(np.int64)
    prompt = reqs["prompt_len"].to_numpy(np.int64)
    output = reqs["output_len"].to_numpy(np.int64)
    if len(reqs) == 0:
        raise ValueError("requests is empty; make at least one with sample_requests(n >= 1, ...)")
    if (arrival < 0).any() or (prompt < 1).any() or (output < 1).any():
        raise ValueError("requests need arrival >= 0, prompt_len >= 1 and output_len >= 1")
    longest = int((prompt + output).max())
    if longest > max_len:
        raise ValueError(f"a request needs {longest} tokens, more than max_len={max_len}; raise max_len")
    if capacity < max_len:
        raise ValueError(
            f"capacity_tokens={capacity} is smaller than max_len={max_len}; the KV cache must hold at "
            "least one full-length request"
        )

    if pol.kind == "paged":
        bs = pol.block_size
        assert bs is not None
        num_blocks = capacity // bs
        wm_blocks = int(watermark * num_blocks)
        if num_blocks < -(-max_len // bs) + wm_blocks:
            raise ValueError(
                f"capacity_tokens={capacity} makes {num_blocks} blocks of {bs} tokens, fewer than one "
                f"{max_len}-token request needs ({-(-max_len // bs)}) plus the watermark ({wm_blocks}); "
                "use a smaller block_size or a larger capacity"
            )
        trace = _run_paged(arrival, prompt, output, bs, num_blocks, wm_blocks, check_invariants)
        pool_tokens = num_blocks * bs
    else:
        size = np.full_like(prompt, max_len) if pol.kind == "max_len" else prompt + output
        trace = _run_contiguous(arrival, prompt, output, size, capacity)
        pool_tokens = capacity
    return _measure(pol, reqs, trace, capacity, pool_tokens, max_len)


def _measure(
    pol: Policy, reqs: pd.DataFrame, trace: _Trace, capacity: int, pool_tokens: int, max_len: int
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
        reserved = -(-length // bs) * bs
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
        "used_pct_saturated": 100 * float(per_step["used"][blocked].mean()) / capacity
        if blocked.any()
        else float("nan"),
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


def _last_step(req: np.ndarray, step: np.ndarray, n: int) -> np.ndarray:
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, req, step)
    return last


# ============================================================================== comparing policies


@dataclass(frozen=True)
class Comparison:
    """Several policies on one workload, as tidy tables a notebook can plot directly.

    ``summary``: one row per policy. ``breakdown``: long form (policy, component, tokens, pct of the
    capacity), for stacked bars like the paper's Fig. 2. ``timeline`` and ``requests``: the per-step and
    per-request tables of every policy, stacked.
    """

    summary: pd.DataFrame
    breakdown: pd.DataFrame
    timeline: pd.DataFrame
    requests: pd.DataFrame
    seconds: float


def compare_policies(
    requests: pd.DataFrame,
    policies: tuple[str | Policy, ...] | list[str | Policy] = DEFAULT_POLICIES,
    capacity_tokens: int = DEFAULT_CAPACITY,
    *,
    max_len: int = DEFAULT_MAX_LEN,
    watermark: float = 0.01,
) -> Comparison:
    """Run :func:`simulate` for each policy on the same ``requests`` and gather the tables."""
    start = time.perf_counter()
    parsed = [parse_policy(p) for p in policies]  # reject a bad name before running anything
    results = [simulate(requests, p, capacity_tokens, max_len=max_len, watermark=watermark) for p in parsed]
    summary = pd.DataFrame([r.summary for r in results])
    summary["block_size"] = summary["block_size"].astype("Int64")
    order = pd.CategoricalDtype([p.label for p in parsed], ordered=True)
    breakdown = summary.melt(
        id_vars="policy", value_vars=list(COMPONENTS), var_name="component", value_name="tokens"
    )
    breakdown["pct"] = 100 * breakdown["tokens"] / summary["capacity_tokens"].iloc[0]
    breakdown["component"] = pd.Categorical(breakdown["component"], COMPONENTS, ordered=True)
    tables = [summary, breakdown]
    timeline = pd.concat([r.timeline for r in results], ignore_index=True)
    per_request = pd.concat([r.requests for r in results], ignore_index=True)
    for table in (*tables, timeline, per_request):
        table["policy"] = table["policy"].astype(order)
    breakdown = breakdown.sort_values(["policy", "component"], ignore_index=True)
    return Comparison(summary, breakdown, timeline, per_request, time.perf_counter() - start)


def default_scenario(n: int = 1000, seed: int = 0) -> Comparison:
    """The chapter's scenario: ShareGPT-like lengths, the paper's 15.7K-slot KV cache, every policy."""
    return compare_policies(sample_requests(n, seed))


SUMMARY_COLUMNS = [
    "policy",
    "steps",
    "mean_batch",
    "max_batch",
    "preemptions",
    "used",
    "reserved_for_future",
    "never_used",
    "external_frag",
    "stranded",
    "idle",
    "used_pct",
    "wasted_pct",
    "used_pct_saturated",
]


def main() -> None:
    """Print the default scenario's summary: ``python -m servelab.kv_sim``."""
    result = default_scenario()
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 1):
        print(result.summary[SUMMARY_COLUMNS].to_string(index=False))
    first = result.summary.iloc[0]
    print(
        f"\n{len(result.summary)} policies, {first['requests']} requests, capacity "
        f"{first['capacity_tokens']} tokens, simulated in {result.seconds:.2f} s"
    )


# ============================================================================== argument checks


def _int_at_least(name: str, value: object, minimum: int, what: str) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = None
    if number is None or isinstance(value, bool) or number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} ({what}), got {value!r}")
    return number


if __name__ == "__main__":
    main()
