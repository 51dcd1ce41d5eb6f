"""A replay as the steps of a figure: the caches before the first request, then each request admitted and finished.

The contract (``servelab/book/kv_event_figure.py`` draws it), JSON-able::

    {"steps": [{"caption": "request 3 admitted", "request": 3, "phase": "start" | "admitted" | "finished",
                "vllm": {"blocks": [{"id", "state": "free" | "used" | "cached", "hash", "parent", "tokens"}],
                         "events": ["stored a1b2c3 (parent d4e5f6, 128 tokens)", "removed 9f8e7d"]},
                "sglang": {"nodes": [{"id", "parent", "label", "tokens", "state": "cached" | "locked" | "evicted"}],
                           "events": [...]}}]}

``blocks`` and ``nodes`` are the simulator's cache, replayed (the referee shows it agrees with the engine);
``events`` are the engine's own events of that step, hashes cut to their first 6 hex digits (the engine's hash of
a block the simulator holds is the one the engine published for the same content). An engine's events of a
request go to the phase in which the engine emits them (``replay.PHASE``; for requests that decode, the steps
``paging_replay`` places them in). Words are few and plain English: the
caller translates captions and event words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servelab.measure.kv_events.keys import short_hash
from servelab.measure.kv_events.replay import Replay


def _blocks(state: list[dict[str, Any]], hash_of: dict[str, str]) -> list[dict[str, Any]]:
    # Numbered as vLLM numbers them: its block 0 is the null block, so the usable pool (ours) starts at 1, and new
    # blocks are taken in the same order from both.
    return [{"id": b["id"] + 1, "state": b["state"],
             "hash": short_hash(hash_of.get(b["key"])) if b["key"] else None,
             "parent": short_hash(hash_of.get(b["parent"])) if b["parent"] else None,
             "tokens": b["tokens"]} for b in state]


def where(first: Sequence[int], tokens: int, sequences: Sequence[Sequence[int]]) -> str | None:
    """Where a node's tokens first appear: "r2 128–255" (request 2, its tokens 128 to 255), or None."""
    n = len(first)
    for r, seq in enumerate(sequences):
        for o in range(len(seq) - n + 1):
            if list(seq[o:o + n]) == list(first):
                return f"r{r} {o}–{o + tokens - 1}"
    return None


def _nodes(state: list[dict[str, Any]], sequences: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    return [{"id": n["id"], "parent": n["parent"],
             "label": where(n["first"], n["tokens"], sequences)
             or " ".join(map(str, n["first"])) + ("…" if n["tokens"] > len(n["first"]) else ""),
             "tokens": n["tokens"], "state": n["state"]} for n in state]


def frames(vllm: Replay | None = None, sglang: Replay | None = None,
           sequences: Sequence[Sequence[int]] = ()) -> dict[str, list[dict[str, Any]]]:
    """The figure's steps from the two engines' replays of the same requests (either may be left out). With the
    requests' token sequences (prompt, then output), each radix node is labelled by where its tokens first appear
    ("r2 128–255": request 2, its tokens 128 to 255) instead of by its first token ids."""
    given = [r for r in (vllm, sglang) if r is not None]
    if not given:
        raise ValueError("frames needs at least one replay (vllm=..., sglang=...)")
    for name, r in (("vllm", vllm), ("sglang", sglang)):
        if r is not None and r.engine != name:
            raise ValueError(f"the {name} replay is of {r.engine!r}")
    if vllm is not None and sglang is not None and len(vllm.steps) != len(sglang.steps):
        raise ValueError(f"the replays have {len(vllm.steps)} and {len(sglang.steps)} steps: not the same requests")
    steps = []
    for i, first in enumerate(given[0].steps):
        step: dict[str, Any] = {k: first[k] for k in ("caption", "request", "phase")}
        if vllm is not None:
            step["vllm"] = {"blocks": _blocks(vllm.steps[i]["state"], vllm.hash_of), "events": vllm.steps[i]["events"]}
        if sglang is not None:
            step["sglang"] = {"nodes": _nodes(sglang.steps[i]["state"], sequences), "events": sglang.steps[i]["events"]}
        steps.append(step)
    return {"steps": steps}
