"""Who gets which tokens of a step: vLLM V1's and SGLang's orderings, one step at a time.

Both planners see the same state (``Queues``): requests that are prefilling or decoding, and the
arrived requests waiting in first-come-first-served order, and return the step's plan: a list of
``(request, tokens)``. A request whose ``computed`` reaches its prompt length in the step has finished
its prefill and samples its first token at the end of that step; a decoding request computes one token
and samples one token per step.

vLLM V1 (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``): one token budget per step
(``max_num_batched_tokens``) shared by every request, with no prefill or decode phase. Requests in the
RUNNING list are served first, in list order (admission order: streams admitted earlier decode before a
long prompt's later chunks), each ``min(tokens it still needs, long_prefill_token_threshold if set,
budget left)``; then WAITING requests, first come first served, the same way. The threshold applies only
when more than one request is running or waiting. With chunked prefill off, a waiting request whose
prompt exceeds the budget left stops admission for the step (``break``); it waits for a step with
enough budget (and ``SchedulerConfig`` requires ``max_num_batched_tokens >= max_model_len`` then).

SGLang (``srt/managers/scheduler.py``, ``get_next_batch_to_run`` and ``_get_new_batch_prefill_raw``;
``srt/managers/schedule_policy.py``, ``PrefillAdder``): a step is *either* a prefill (extend) batch or a
decode batch, and a prefill batch runs first whenever one can be formed. The prefill batch takes the
one unfinished chunked request first (``add_chunked_req``), then waiting requests in order
(``add_one_req``), within ``chunked_prefill_size`` tokens (``rem_chunk_tokens``) and
``max_prefill_tokens`` (``rem_input_tokens``, default 16384); a request longer than what is left of the
chunk is cut there and becomes the chunked request. So while a long prompt is being chunked, the
running requests do not decode at all. With ``--enable-mixed-chunk`` the running requests' decodes ride
in the prefill batch and their count is taken off both budgets first (``num_mixed_decode_tokens``).
``--chunked-prefill-size -1`` disables chunking: a prompt is prefilled whole (the first one of a batch
even above ``max_prefill_tokens``). ``--prefill-decode-interval N`` (default off; ``_should_defer_prefill``
and ``_arm_prefill_decode_interval``) runs N decode batches after every prefill batch, a chunk included,
before the next prefill may form (``--prefill-decode-interval-min-bs`` is left at its default 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ENGINES = ("vllm", "sglang")
SGLANG_MAX_PREFILL_TOKENS = 16384  # srt/arg_groups/fields/schedule.py: max_prefill_tokens default


@dataclass(frozen=True)
class SchedulerConfig:
    """One engine's step scheduler.

    ``budget``: vLLM's ``max_num_batched_tokens`` / SGLang's ``chunked_prefill_size`` (tokens per step;
    ``None``: unlimited). ``chunking``: vLLM's ``enable_chunked_prefill`` / SGLang's chunk size not -1
    (SGLang without chunking ignores ``budget``). ``long_prefill_token_threshold``: vLLM only (0 = off).
    ``mixed_chunk``: SGLang's ``--enable-mixed-chunk``. ``prefill_decode_interval``: SGLang's
    ``--prefill-decode-interval`` (0 = off). ``max_running``: vLLM's ``max_num_seqs`` /
    SGLang's ``max_running_requests`` (``None``: unlimited).
    """

    engine: Literal["vllm", "sglang"] = "vllm"
    budget: int | None = 2048
    chunking: bool = True
    long_prefill_token_threshold: int = 0
    mixed_chunk: bool = False
    prefill_decode_interval: int = 0
    max_prefill_tokens: int = SGLANG_MAX_PREFILL_TOKENS
    max_running: int | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; accepted: {', '.join(ENGINES)}")
        for name in ("budget", "max_running"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None (unlimited), got {value!r}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError(f"long_prefill_token_threshold must be >= 0 (0 = off), "
                             f"got {self.long_prefill_token_threshold}")
        if self.max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens must be >= 1, got {self.max_prefill_tokens}")
        if self.engine != "vllm" and self.long_prefill_token_threshold:
            raise ValueError("long_prefill_token_threshold is a vLLM option; SGLang has none")
        if self.prefill_decode_interval < 0:
            raise ValueError(f"prefill_decode_interval must be >= 0 (0 = off), got {self.prefill_decode_interval}")
        if self.engine != "sglang" and self.prefill_decode_interval:
            raise ValueError("prefill_decode_interval is SGLang's --prefill-decode-interval; vLLM has none")
        if self.engine != "sglang" and self.mixed_chunk:
            raise ValueError("mixed_chunk is SGLang's --enable-mixed-chunk; vLLM always mixes")


@dataclass(eq=False)
class ReqState:
    """A request inside the simulator: how much of its prompt is computed, how many tokens it emitted."""

    name: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float
    computed: int = 0
    emitted: int = 0

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt_tokens

    @property
    def need(self) -> int:
        """Tokens to compute next: the rest of the prompt, or one decode token."""
        return self.prompt_tokens - self.computed if self.prefilling else 1

    @property
    def context(self) -> int:
        """Tokens a decode of this request attends to: its prompt and what it generated so far."""
        return self.prompt_tokens + self.emitted


@dataclass
class Queues:
    """Engine state between steps. ``running``: admission order (vLLM RUNNING; SGLang's decoding batch).
    ``chunked``: SGLang's one partly prefilled request (vLLM keeps those in ``running``)."""

    running: list[ReqState] = field(default_factory=list)
    waiting: list[ReqState] = field(default_factory=list)
    chunked: ReqState | None = None
    defer: int = 0  # SGLang: decode batches still owed before the next prefill (prefill_decode_interval)

    def busy(self) -> bool:
        return bool(self.running or self.waiting or self.chunked)


Plan = list[tuple[ReqState, int]]


def _left(budget: int | None) -> float:
    return float("inf") if budget is None else budget


def plan_vllm(q: Queues, cfg: SchedulerConfig) -> Plan:
    """One step of vLLM V1's ``Scheduler.schedule``: RUNNING in order, then WAITING, one shared budget.
    Moves admitted requests from ``waiting`` to the end of ``running``."""
    budget = _left(cfg.budget)
    threshold = cfg.long_prefill_token_threshold if len(q.running) + len(q.waiting) > 1 else 0
    plan: Plan = []
    for req in q.running:
        if budget <= 0:
            break
        n = req.need
        if 0 < threshold < n:
            n = threshold
        n = int(min(n, budget))
        plan.append((req, n))
        budget -= n
    while q.waiting and budget > 0:
        if cfg.max_running is not None and len(q.running) >= cfg.max_running:
            break
        req = q.waiting[0]
        n = req.need
        if 0 < threshold < n:
            n = threshold
        if not cfg.chunking and n > budget:
            break
        n = int(min(n, budget))
        q.running.append(q.waiting.pop(0))
        plan.append((req, n))
        budget -= n
    return plan


def plan_sglang(q: Queues, cfg: SchedulerConfig) -> Plan:
    """One step of SGLang's ``get_next_batch_to_run``: a prefill batch if one forms (decodes ride along
    only with ``mixed_chunk``), else a decode batch of every running request. After a prefill batch,
    ``prefill_decode_interval`` decode batches run before the next prefill is considered."""
    if q.defer > 0 and q.running:
        q.defer -= 1
        return [(r, 1) for r in q.running]
    q.defer = 0
    chunk = _left(cfg.budget) if cfg.chunking else None
    mixed = cfg.mixed_chunk and cfg.chunking
    decode_rows = len(q.running) if mixed else 0
    rem_input = cfg.max_prefill_tokens - decode_rows
    rem_chunk = None if chunk is None else chunk - decode_rows
    plan: Plan = []
    if q.chunked is not None and rem_chunk is not None and rem_chunk > 0:
        req = q.chunked
        n = int(min(req.need, rem_chunk))
        plan.append((req, n))
        rem_input -= n
        rem_chunk -= n
        if n == req.need:
            q.chunked = None
    while q.waiting and q.chunked is None:
        if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
            break
        if cfg.max_running is not None and len(q.running) + len(plan) >= cfg.max_running:
            break
        req = q.waiting[0]
        n = req.need
        if rem_chunk is None and plan and n >= rem_input:
            break
        if rem_chunk is not None and n > rem_chunk:
            n = int(rem_chunk)
            q.chunked = req
        q.waiting.pop(0)
        plan.append((req, n))
        rem_input -= n
        if rem_chunk is not None:
            rem_chunk -= n
    if plan:
        q.defer = cfg.prefill_decode_interval
        return ([(r, 1) for r in q.running] if mixed else []) + plan
    return [(r, 1) for r in q.running]


def plan_step(q: Queues, cfg: SchedulerConfig) -> Plan:
    return plan_vllm(q, cfg) if cfg.engine == "vllm" else plan_sglang(q, cfg)
