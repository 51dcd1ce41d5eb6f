"""Chapter 04's calculations on recorded token ids: sweeps, budgets and the exercises' tables.

Every function here replays token ids on our two caches through
:func:`servelab.measure.prefix_cache.live.predict_hits` (strictly sequential requests, each finished
before the next, no chunked prefill, no output tokens cached), or, for :func:`concurrent_fit`, holds
requests at once. ``cache`` is ``"block"`` (vLLM's hash-chained blocks) or ``"radix"`` (SGLang's tree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from servelab.measure.prefix_cache.live import predict_hits
from servelab.measure.rounds import every_round_above, spread
from servelab.sim.prefix_cache import BlockHashCache, RadixTree

Tokens = Sequence[Sequence[int]]


def hit_rate(cache: str, prompts: Tokens, *, block_size: int = 1, capacity: int) -> float:
    """Cached / prompt tokens over ``prompts`` sent one after another."""
    return sum(predict_hits(cache, prompts, block_size=block_size, capacity=capacity)) / sum(map(len, prompts))


def block_size_sweep(workloads: Mapping[str, Tokens], sizes: Sequence[int], capacity: int) -> pd.DataFrame:
    """Hit rate per workload and block size; size 1 is SGLang's tree (page size 1). One row each."""
    return pd.DataFrame([{"workload": name, "block size": size,
                          "hit rate": hit_rate("radix" if size == 1 else "block", prompts, block_size=size,
                                               capacity=capacity)}
                         for name, prompts in workloads.items() for size in sizes])


def eviction_sweep(loop: Tokens, caches: Mapping[str, tuple[str, int, int]]) -> pd.DataFrame:
    """A loop over ``n`` documents read twice, for n = 1 .. len(loop) // 2 (``loop``: every document
    once, then every document again, in the same order). ``caches``: label -> (cache, capacity, block size).

    One row per (n, cache): the first round's prompt tokens over the capacity (each prompt counted
    whole, a shared chat template once per document), and the second round's hit rate.
    """
    most = len(loop) // 2
    if most < 1 or len(loop) != 2 * most:
        raise ValueError(f"loop must hold every document twice (an even, non-zero count), got {len(loop)} prompts")
    rows = []
    for n in range(1, most + 1):
        prompts = list(loop[:n]) + list(loop[most:most + n])
        for label, (cache, capacity, size) in caches.items():
            hits = predict_hits(cache, prompts, block_size=size, capacity=capacity)
            rows.append({"documents": n, "cache": label,
                         "working set / capacity": sum(map(len, prompts[:n])) / capacity,
                         "second-round hit rate": sum(hits[n:]) / sum(map(len, prompts[n:]))})
    return pd.DataFrame(rows)


def smallest_budget(cache: str, prompts: Tokens, first_round: int, *, block_size: int = 1,
                    limit: int) -> int | None:
    """The smallest usable KV (tokens, a multiple of ``block_size``) at which the prompts after the first
    ``first_round`` find as many cached tokens as with ``limit`` tokens; None if none below ``limit`` does."""
    best = sum(predict_hits(cache, prompts, block_size=block_size, capacity=limit)[first_round:])
    for capacity in range(block_size, limit, block_size):
        try:
            got = predict_hits(cache, prompts, block_size=block_size, capacity=capacity)
        except ValueError:  # a prompt does not fit at all
            continue
        if sum(got[first_round:]) == best:
            return capacity
    return None


def vllm_budget_for(usable: int, block_size: int) -> int:
    """The ``kv_cache_tokens`` that gives vLLM ``usable`` tokens of blocks: one more block, the null block
    every vLLM pool keeps (``BlockPool``), as ``engine_capacity`` reports it."""
    return usable + block_size


def other_block_size(block_size: int) -> int:
    """A block size to compare with: vLLM's default 16, or 128 (the CPU build's) when this run uses 16."""
    return 16 if block_size != 16 else 128


def gap_table(rates: pd.DataFrame, workloads: Mapping[str, Tokens], block_size: int, capacity: int) -> pd.DataFrame:
    """Exercise 1: SGLang's measured hit rate minus vLLM's, in points, at this run's block size (measured)
    and at :func:`other_block_size` (simulated). ``rates``: columns ``vLLM`` and ``SGLang``, one row per
    workload, as fractions. Columns are named ``measured``/``simulated`` and carry the sizes in ``attrs``."""
    other = other_block_size(block_size)
    simulated = pd.Series({n: hit_rate("block", workloads[n], block_size=other, capacity=capacity)
                           for n in rates.index})
    table = pd.DataFrame({"measured": 100 * (rates.SGLang - rates.vLLM),
                          "simulated": 100 * (rates.SGLang - simulated)})
    table.attrs.update(block_size=block_size, other=other)
    return table


def extra_prefill(turns: Tokens, caches: Mapping[str, tuple[str, int]], capacity: int) -> pd.DataFrame:
    """Exercise 3: per turn, tokens prefilled beyond those the turn adds to the previous prompt.
    ``caches``: column label -> (cache, block size), one column each."""
    new = [len(turns[0])] + [len(b) - len(a) for a, b in zip(turns, turns[1:], strict=False)]
    return pd.DataFrame({label: [len(t) - h - n for t, h, n in
                                 zip(turns, predict_hits(cache, turns, block_size=size, capacity=capacity), new,
                                     strict=True)]
                         for label, (cache, size) in caches.items()},
                        index=[f"turn {i + 1}" for i in range(len(turns))])


