"""Chapter 03: a burst's throughput with prefix caching on and off, on one server, told apart by cache salts.

Both engines accept a per-request ``cache_salt`` (vLLM's OpenAI ``cache_salt``, mixed into the hash of
a request's first block and so, through the chain, of every block: ``vllm/v1/core/kv_cache_utils.py``;
SGLang's ``cache_salt``, part of every child key of its radix tree, ``RadixKey`` in
``sglang/srt/mem_cache/radix_cache.py``). A request whose salt no other request carries can share
nothing with any other, cached or in flight. So the same prompts sent at once, once without salts
(cache on) and once with a salt each (cache off), compare caching on and off on the same server.

Each run empties the cache first and then sends one more request with the shared prefix, unsalted and
untimed, so that the burst can find it cached, as it would on a server that has served that prompt before
(SGLang under its default ``fcfs`` does not share a prefix among requests prefilled in the same step). The
cache-off run sends it too: were a salt ignored, its requests would find the prefix (the check of zero
cached tokens can fail). Every request generates exactly ``output_tokens`` tokens (``min_tokens`` =
``max_tokens``), so the runs do the same decoding work. :func:`kv_needed` says whether the salted burst,
which holds one copy of the prefix per request, fits the KV cache at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from servelab.engines.client import run_load
from servelab.engines.server import Server
from servelab.integers import int_at_least
from servelab.machine.profiles import Profile
from servelab.measure.prefix_cache.live import counters, flush
from servelab.measure.prefix_cache.workloads import Message
from servelab.measure.rounds import every_round_above, spread

_FORBIDDEN = set("@/\\\x00")  # vLLM refuses a salt with these (validate_cache_salt), or longer than 128


def unique_salts(count: int, tag: str) -> list[str]:
    """``count`` different salts, accepted by both engines (``tag`` names the run)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    salts = [f"servelab-{tag}-{i}" for i in range(count)]
    if len(salts[-1]) > 128 or _FORBIDDEN & set(tag):
        raise ValueError(f"tag {tag!r} makes salts vLLM refuses (at most 128 characters, none of @ / \\ NUL)")
    return salts


