"""A figure a reader can scrub without a kernel: a recorded KV-cache event trace, step by step.

The trace is vLLM's and SGLang's KV-cache events replayed on the same requests, one step per moment worth
seeing (step 0: empty caches; then, per request, "admitted" and "finished"):

    {"steps": [{"caption": "request 3 admitted", "request": 3, "phase": "admitted" | "finished" | "start",
                "vllm": {"blocks": [{"id": 0, "state": "free" | "used" | "cached", "hash": "a1b2c3" | None,
                                     "parent": "d4e5f6" | None, "tokens": 128}, ...],
                         "events": ["stored a1b2c3 (parent d4e5f6, 128 tokens)", "removed 9f8e7d"]},
                "sglang": {"nodes": [{"id": 1, "parent": 0 | None, "label": "first tokens…", "tokens": 128,
                                      "state": "cached" | "locked" | "evicted"}, ...],
                           "events": [...]}}, ...]}

`scrubber_html` turns it into one self-contained HTML fragment: the trace as JSON, the drawing code
(`kv_event_figure.js`) and its style (`kv_event_figure.css`) inline, nothing fetched when the page is read. It
draws vLLM's block pool (free / in use / cached blocks, each hashed block's short hash and an arrow to its
parent block: the hash chain) beside SGLang's radix tree (shared prefixes as shared ancestors, evicted nodes
dashed and struck through), each with that step's engine events, under a step slider, previous / next and
play / pause. A notebook cell shows it with `scrubber(...)`, whose PNG twin (`last_frame_png`, the last step
drawn by matplotlib) is what a PDF or any viewer without HTML shows. Every word a reader sees comes from
`labels` (`default_labels()`: this module's messages, in the reader's language); the step caption is built
from the step's phase and request, and the data's own caption is used only for a phase the labels do not name.
The engine events are shown as recorded.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes

from servelab.book import kv_event_frame
from servelab.book.i18n import N_
from servelab.book.plots import label

HERE = Path(__file__).parent
SCRIPT, STYLE = HERE / "kv_event_figure.js", HERE / "kv_event_figure.css"
PHASES = ("start", "admitted", "finished")
BLOCK_STATES = ("free", "used", "cached")
NODE_STATES = ("cached", "locked", "evicted")
LABELS = {
    "vllm": N_("vLLM: block pool"), "sglang": N_("SGLang: radix tree"), "events": N_("engine events in this step"),
    "no_events": N_("no events"), "previous": N_("previous"), "next": N_("next"), "play": N_("play"),
    "pause": N_("pause"), "step": N_("step"), "step_of": N_("step {step} of {steps}"),
    "phase_start": N_("empty caches"), "phase_admitted": N_("request {request} admitted"),
    "phase_finished": N_("request {request} finished"),
    "free": N_("free"), "used": N_("in use"), "cached": N_("cached"), "locked": N_("locked"), "evicted": N_("evicted"),
    "in_use_or_locked": N_("in use (vLLM) / locked (SGLang)"), "chain": N_("to the parent block (hash chain)"),
    "root": N_("root"), "tokens": N_("tokens"), "block": N_("block"), "hash": N_("hash"), "parent": N_("parent"),
    "needs_js": N_("Moving between steps needs JavaScript, which this viewer does not run."),
}
_figures = itertools.count(1)  # figures made in this process: part of each figure's id


def default_labels() -> dict[str, str]:
    """Every word the figure shows, in the reader's language (`plots.label`), keyed as in `LABELS`."""
    return {key: label(text) for key, text in LABELS.items()}


def _labels(given: Mapping[str, str] | None) -> dict[str, str]:
    unknown = sorted(set(given or {}) - set(LABELS))
    if unknown:
        raise ValueError(f"unknown label keys {', '.join(unknown)}; known: {', '.join(LABELS)}")
    return {**default_labels(), **(given or {})}


def _int(value: Any, where: str, *, none: bool = False) -> int | None:
    if (value is None and none) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"{where} must be an integer{' or None' if none else ''}, got {value!r}")


def _text(value: Any, where: str, *, none: bool = False) -> str | None:
    if (value is None and none) or isinstance(value, str):
        return value
    raise ValueError(f"{where} must be a string{' or None' if none else ''}, got {value!r}")


