"""A synthetic KV event trace in the recorder's shape (see servelab/book/kv_event_figure.py), for the figure's tests.

Requests share a system prompt, two of them a question too, and run one after another. vLLM's side: a pool of
`pool` blocks; each full block of a prompt is hashed from its parent's hash and its tokens, found again if cached,
else stored in a free block (a cached one is evicted, oldest first, when no block is empty); the last, partly
filled block is never hashed. SGLang's side: a tree of prompt segments, the running request's path locked, leaves
evicted oldest first beyond `capacity` tokens (an evicted node stays in the list, marked evicted).
"""

from __future__ import annotations

import hashlib

BLOCK = 16
SEGMENTS = {"sys": ("You are a helpful assistant.", 32), "q1": ("Summarise the report", 16),
            "q2": ("Translate this letter", 32), "q3": ("List three risks", 16), "a": ("in one line", 5),
            "b": ("for a child", 7), "c": ("with sources", 9)}
PROMPTS = [["sys", "q1", "a"], ["sys", "q2", "b"], ["sys", "q1", "c"], ["sys", "q3", "a"], ["q2", "c"],
           ["sys", "q2", "a"]]


def _hash(parent: str | None, tokens: tuple) -> str:
    return hashlib.sha1(repr((parent, tokens)).encode()).hexdigest()[:6]


def synthetic_trace(requests: int = 5, pool: int = 10, capacity: int = 110) -> dict:
    blocks = [{"id": i, "state": "free", "hash": None, "parent": None, "tokens": 0, "last": -1} for i in range(pool)]
    nodes: list[dict] = [{"id": 0, "parent": None, "label": "", "tokens": 0, "state": "cached", "last": -1}]
    steps: list[dict] = []

    def snapshot(caption: str, request: int | None, phase: str, vllm_events: list, sglang_events: list) -> None:
        steps.append({"caption": caption, "request": request, "phase": phase,
                      "vllm": {"blocks": [{k: b[k] for k in ("id", "state", "hash", "parent", "tokens")}
                                          for b in blocks], "events": vllm_events},
                      "sglang": {"nodes": [{k: n[k] for k in ("id", "parent", "label", "tokens", "state")}
                                           for n in nodes], "events": sglang_events}})

    snapshot("empty caches", None, "start", [], [])
    for r in range(requests):
        prompt = PROMPTS[r % len(PROMPTS)]
        tokens = tuple(t for seg in prompt for t in [seg] * SEGMENTS[seg][1])
        v_events: list[str] = []
        parent, mine = None, []
        for start in range(0, len(tokens), BLOCK):
            chunk = tokens[start:start + BLOCK]
            full = len(chunk) == BLOCK
            h = _hash(parent, chunk) if full else None
            found = next((b for b in blocks if h and b["hash"] == h), None)
            if found is None:
                empty = [b for b in blocks if b["state"] == "free"]
                found = empty[0] if empty else min((b for b in blocks if b["state"] == "cached"),
                                                   key=lambda b: b["last"])
                if found["hash"]:
                    v_events.append(f"removed {found['hash']}")
                found.update(hash=h, parent=parent if full else None, tokens=len(chunk))
                if full:
                    v_events.append(f"stored {h} (parent {parent}, {BLOCK} tokens)" if parent else
                                    f"stored {h} ({BLOCK} tokens)")
            found.update(state="used", last=r)
            mine.append(found)
            parent = h
        s_events: list[str] = []
        at = nodes[0]
        for seg in prompt:
            child = next((n for n in nodes if n["parent"] == at["id"] and n["label"] == SEGMENTS[seg][0]
                          and n["state"] != "evicted"), None)
            if child is None:
                child = {"id": len(nodes), "parent": at["id"], "label": SEGMENTS[seg][0], "tokens": SEGMENTS[seg][1],
                         "state": "cached", "last": r}
                nodes.append(child)
                s_events.append(f"stored node {child['id']} ({child['tokens']} tokens)")
            child.update(state="locked", last=r)
            at = child
        while sum(n["tokens"] for n in nodes if n["state"] != "evicted") > capacity:
            leaves = [n for n in nodes[1:] if n["state"] == "cached" and not any(
                c["parent"] == n["id"] and c["state"] != "evicted" for c in nodes)]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: n["last"])
            victim["state"] = "evicted"
            s_events.append(f"removed node {victim['id']} ({victim['tokens']} tokens)")
        snapshot(f"request {r} admitted", r, "admitted", v_events, s_events)
        for b in mine:
            b.update(state="cached" if b["hash"] else "free", tokens=b["tokens"] if b["hash"] else 0)
        for n in nodes:
            if n["state"] == "locked":
                n["state"] = "cached"
        snapshot(f"request {r} finished", r, "finished", [], [])
    return {"steps": steps}