def burst_size(profile: Profile, kv_tokens: int, request_tokens: int, most: int = 16) -> int:
    """Requests in the salted burst. 2 on the CPU, where prefilling one few-shot prefix takes longer than the
    burst's decoding. On a GPU one prefill takes milliseconds, so only many uncached copies of the prefix
    outweigh the decode steps' noise: as many as fill half of ``kv_tokens`` with requests of ``request_tokens``
    (prompt and output), at most ``most``, at least 2 (the chapter checks that the burst fits)."""
    if kv_tokens < 1 or request_tokens < 1:
        raise ValueError(f"need kv_tokens >= 1 and request_tokens >= 1; got {kv_tokens} and {request_tokens}")
    return 2 if profile.device == "cpu" else max(2, min(most, kv_tokens // 2 // request_tokens))


def request_options(count: int, output_tokens: int, salts: Sequence[str] | None) -> list[dict[str, Any]]:
    """Per request, the API's extra body: exactly ``output_tokens`` generated, and its salt if any."""
    if output_tokens < 1:
        raise ValueError(f"output_tokens must be >= 1, got {output_tokens}")
    if salts is not None and (len(salts) != count or len(set(salts)) != count):
        raise ValueError(f"need {count} different salts, got {list(salts)}")
    return [{"extra_body": {"min_tokens": output_tokens, **({"cache_salt": salts[i]} if salts else {})}}
            for i in range(count)]


def summarize(frame: pd.DataFrame, counted: dict[str, float]) -> dict[str, float]:
    """One run's totals: wall time from the first request sent to the last answer, rates, cached tokens."""
    seconds = float((frame.start_s + frame.latency_s).max() - frame.start_s.min())
    return {"requests": len(frame), "seconds": seconds, "requests/s": len(frame) / seconds,
            "output tokens": int(frame.completion_tokens.sum()),
            "output tokens/s": float(frame.completion_tokens.sum()) / seconds,
            "prompt tokens": int(frame.prompt_tokens.sum()), "largest prompt": int(frame.prompt_tokens.max()),
            "cached tokens (requests)": int(frame.cached_tokens.sum()),
            "prompt tokens (counter)": int(counted["queries"]), "cached tokens (counter)": int(counted["hits"])}


def burst(server: Server, warm: Sequence[Message], prompts: Sequence[Sequence[Message]], *, output_tokens: int,
          salted: bool) -> tuple[pd.DataFrame, dict[str, float]]:
    """Empty the cache, send ``warm`` alone (unsalted), then every prompt at once (``salted``: a salt each);
    rows and totals."""
    flush(server)
    run_load(server, [list(warm)], max_tokens=1, progress=False)
    options = request_options(len(prompts), output_tokens, unique_salts(len(prompts), "off") if salted else None)
    before = counters(server)
    frame = run_load(server, [list(p) for p in prompts], concurrency=len(prompts), max_tokens=output_tokens,
                     progress=False, per_request=options)
    after = counters(server)
    if (frame.completion_tokens != output_tokens).any():
        raise RuntimeError(f"{server.engine} generated {sorted(set(frame.completion_tokens))} tokens, "
                           f"not exactly {output_tokens}")
    return frame, summarize(frame, {k: after[k] - before[k] for k in after})


def on_off(server: Server, warm: Sequence[Message], prompts: Sequence[Sequence[Message]], *,
           output_tokens: int, rounds: int = 1) -> pd.DataFrame:
    """The burst with the cache on and off (a salt each), ``rounds`` times, the order turned round every
    round (on, off; off, on; ...) so neither always runs first; one row per run, indexed by ``round``, ``cache``."""
    rows = {}
    for r in range(int_at_least("rounds", rounds, 1)):
        order = (("on", False), ("off", True)) if r % 2 == 0 else (("off", True), ("on", False))
        for cache, salted in order:
            rows[(r, cache)] = burst(server, warm, prompts, output_tokens=output_tokens, salted=salted)[1]
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["round", "cache"])
    return table


def kv_needed(table: pd.DataFrame, output_tokens: int, unit: int) -> int:
    """KV tokens the salted burst of an ``on_off`` table holds at most when all its requests run at once: per
    request its largest prompt plus ``output_tokens``, in whole blocks (pages) of ``unit`` tokens, none
    shared. An upper bound: the last generated token is never written to the cache."""
    if unit < 1 or output_tokens < 1:
        raise ValueError(f"need unit >= 1 and output_tokens >= 1; got {unit} and {output_tokens}")
    off = table.xs("off", level="cache")
    per_request = -(-(int(off["largest prompt"].max()) + output_tokens) // unit) * unit
    return int(off["requests"].max()) * per_request


def ratios(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per engine (``runs``: its ``on_off`` table): throughput with the cache on / off, the median of one
    ratio per round with the lowest and highest round, and cached tokens over all rounds."""
    rows = {}
    for engine, t in runs.items():
        on, off = t.xs("on", level="cache"), t.xs("off", level="cache")
        per_round = on["requests/s"] / off["requests/s"]
        ratio = spread(per_round.tolist())
        rows[engine] = {
            "rounds": ratio["rounds"], "requests/s on/off": ratio["median"], "lowest round": ratio["lowest"],
            "highest round": ratio["highest"], "on ahead in every round": every_round_above(per_round.tolist()),
            "cached tokens on": int(on["cached tokens (requests)"].sum()),
            "cached tokens off": int(off["cached tokens (requests)"].sum()),
            "cached tokens on (counter)": int(on["cached tokens (counter)"].sum()),
            "cached tokens off (counter)": int(off["cached tokens (counter)"].sum())}
    return pd.DataFrame.from_dict(rows, orient="index")