def _choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ValueError(f"{where} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _events(side: Mapping[str, Any], where: str) -> list[str]:
    events = side.get("events", [])
    if not isinstance(events, list):
        raise ValueError(f"{where}.events must be a list of strings")
    return [_text(e, f"{where}.events[{i}]") for i, e in enumerate(events)]


def _unique(items: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    ids = [i["id"] for i in items]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{where}: ids repeat ({sorted(i for i in ids if ids.count(i) > 1)})")
    return items


def trace_steps(trace: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The steps of `trace` (the recorder's `{"steps": [...]}` or the list itself), checked and reduced to the
    fields the figure draws; a ValueError names the first field that is missing or of the wrong kind."""
    steps = trace.get("steps") if isinstance(trace, Mapping) else trace
    if not isinstance(steps, Sequence) or isinstance(steps, str) or not steps:
        raise ValueError("a KV event trace needs a non-empty list of steps ({'steps': [...]})")
    out = []
    for k, step in enumerate(steps):
        at = f"steps[{k}]"
        if not isinstance(step, Mapping) or not isinstance(step.get("vllm"), Mapping) or not isinstance(
                step.get("sglang"), Mapping):
            raise ValueError(f"{at} must be a mapping with 'vllm' and 'sglang' mappings")
        vllm, sglang = step["vllm"], step["sglang"]
        if not isinstance(vllm.get("blocks"), list) or not isinstance(sglang.get("nodes"), list):
            raise ValueError(f"{at} needs vllm.blocks and sglang.nodes lists")
        blocks = [{"id": _int(b.get("id"), f"{at}.vllm.blocks[{i}].id"),
                   "state": _choice(b.get("state"), BLOCK_STATES, f"{at}.vllm.blocks[{i}].state"),
                   "hash": _text(b.get("hash"), f"{at}.vllm.blocks[{i}].hash", none=True),
                   "parent": _text(b.get("parent"), f"{at}.vllm.blocks[{i}].parent", none=True),
                   "tokens": _int(b.get("tokens", 0), f"{at}.vllm.blocks[{i}].tokens")}
                  for i, b in enumerate(vllm["blocks"])]
        nodes = [{"id": _int(n.get("id"), f"{at}.sglang.nodes[{i}].id"),
                  "parent": _int(n.get("parent"), f"{at}.sglang.nodes[{i}].parent", none=True),
                  "label": _text(n.get("label", ""), f"{at}.sglang.nodes[{i}].label"),
                  "tokens": _int(n.get("tokens", 0), f"{at}.sglang.nodes[{i}].tokens"),
                  "state": _choice(n.get("state"), NODE_STATES, f"{at}.sglang.nodes[{i}].state")}
                 for i, n in enumerate(sglang["nodes"])]
        out.append({"caption": _text(step.get("caption", ""), f"{at}.caption"),
                    "request": _int(step.get("request"), f"{at}.request", none=True),
                    "phase": _text(step.get("phase", ""), f"{at}.phase"),
                    "vllm": {"blocks": _unique(blocks, f"{at}.vllm.blocks"), "events": _events(vllm, f"{at}.vllm")},
                    "sglang": {"nodes": _unique(nodes, f"{at}.sglang.nodes"),
                               "events": _events(sglang, f"{at}.sglang")}})
    return out


def caption(step: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """The step's caption in the labels' language (the JavaScript builds the same one)."""
    phrase = labels.get(f"phase_{step['phase']}") if step["phase"] in PHASES else None
    if phrase and (step["phase"] == "start" or step["request"] is not None):
        return phrase.replace("{request}", str(step["request"]))
    return step["caption"]


def _json(payload: Any) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' that could end it or open a comment."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def scrubber_html(trace: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, title: str = "",
                  labels: Mapping[str, str] | None = None, figure_id: str | None = None) -> str:
    """The scrubbable figure as one HTML fragment (style, data and script inline); `title` is shown as given
    (translate it with `plots.label`), `labels` overrides some of `default_labels()`, and `figure_id` (default:
    a hash of the content and a per-process counter) prefixes every element id, so figures on one page never
    share one."""
    steps, words = trace_steps(trace), _labels(labels)
    payload = {"steps": steps, "labels": words}
    fid = figure_id or f"slkv-{hashlib.sha1(_json([title, payload]).encode()).hexdigest()[:10]}-{next(_figures)}"
    w = {k: html.escape(v) for k, v in words.items()}
    legend = "".join(f'<span><i class="slkv-{cls}"></i>{w[key]}</span>' for cls, key in (
        ("free", "free"), ("used", "in_use_or_locked"), ("cached", "cached"), ("evicted", "evicted"),
        ("arrow", "chain")))
    panels = "".join(
        f'<div class="slkv-panel slkv-{side}"><div class="slkv-head">{w[side]}</div>'
        f'<div class="slkv-summary" data-role="{side}-summary"></div>'
        f'<svg data-role="{side}-svg" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{w[side]}"></svg>'
        f'<div class="slkv-evhead">{w["events"]}</div><ol class="slkv-events" data-role="{side}-events"></ol></div>'
        for side in ("vllm", "sglang"))
    return (
        f'<div class="slkv tex2jax_ignore mathjax_ignore" id="{html.escape(fid)}" data-frames="{len(steps)}" '
        'data-step="0">'
        f"<style>{STYLE.read_text()}</style>"
        f'<script type="application/json" class="slkv-data">{_json(payload)}</script>'
        + (f'<div class="slkv-title">{html.escape(title)}</div>' if title else "")
        + f'<div class="slkv-controls" data-role="controls">'
        f'<button type="button" data-role="prev" disabled>\u25c0 {w["previous"]}</button>'
        f'<button type="button" data-role="play" disabled>\u25b6 {w["play"]}</button>'
        f'<button type="button" data-role="next" disabled>{w["next"]} \u25b6</button>'
        f'<input type="range" data-role="slider" min="0" max="{len(steps) - 1}" step="1" value="0" '
        f'aria-label="{w["step"]}" disabled>'
        f'<span class="slkv-counter" data-role="counter"></span></div>'
        f'<div class="slkv-nojs" data-role="nojs">{w["needs_js"]}</div>'
        f'<div class="slkv-caption" data-role="caption">{html.escape(caption(steps[0], words))}</div>'
        f'<div class="slkv-panels">{panels}</div><div class="slkv-legend">{legend}</div></div>'
        f"<script>(function () {{\n{SCRIPT.read_text()}\n"
        f'servelabKvFigure(document.getElementById("{html.escape(fid)}"));\n}})();</script>')


def last_frame_png(trace: Mapping[str, Any] | Sequence[Mapping[str, Any]], target: str | Path | Axes,
                   labels: Mapping[str, str] | None = None) -> Path | Axes:
    """The trace's last step as a static picture (block pool beside radix tree, caption as title): drawn on
    `target` when it is an Axes (returned), else saved as a PNG at that path (returned as a Path)."""
    steps, words = trace_steps(trace), _labels(labels)
    return kv_event_frame.draw(steps[-1], caption(steps[-1], words), words, target)


@dataclass(frozen=True)
class Scrubber:
    """A notebook cell's value that displays the scrubber: HTML where HTML runs, the last step's PNG elsewhere
    (the PDF build, a viewer without HTML)."""

    trace: Any = field(repr=False)
    title: str = ""
    labels: Mapping[str, str] | None = field(default=None, repr=False)

    def _repr_html_(self) -> str:
        return scrubber_html(self.trace, title=self.title, labels=self.labels)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        steps = trace_steps(self.trace)
        return {"text/html": self._repr_html_(), "image/png": kv_event_frame.png_bytes(
            steps[-1], caption(steps[-1], _labels(self.labels)), _labels(self.labels)),
            "text/plain": f"<KV event scrubber: {len(steps)} steps>"}


def scrubber(trace: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, title: str = "",
             labels: Mapping[str, str] | None = None) -> Scrubber:
    """The figure for a notebook cell (its last expression): `kv_event_figure.scrubber(trace, title=...)`."""
    trace_steps(trace)  # fail in the cell that made it, not when it is displayed
    return Scrubber(trace, title, labels)