def concurrent_fit(shared: Sequence[int], question_tokens: int, requests: int, *, cache: str, capacity: int,
                   block_size: int = 1, sharing: bool = True) -> int:
    """How many of ``requests`` run at once in ``capacity`` tokens of KV, each ``shared`` plus a question of
    its own (``question_tokens`` ids no other request has), all admitted together and none finished.
    ``sharing=False``: every request's prefix has other ids too (the same length), so nothing is shared.
    The count stops at the first request that does not fit. Prompts only: no tokens are decoded."""
    if cache not in ("block", "radix"):
        raise ValueError(f"unknown cache {cache!r}; accepted: block, radix")
    prompts = [(list(shared) if sharing else [-1 - i] * len(shared)) + [-10**6 - i] * question_tokens
               for i in range(requests)]
    if cache == "block":
        blocks = BlockHashCache(capacity // block_size, block_size)
        return next((i for i, p in enumerate(prompts) if blocks.allocate(str(i), p) is None), len(prompts))
    tree = RadixTree()
    for i, p in enumerate(prompts):
        if len(p) - tree.match_prefix(p[:-1]).length > capacity - tree.total_tokens:
            return i
        tree.insert(p)
        tree.inc_lock_ref(tree.match_prefix(p).node)  # running: its whole path stays
    return len(prompts)


def on_off_ttft(pairs: pd.DataFrame) -> dict[str, float]:
    """Time to first token with the cache off and on, from ``prefix_cache_live.on_off_pairs``' rows
    (``round``, ``cache``, ``ttft_s``, ``cached_tokens``, ``prompt_tokens``).

    Each round gives one ratio, the median cold TTFT over the median cached one; the row gives the median
    of those ratios with the lowest and highest round, and whether every round put the cache on ahead.
    ``share of tokens prefilled`` and ``share of time left`` set what the cache left to compute beside
    the time it took (both relative to the cold requests): equal if time followed the new tokens.
    """
    on, off = pairs[pairs.cache == "on"], pairs[pairs.cache == "off"]
    if on.empty or off.empty:
        raise ValueError(f"need requests with the cache on and off, got {len(on)} and {len(off)}")
    per_round = (off.groupby("round").ttft_s.median() / on.groupby("round").ttft_s.median()).dropna()
    ratio = spread(per_round.tolist())
    ttft_on, ttft_off = float(on.ttft_s.median()), float(off.ttft_s.median())
    cached, prompt = float(on.cached_tokens.median()), float(on.prompt_tokens.median())
    return {"rounds": ratio["rounds"], "pairs per round": len(on) // ratio["rounds"],
            "prompt tokens (median)": prompt, "cached tokens on (median)": cached,
            "cached tokens off (sum)": float(off.cached_tokens.sum()),
            "TTFT on (s, median)": ttft_on, "TTFT off (s, median)": ttft_off,
            "TTFT ratio off/on": ratio["median"], "lowest round": ratio["lowest"], "highest round": ratio["highest"],
            "on ahead in every round": every_round_above(per_round.tolist()),
            "share of tokens prefilled": (prompt - cached) / prompt, "share of time left": ttft_on / ttft_off}


def verdict_table(rates: pd.DataFrame, second_round: Mapping[str, float], reusers: Mapping[str, float],
                  ttft: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """The chapter's measurements side by side: hit rates (``rates``: columns vLLM, SGLang, by workload),
    the loop's second-round hit rate per engine, the burst's reusers' cached share per configuration
    (``"vLLM, fcfs"``, ``"SGLang, fcfs"``, ``"SGLang, lpm"``) and, per engine, ``on_off_ttft``'s row: the
    TTFT ratio off / on with its lowest and highest round."""
    workloads = [w for w in ("agent_tree", "multi_turn", "few_shot") if w in rates.index]
    rows = {f"{w.replace('_', ' ')}: hit rate": (f"{rates.loc[w, 'vLLM']:.0%}", f"{rates.loc[w, 'SGLang']:.0%}")
            for w in workloads}
    rows["loop that overflows the cache: second-round hit rate"] = (f"{second_round['vLLM']:.0%}",
                                                                    f"{second_round['SGLang']:.0%}")
    rows["burst, small cache: reusers' prompt tokens cached"] = (
        f"{reusers['vLLM, fcfs']:.0%}", f"{reusers['SGLang, fcfs']:.0%} (fcfs), {reusers['SGLang, lpm']:.0%} (lpm)")
    rows["few-shot: time to first token, cache off / on (rounds' range)"] = tuple(
        f"{t['TTFT ratio off/on']:.1f}x ({t['lowest round']:.1f}-{t['highest round']:.1f})"
        for t in (ttft["vLLM"], ttft["SGLang"]))
    return pd.DataFrame.from_dict(rows, orient="index", columns=["vLLM", "SGLang"])
