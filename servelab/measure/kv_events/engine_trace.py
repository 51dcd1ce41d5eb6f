"""The engine's side of the referee: a recorded trace cut into windows, one per request, every unit named by its
content.

What a message holds, as the engines build it:

* vLLM 0.32: ``BlockStored`` lists the hashes of blocks that just became full and cached, their parent's hash
  (``None`` for a prompt's first block) and their token ids, ``block_size`` per block (``cache_full_blocks`` in
  ``vllm/v1/core/block_pool.py``); ``BlockRemoved`` one hash, when a cached block is taken for new data
  (``_maybe_evict_cached_block``); ``AllBlocksCleared`` after ``reset_prefix_cache``.
  Hashes are the low 64 bits of vLLM's SHA-256 block hash as an integer (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, on
  by default; `maybe_convert_block_hash`).
* SGLang 0.5.23: one ``BlockStored`` per page of a node the insert adds, consecutive ones coalesced into one event
  when they chain (``record_store`` and ``enqueue`` in ``sglang/srt/mem_cache/events.py``; the CPU server builds the
  compiled ``RustUnifiedTreeCore``, whose ``record_store_event`` reaches Python through ``_kv_event_from_tagged`` in
  ``sglang/srt/mem_cache/rust_tree_core/adapter.py``); ``BlockRemoved`` every page of a node eviction frees
  (``record_remove``); a node split emits nothing. Hashes are signed 64-bit integers.

Every stored unit is renamed ``chain(key of its parent, its tokens)``; a removed hash gets the key it was stored
under. A unit whose parent, or a removal whose hash, was never seen in the trace keeps ``None``: the referee counts
it as a disagreement rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servelab.measure.kv_events.keys import ROOT, chain, short_hash
from servelab.measure.kv_events.record import Trace

BEFORE, START = "before", "start"


@dataclass
class Window:
    """The engine's events between two marks: ``stored`` and ``removed`` content keys (None: unknown), with the
    engine's hashes beside them, ``cleared`` (AllBlocksCleared), one line of text per event (``texts``:
    (event type, words)) and, beside each text, the content keys it covers (``units``)."""

    name: str
    stored: list[str | None] = field(default_factory=list)
    removed: list[str | None] = field(default_factory=list)
    stored_hashes: list[str] = field(default_factory=list)
    removed_hashes: list[str] = field(default_factory=list)
    cleared: int = 0
    texts: list[tuple[str, str]] = field(default_factory=list)
    units: list[list[str | None]] = field(default_factory=list)


@dataclass
class EngineSide:
    """Every window in order (``before``, ``start``, then one per request), the engine hash of each content key,
    and what is wrong with the trace itself (``problems``)."""

    windows: dict[str, Window]
    hash_of: dict[str, str]
    problems: list[str]
    lost_before: int = 0  # messages sent before the window that the subscriber never received


def _window_of(trace: Trace, ts: float) -> str:
    if ts < trace.begin:
        return BEFORE
    name = START
    for mark in trace.requests:
        if ts >= mark["send"]:
            name = mark["request"]
    return name


def _span(hashes: list[str]) -> str:
    return short_hash(hashes[0]) + (f"..{short_hash(hashes[-1])}" if len(hashes) > 1 else "")


def _store(event: dict[str, Any], win: Window, keys: dict[str, str], hash_of: dict[str, str], engine: str,
           unit: int, problems: list[str]) -> None:
    hashes, tokens, size = event["block_hashes"], event["token_ids"], event["block_size"]
    if size != unit or len(tokens) != len(hashes) * size:
        problems.append(f"{win.name}: a BlockStored of {len(hashes)} hashes, {len(tokens)} tokens, block_size {size}, "
                        f"where whole {unit}-token units were expected")
    parent = event["parent_block_hash"]
    key: str | None = ROOT if parent is None else keys.get(parent)
    prev = parent
    for i, h in enumerate(hashes):
        key = chain(key, tokens[i * size:(i + 1) * size]) if key is not None else None
        if key is not None:
            keys[h] = key
            hash_of.setdefault(key, h)
        win.stored.append(key)
        win.stored_hashes.append(h)
        if engine == "vllm":
            via = f"parent {short_hash(prev)}, " if prev is not None else ""
            win.texts.append(("BlockStored", f"stored {short_hash(h)} ({via}{size} tokens)"))
            win.units.append([key])
        prev = h
    if engine != "vllm" and hashes:
        via = f"parent {short_hash(parent)}, " if parent is not None else ""
        win.texts.append(("BlockStored", f"stored {_span(hashes)} ({via}{len(tokens)} tokens)"))
        win.units.append(win.stored[-len(hashes):])


def read(trace: Trace) -> EngineSide:
    """Cut ``trace`` into windows by its marks (engine time ``ts`` against the client's send times) and name every
    stored and removed unit by content."""
    unit = trace.capacity["block_size"]
    windows = {name: Window(name) for name in (BEFORE, START, *(m["request"] for m in trace.requests))}
    keys: dict[str, str] = {}
    hash_of: dict[str, str] = {}
    problems: list[str] = []
    messages = sorted(trace.messages, key=lambda m: m["seq"])
    seqs = [m["seq"] for m in messages]
    if seqs and seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        problems.append(f"sequence numbers {seqs[0]}..{seqs[-1]} have gaps: {len(seqs)} messages received")
    # A subscriber can miss what a publisher sent before their connection was up. Before a recording window that
    # opened with a flush, that changes nothing the referee compares (the flush must then be seen, see `replay`);
    # anywhere else it is a problem.
    lost_before = seqs[0] if seqs and seqs[0] != 0 and trace.flushed and messages[0]["ts"] < trace.begin else 0
    if seqs and seqs[0] != 0 and not lost_before:
        problems.append(f"the first {seqs[0]} messages were not received")
    for message in messages:
        win = windows[_window_of(trace, message["ts"])]
        for event in message["events"]:
            kind = event["type"]
            if kind == "BlockStored":
                _store(event, win, keys, hash_of, trace.engine, unit, problems)
            elif kind == "BlockRemoved":
                hashes = event["block_hashes"]
                removed = [keys.get(h) for h in hashes]
                win.removed += removed
                win.removed_hashes += hashes
                if trace.engine == "vllm":
                    win.texts += [("BlockRemoved", f"removed {short_hash(h)}") for h in hashes]
                    win.units += [[key] for key in removed]
                elif hashes:
                    win.texts.append(("BlockRemoved", f"removed {_span(hashes)} ({len(hashes) * unit} tokens)"))
                    win.units.append(removed)
            elif kind == "AllBlocksCleared":
                win.cleared += 1
                win.texts.append((kind, "cleared"))
                win.units.append([])
            else:
                problems.append(f"{win.name}: an event of unknown type {kind!r}")
    _flush_to_start(trace, windows)
    return EngineSide(windows, hash_of, problems, lost_before)


def _flush_to_start(trace: Trace, windows: dict[str, Window]) -> None:
    """The flush's ``AllBlocksCleared`` belongs to the start window even when it is published with the first
    request's events: vLLM queues it until its next step (``reset_prefix_cache`` in ``block_pool.py``, published
    by ``update_from_output``), SGLang until its scheduler next goes idle or logs a prefill."""
    if not (trace.flushed and trace.requests) or windows[START].cleared:
        return
    first = windows[trace.requests[0]["request"]]
    if first.texts and first.texts[0][0] == "AllBlocksCleared":
        first.cleared -= 1
        windows[START].cleared += 1
        windows[START].texts.append(first.texts.pop(0))
        windows[START].units.append(first.units.pop(0))
