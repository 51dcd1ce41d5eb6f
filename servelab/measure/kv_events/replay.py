"""The referee: a recorded trace of an engine's KV cache events against the same requests replayed on our cache.

Per request it compares what the engine published (``engine_trace``) with what our simulator did (``sims``): the
units stored and the units removed, each named by content so that the engines' hashes and ours need not agree,
compared as multisets (a vLLM block recomputed and stored again counts twice on both sides), and the hit: the
cached tokens the engine reported for the request against the simulator's. The window before the first request
must hold nothing but the flush's ``AllBlocksCleared``; a flush inside a request, a gap in the sequence numbers,
a unit whose parent or hash the trace never introduced, or a partial unit is a problem, and any problem, like
any row that differs, makes the replay disagree. What the comparison cannot see is listed in ``differences``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from servelab.measure.kv_events.engine_trace import BEFORE, START, EngineSide, Window, read
from servelab.measure.kv_events.keys import short_hash
from servelab.measure.kv_events.record import Trace
from servelab.measure.kv_events.sims import Op, SglangSim, VllmSim, simulator

# What the referee does not compare, said once per engine.
DIFFERENCES = {
    "vllm": [
        "Block ids are not compared: the events carry no block id, so a block is named by its content.",
        "The simulator's pool is the usable blocks: vLLM's null block (block 0, block_pool.py) is left out.",
        "Only requests sent one at a time, asking for one token, without chunked prefill, are modelled.",
    ],
    "sglang": [
        "SGLang's default tree core is compiled (RustUnifiedTreeCore, which this CPU server runs); "
        "the simulator follows the rules of "
        "SGLang's Python trees (radix_cache.py, unified_tree_core.py), so the trace is what shows they agree.",
        "Nodes are not compared: a node split emits no event, so pages are compared, each named by its content.",
        "Only requests sent one at a time, asking for one token, are modelled; with more output tokens SGLang "
        "also inserts the output (release_kv_cache inserts the committed KV).",
    ],
}
# When each engine's events happen for a one-token request: (event type, step phase). vLLM evicts and caches while
# scheduling the request (allocate_slots); SGLang evicts while allocating for its prefill and inserts the prompt
# when the request is released (release_kv_cache).
PHASE = {"vllm": {"BlockStored": "admitted", "BlockRemoved": "admitted", "AllBlocksCleared": "admitted"},
         "sglang": {"BlockStored": "finished", "BlockRemoved": "admitted", "AllBlocksCleared": "admitted"}}


@dataclass
class Replay:
    """The referee's verdict: ``table`` one row per request (and the start window), ``problems`` with the trace,
    ``differences`` it cannot see, and ``steps``, the simulator's cache beside the engine's events, for figures."""

    engine: str
    unit: str
    unit_tokens: int
    table: pd.DataFrame
    problems: list[str]
    differences: list[str]
    steps: list[dict[str, Any]] = field(default_factory=list)
    hash_of: dict[str, str] = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        """True when every row matches and the trace has no problem."""
        return bool(self.table["match"].all()) and not self.problems


def _diff(engine: list[str | None], sim: list[str], hash_of: dict[str, str]) -> str:
    extra, missing = Counter(engine) - Counter(sim), Counter(sim) - Counter(engine)

    def named(keys: Counter) -> str:
        return ", ".join((short_hash(hash_of.get(k)) if k in hash_of else "unknown" if k is None else "unseen") +
                         (f" x{n}" if n > 1 else "") for k, n in keys.items())

    return "; ".join(part for part in (f"engine only: {named(extra)}" if extra else "",
                                       f"simulator only: {named(missing)}" if missing else "") if part)


def _row(name: str, win: Window, op: Op | None, reported: int | None, side: EngineSide) -> dict[str, Any]:
    sim_stored, sim_removed = (op.stored, op.removed) if op else ([], [])
    stored_ok = Counter(win.stored) == Counter(sim_stored)
    removed_ok = Counter(win.removed) == Counter(sim_removed)
    hit_ok = op is None or reported == op.hit_tokens  # a hit the engine did not report is not a match
    notes = [f"stored: {_diff(win.stored, sim_stored, side.hash_of)}" if not stored_ok else "",
             f"removed: {_diff(win.removed, sim_removed, side.hash_of)}" if not removed_ok else "",
             (f"hit: engine {reported}, simulator {op.hit_tokens}" if reported is not None else
              "hit: the engine did not report its cached tokens") if not hit_ok and op else "",
             f"{win.cleared} AllBlocksCleared inside the request" if op and win.cleared else ""]
    return {"request": name, "prompt_tokens": op.prompt_tokens if op else 0,
            "engine_hit": reported, "sim_hit": op.hit_tokens if op else None,
            "engine_stored": len(win.stored), "sim_stored": len(sim_stored),
            "engine_removed": len(win.removed), "sim_removed": len(sim_removed),
            "match": stored_ok and removed_ok and hit_ok and not (op and win.cleared),
            "note": "; ".join(n for n in notes if n)}


def page_problems(trace: Trace) -> list[str]:
    """What the simulators cannot model in ``trace``'s server: SGLang pages of more than one token."""
    page = trace.capacity["block_size"]
    if trace.engine == "sglang" and page != 1:
        return [f"SGLang served pages of {page} tokens; this referee models pages of 1"]
    return []


