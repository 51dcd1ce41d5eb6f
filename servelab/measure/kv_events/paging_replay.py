"""The referee for requests that decode (chapter 03, PagedAttention): a trace recorded by ``paging`` against the same
prompts and the engine's own outputs replayed on ``decode_sims``, request by request, and the figure's steps.

The comparison is ``replay``'s: per request the units stored and removed, by content, as multisets, and the hit the
engine reported. The steps are those of ``replay`` with one more between admitted and finished for every decode
step that completes a vLLM block (``phase`` "decoding", caption "request 0 decoding: block 2 full"), on both
engines so that ``frames`` can set them side by side. A vLLM event goes to the decode step whose block it stores
or whose hash it evicts, else to the admission. An SGLang event goes by content too: a store of prompt pages to the
admission (the checkpoint right after the prefill), any other store to the finish (``release_kv_cache`` adds the
outputs), a removal to the decode step that evicted those pages, else to the admission.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from servelab.measure.kv_events.decode_sims import DecodeOp, decode_simulator
from servelab.measure.kv_events.engine_trace import START, Window, read
from servelab.measure.kv_events.record import Trace
from servelab.measure.kv_events.replay import PHASE, Replay, _empty_state, _row, trace_problems, window_differences

DIFFERENCES = {
    "vllm": [
        "Block ids are not compared: the events carry no block id, so a block is named by its content.",
        "The simulator's pool is the usable blocks: vLLM's null block (block 0, block_pool.py) is left out.",
        "Only requests sent one at a time, without chunked prefill, are modelled; the outputs are the engine's own.",
        "The last output token's KV is never computed, so the block it would start is neither allocated nor stored.",
    ],
    "sglang": [
        "SGLang's default tree core is compiled (RustUnifiedTreeCore, which this CPU server runs); "
        "the simulator follows the rules of "
        "SGLang's Python trees, so the trace is what shows they agree.",
        "Nodes are not compared: a node split emits no event, so pages are compared, each named by its content.",
        "Only requests sent one at a time are modelled; the outputs are the engine's own.",
        "SGLang stores a request's prompt right after its prefill (checkpoint_kv_cache) and its outputs when it "
        "finishes (release_kv_cache): its decoding steps show no store.",
    ],
}


def _vllm_events(win: Window, op: DecodeOp) -> dict[str, list[str]]:
    """The window's vLLM events (one text per hash, in order) by the step they belong to: ``admitted``, the
    decoding step's key ``decoding j`` for a block that step stored or evicted, or ``finished``."""
    wanted: dict[tuple[str, str | None], list[str]] = {}
    for step in op.decoding:
        for key in step.stored:
            wanted.setdefault(("BlockStored", key), []).append(f"decoding {step.output}")
        for key in step.removed:
            wanted.setdefault(("BlockRemoved", key), []).append(f"decoding {step.output}")
    out: dict[str, list[str]] = {}
    stored, removed = iter(win.stored), iter(win.removed)
    for kind, text in win.texts:
        key = next(stored) if kind == "BlockStored" else next(removed) if kind == "BlockRemoved" else None
        places = wanted.get((kind, key))
        phase = places.pop(0) if places else PHASE["vllm"].get(kind, "admitted")
        out.setdefault(phase, []).append(text)
    return out


def _sglang_events(win: Window, op: DecodeOp) -> dict[str, list[str]]:
    """The window's SGLang events by step, placed by the pages they cover (``units``): see the module's text."""
    prefill = set(op.prefill_stored)
    out: dict[str, list[str]] = {}
    for (kind, text), keys in zip(win.texts, win.units, strict=True):
        phase = "admitted"
        if kind == "BlockStored" and not (keys and all(k in prefill for k in keys)):
            phase = "finished"
        elif kind == "BlockRemoved" and keys:
            phase = next((f"decoding {s.output}" for s in op.decoding if all(k in s.removed for k in keys)), phase)
        out.setdefault(phase, []).append(text)
    return out


def _steps(index: int, op: DecodeOp, events: dict[str, list[str]]) -> list[dict[str, Any]]:
    steps = [{"caption": f"request {index} admitted", "request": index, "phase": "admitted", "state": op.admitted,
              "events": events.get("admitted", [])}]
    steps += [{"caption": f"request {index} decoding: block {step.block} full", "request": index,
               "phase": "decoding", "output": step.output, "state": step.state,
               "events": events.get(f"decoding {step.output}", [])} for step in op.decoding]
    steps.append({"caption": f"request {index} finished", "request": index, "phase": "finished",
                  "state": op.finished, "events": events.get("finished", [])})
    return steps


def replay_paging(trace: Trace | dict[str, Any]) -> Replay:
    """Referee a trace of requests that decode (each mark holds its prompt ``tokens``, the engine's ``output`` and
    the ``block_tokens`` its figure steps count in): replay on our cache of the engine's kind, compare per request."""
    trace = trace if isinstance(trace, Trace) else Trace.from_dict(trace)
    side = read(trace)
    sim = decode_simulator(trace.engine, trace.capacity)
    problems = trace_problems(trace, side)
    start = side.windows[START]
    rows = [{**_row(START, start, None, None, side), "output_tokens": 0}]
    steps = [{"caption": "start", "request": None, "phase": "start", "state": _empty_state(sim),
              "events": [text for _, text in start.texts]}]
    for index, mark in enumerate(trace.requests):
        if not mark.get("output"):
            raise ValueError(f"request {mark['request']} has no output token ids: not a decode trace")
        op = sim.decode(mark["request"], mark["tokens"], mark["output"], mark["block_tokens"])
        win = side.windows[mark["request"]]
        rows.append({**_row(mark["request"], win, op, mark.get("cached_tokens"), side),
                     "output_tokens": op.output_tokens})
        events = _vllm_events(win, op) if trace.engine == "vllm" else _sglang_events(win, op)
        steps += _steps(index, op, events)
    differences = [*DIFFERENCES[trace.engine], *window_differences(side)]
    table = pd.DataFrame(rows).astype({"engine_hit": "Int64", "sim_hit": "Int64"})
    return Replay(trace.engine, sim.unit, sim.unit_tokens, table, problems, differences, steps, side.hash_of)
