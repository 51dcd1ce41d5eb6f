"""What a scheduler step costs: a linear model fitted from measured timings.

One step (one forward pass of the engine) is modelled as

    t_step = a + b * prefill_tokens + c * decodes + d * decode_context_tokens

``a`` (``step_s``)
    fixed cost of a step: launching the forward pass, sampling, scheduling, whatever the batch holds.
``b`` (``prefill_token_s``)
    cost per prompt token computed in the step (all prefill chunks together). Weights are read once per
    step, so on an accelerator this is the compute of one token through every layer.
``c`` (``decode_s``)
    cost per running request that decodes one token in the step.
``d`` (``context_token_s``)
    cost per token of context those decodes attend to (the sum of their prompt plus generated lengths):
    reading their KV cache.

A request also pays ``e`` (``request_s``) once, outside any step: the client's HTTP request,
tokenization and queueing before the scheduler sees it. It only exists in time-to-first-token
samples, so it is fitted only when samples carry ``requests`` > 0; the simulator applies it as a delay
between a request's arrival at the client and its arrival at the scheduler.

A sample is an aggregate of whole steps: ``steps`` steps that together computed ``prefill_tokens``
prompt tokens, ran ``decodes`` decode slots over ``decode_context_tokens`` tokens of context, for
``requests`` requests' overhead, in ``seconds``. A time to first token of a P-token prompt that fits one
step is ``(steps=1, prefill_tokens=P, requests=1)``; an inter-token gap of B decoding streams of
context C each is ``(steps=1, decodes=B, decode_context_tokens=B*C)``.

The fit minimises the squared *relative* error (each row divided by its measured time), so a 20 ms
decode step weighs as much as a 2 s prefill. Costs cannot be negative: a term whose coefficient comes
out negative is fixed at zero and the rest refitted (reported in ``FitReport.clamped``).

Simplification: the model is linear. A prefill chunk's attention over the earlier chunks of its own
prompt grows with the position of the chunk; the model charges every prompt token the same ``b``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

TERMS = ("steps", "prefill_tokens", "decodes", "decode_context_tokens", "requests")
COEFFICIENTS = ("step_s", "prefill_token_s", "decode_s", "context_token_s", "request_s")


@dataclass(frozen=True)
class StepSample:
    """One measured timing: ``seconds`` spent on ``steps`` whole steps holding the given work."""

    seconds: float
    prefill_tokens: int = 0
    decodes: int = 0
    decode_context_tokens: int = 0
    steps: int = 1
    requests: int = 0


@dataclass(frozen=True)
class FitReport:
    """How well the fitted model reproduces its own samples (relative errors: predicted / measured - 1)."""

    samples: int
    mean_abs_rel_error: float
    max_abs_rel_error: float
    rmse_s: float
    clamped: tuple[str, ...]
    residuals: pd.DataFrame = field(repr=False, compare=False)


@dataclass(frozen=True)
class CostModel:
    """Seconds per step (``a + b*prefill + c*decodes + d*context``) and per request (``e``); see module doc."""

    step_s: float
    prefill_token_s: float
    decode_s: float
    context_token_s: float
    request_s: float = 0.0
    fit: FitReport | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in COEFFICIENTS:
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"cost model {name} must be a finite number >= 0, got {value!r}")

    def step_seconds(self, prefill_tokens: int, decodes: int, decode_context_tokens: int) -> float:
        return (self.step_s + self.prefill_token_s * prefill_tokens + self.decode_s * decodes
                + self.context_token_s * decode_context_tokens)

    def predict(self, samples: pd.DataFrame) -> np.ndarray:
        """Predicted seconds of each sample (a frame with the columns in ``TERMS``)."""
        return _design(samples) @ self.coefficients()

    def coefficients(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in COEFFICIENTS])


def samples_frame(samples: pd.DataFrame | Iterable[StepSample | Mapping]) -> pd.DataFrame:
    """Samples as a frame with ``seconds`` and every term of ``TERMS`` (missing terms: steps 1, others 0)."""
    if isinstance(samples, pd.DataFrame):
        frame = samples.copy()
    else:
        frame = pd.DataFrame([asdict(s) if isinstance(s, StepSample) else dict(s) for s in samples])
    if frame.empty or "seconds" not in frame:
        raise ValueError("samples need at least one row with a 'seconds' column")
    defaults = {"steps": 1} | {t: 0 for t in TERMS if t != "steps"}
    for term, default in defaults.items():
        frame[term] = frame.get(term, default)
    values = frame[["seconds", *TERMS]].to_numpy(dtype=float)
    if not np.isfinite(values).all() or (values < 0).any() or (frame["seconds"] <= 0).any():
        raise ValueError("samples must be finite, seconds > 0 and every term >= 0")
    return frame


def _design(frame: pd.DataFrame) -> np.ndarray:
    return frame[list(TERMS)].to_numpy(dtype=float)


def fit_cost_model(samples: pd.DataFrame | Iterable[StepSample | Mapping]) -> CostModel:
    """Least-squares fit (relative error, non-negative) of the cost model to measured samples."""
    frame = samples_frame(samples)
    x, y = _design(frame), frame["seconds"].to_numpy(dtype=float)
    active = [i for i, term in enumerate(TERMS) if term != "requests" or frame["requests"].any()]
    missing = [TERMS[i] for i in active if not frame[TERMS[i]].any()]
    if missing:
        raise ValueError(f"no sample has any {', '.join(missing)}: these costs cannot be fitted; "
                         "add prefill samples (prefill_tokens) and decode samples (decodes, context)")
    if np.linalg.matrix_rank(x[:, active]) < len(active):
        raise ValueError("the samples cannot separate the terms " + ", ".join(TERMS[i] for i in active)
                         + ": vary prompt length, batch size and context independently")
    clamped: list[str] = []
    while True:
        weighted = x[:, active] / y[:, None]
        solution, *_ = np.linalg.lstsq(weighted, np.ones_like(y), rcond=None)
        if (solution >= 0).all():
            break
        worst = active[int(np.argmin(solution))]
        clamped.append(TERMS[worst])
        active.remove(worst)
    coefficients = np.zeros(len(TERMS))
    coefficients[active] = solution
    predicted = x @ coefficients
    rel = predicted / y - 1
    residuals = frame.assign(predicted_s=predicted, rel_error=rel)
    report = FitReport(samples=len(frame), mean_abs_rel_error=float(np.mean(np.abs(rel))),
                       max_abs_rel_error=float(np.max(np.abs(rel))),
                       rmse_s=float(np.sqrt(np.mean((predicted - y) ** 2))), clamped=tuple(clamped),
                       residuals=residuals)
    return CostModel(*map(float, coefficients), fit=report)