def trace_problems(trace: Trace, side: EngineSide) -> list[str]:
    """What is wrong with ``trace`` before any request is compared: pages the simulators cannot model, the
    trace's own problems (gaps, unknown parents, a flush inside a request) and a flush that was not one clear."""
    problems = [*page_problems(trace), *side.problems]
    cleared = side.windows[START].cleared
    if trace.flushed and cleared != 1:
        problems.append(f"the flush before the first request gave {cleared} AllBlocksCleared, not 1")
    return problems


def window_differences(side: EngineSide) -> list[str]:
    """What the recording window leaves out: events before it, and messages sent before the recording connected."""
    out = []
    if side.windows[BEFORE].texts:
        out.append(f"{len(side.windows[BEFORE].texts)} events before the recording window are not replayed.")
    if side.lost_before:
        out.append(f"The first {side.lost_before} message(s), sent before the recording connected, were not "
                   "received; the flush that opened the window makes them irrelevant.")
    return out


def _events(engine: str, win: Window, phase: str) -> list[str]:
    return [text for kind, text in win.texts if PHASE[engine].get(kind) == phase]


def _empty_state(sim: VllmSim | SglangSim) -> list[dict[str, Any]]:
    return sim.blocks() if isinstance(sim, VllmSim) else sim.nodes()


def replay(trace: Trace | dict[str, Any]) -> Replay:
    """Referee ``trace`` (a :class:`Trace` or its dict): replay its requests on our cache of the engine's kind, at
    the size the server reported, and compare request by request."""
    trace = trace if isinstance(trace, Trace) else Trace.from_dict(trace)
    side = read(trace)
    sim = simulator(trace.engine, trace.capacity)
    problems = trace_problems(trace, side)
    start = side.windows[START]
    rows = [_row(START, start, None, None, side)]
    steps = [{"caption": "start", "request": None, "phase": "start", "state": _empty_state(sim),
              "events": [text for _, text in start.texts]}]
    for index, mark in enumerate(trace.requests):
        op = sim.run(mark["request"], mark["tokens"])
        win = side.windows[mark["request"]]
        rows.append(_row(mark["request"], win, op, mark.get("cached_tokens"), side))
        for phase, state in (("admitted", op.admitted), ("finished", op.finished)):
            steps.append({"caption": f"request {index} {phase}", "request": index, "phase": phase, "state": state,
                          "events": _events(trace.engine, win, phase)})
    differences = [*DIFFERENCES[trace.engine], *window_differences(side)]
    table = pd.DataFrame(rows).astype({"engine_hit": "Int64", "sim_hit": "Int64"})
    return Replay(trace.engine, sim.unit, sim.unit_tokens, table, problems, differences, steps, side.hash_of)
