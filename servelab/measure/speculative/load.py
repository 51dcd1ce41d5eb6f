"""Chapter 06's concurrency sweep, priced and judged: what a verification costs with b requests in
flight, how far the measurement lies from that price, which speedups and trends the run resolves (their
spread over interleaved rounds), and the KV blocks a wave holds.

The sweep itself (waves of b identical requests, timed by the engine) is
:func:`servelab.measure.speculative.live.sweep`; everything here is arithmetic on what it and the
forward-cost measurement returned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from servelab.integers import int_at_least
from servelab.measure.rounds import one_side, spread

NOT_RESOLVED = "not resolved with {rounds}"  # spread_verdict's third answer; {rounds}: "3 rounds"


def batch_costs(k: int, c: float, b: int, verify_cost: Callable[[float], float]) -> tuple[float, float]:
    """(draft step, verification) with ``b`` requests decoding together, in plain steps over b tokens,
    to give :func:`~servelab.measure.speculative.live.predicted_speedup` (per request) as its c and
    ``verify_cost``.

    A plain step is a pass over b tokens, v(b); a verification one over b (k + 1). A draft model's k
    passes cost c times the target's over as many tokens: the first covers the b (k + 1) verified
    tokens plus one slot per request, b (k + 2) (vLLM's ``draft_model`` re-reads what the target
    verified: ``set_inputs_first_pass`` in ``vllm/v1/spec_decode/llm_base_proposer.py``), the k - 1
    others b tokens each. ``verify_cost`` is v(n), a pass over n tokens in any unit.
    """
    k, b = int_at_least("k", k, 1), int_at_least("b", b, 1)
    if c < 0:
        raise ValueError(f"c must be >= 0 (a draft step in target steps), got {c}")
    step = verify_cost(b)
    return c * (verify_cost(b * (k + 2)) / step + k - 1) / k, verify_cost(b * (k + 1)) / step


def round_speedups(rates: pd.DataFrame, by: Sequence[str], value: str, baseline: str = "plain") -> pd.DataFrame:
    """Each round's speedup per method other than ``baseline`` and per ``by``: the method's ``value`` over the
    baseline's in the same round (column ``speedup``). ``rates`` has the columns method, round, each of ``by`` and
    ``value``; every method's round needs the baseline's round beside it."""
    keys = ["round", *by]
    base = rates[rates.method == baseline][[*keys, value]].rename(columns={value: "baseline"})
    if base.empty:
        raise ValueError(f"no rows of the baseline {baseline!r}; methods: {', '.join(map(str, rates.method.unique()))}")
    paired = rates[rates.method != baseline][["method", *keys, value]].merge(base, on=keys, how="left",
                                                                           validate="many_to_one")
    if paired.baseline.isna().any():
        lonely = paired[paired.baseline.isna()][keys].drop_duplicates().to_dict("records")
        raise ValueError(f"rounds without a {baseline!r} measurement beside them: {lonely}")
    return paired.assign(speedup=paired[value] / paired.baseline)[["method", *keys, "speedup"]]


def over_rounds(speedups: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Per method and ``by``: the median, lowest and highest of the rounds' ``speedup``, and how many rounds
    (:func:`servelab.measure.rounds.spread`)."""
    keys = ["method", *by]
    rows = [{**dict(zip(keys, key, strict=True)), **spread(group.tolist())}
            for key, group in speedups.groupby(keys, sort=False).speedup]
    return pd.DataFrame(rows, columns=[*keys, "median", "lowest", "highest", "rounds"]).rename(
        columns={"median": "speedup"})


def paired_speedups(rates: pd.DataFrame, by: Sequence[str], value: str, baseline: str = "plain") -> pd.DataFrame:
    """:func:`round_speedups` summed up :func:`over_rounds`: per method and ``by``, the median, lowest and highest
    of the rounds' speedups."""
    return over_rounds(round_speedups(rates, by, value, baseline), by)


def not_resolved(rounds: int) -> str:
    """:data:`NOT_RESOLVED` for ``rounds`` rounds: "not resolved with 3 rounds"."""
    rounds = int_at_least("rounds", rounds, 1)
    return NOT_RESOLVED.format(rounds=f"{rounds} round{'s' if rounds > 1 else ''}")


def spread_verdict(lowest: float, highest: float, rounds: int) -> str:
    """"faster" where every round's speedup is above 1, "slower" where every one is below
    (:func:`servelab.measure.rounds.one_side` of the lowest and highest round), else :func:`not_resolved`:
    the ``rounds`` rounds' spread straddles 1, so this run cannot say which."""
    if lowest > highest:
        raise ValueError(f"lowest {lowest} is above highest {highest}")
    side = one_side([lowest, highest])
    return "faster" if side == "above" else "slower" if side == "below" else not_resolved(rounds)


def first_slowdown(speedup: Mapping[int, float], margin: float = 0.0) -> int | None:
    """The smallest concurrency from which the slowdown is sustained: it and every larger
    concurrency in ``speedup`` are below 1 by more than ``margin`` (None: the largest one is not).
    Given each concurrency's highest speedup over the rounds, that is a slowdown every round shows."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    sustained = None
    for b, s in sorted(speedup.items(), reverse=True):  # items(): a pandas Series iterates over its values
        if not s < 1 - margin:
            break
        sustained = b
    return sustained


def sweep_change(speedups: pd.DataFrame, by: str = "concurrency") -> float:
    """A method's speedup at the sweep's largest ``by`` over that at its smallest, read off a straight line
    through log speedup against log ``by`` that every point of every round helps to place, rather than off the
    two end points alone. The line is fitted by least squares with each round given its own height, so a round
    whose speedups all came out higher or lower (the plain server's turn ran slow throughout, say) moves the
    line's slope not at all; the ends weigh most, as in any line, so a change at the largest ``by`` alone still
    shows. ``speedups`` has the columns round, ``by`` and speedup, for one method (``round_speedups``' rows; a
    prediction is one round); a round measured at one ``by`` only adds nothing."""
    missing = [c for c in ("round", by, "speedup") if c not in speedups]
    if missing:
        raise ValueError(f"sweep_change needs the columns round, {by}, speedup; missing: {', '.join(missing)}")
    if "method" in speedups and speedups.method.nunique() > 1:
        raise ValueError(f"sweep_change reads one method's rows, got {', '.join(map(str, speedups.method.unique()))}")
    if not ((speedups[by] > 0).all() and (speedups.speedup > 0).all()):
        raise ValueError(f"every {by} and speedup must be positive, got {speedups[[by, 'speedup']].values.tolist()}")
    logs = pd.DataFrame({"round": speedups["round"], "x": np.log(speedups[by].astype(float)),
                         "y": np.log(speedups.speedup.astype(float))})
    centred = logs[["x", "y"]] - logs.groupby("round")[["x", "y"]].transform("mean")
    x_spread = float((centred.x ** 2).sum())
    if not x_spread > 0:
        raise ValueError(f"sweep_change needs two values of {by} in one round, got {sorted(set(speedups[by]))}")
    slope = float((centred.x * centred.y).sum()) / x_spread
    return math.exp(slope * (logs.x.max() - logs.x.min()))


def trend_test(predicted_change: float) -> str:
    """Which test a method's measured sweep must pass, from its predicted speedup at the largest b over
    that at the smallest (both changes as :func:`sweep_change` reads them): "falls" (below 0.8), "flat"
    (within 10% of 1), "rises" (above 1.2); between those zones the prediction is too weak to test a
    direction, and "leans down" (0.8 to 0.9) or "leans up" (1.1 to 1.2) only asks that the measurement
    does not move clearly the other way."""
    if not predicted_change > 0:
        raise ValueError(f"predicted_change must be a positive ratio, got {predicted_change}")
    if predicted_change < 0.8:
        return "falls"
    if abs(predicted_change - 1) < 0.1:
        return "flat"
    if predicted_change > 1.2:
        return "rises"
    return "leans down" if predicted_change < 1 else "leans up"


DECISIVE = ("falls", "flat", "rises")  # the trend tests that test a direction; the others only its opposite


def trend_holds(test: str, measured_change: float) -> bool:
    """Whether the measured change (largest b over smallest, :func:`sweep_change`) passes :func:`trend_test`'s test: a
    predicted fall by over 20% needs a measured fall by over 10%, a flat prediction a measured
    change under 20%, a predicted rise by over 20% a measured rise by over 10%; a prediction that
    leans down must not be met by a measured rise of over 10%, one that leans up by a fall of over 10%."""
    checks = {"falls": measured_change < 0.9, "flat": abs(measured_change - 1) < 0.2,
              "rises": measured_change > 1.1, "leans down": measured_change < 1.1,
              "leans up": measured_change > 0.9}
    if test not in checks:
        raise ValueError(f"unknown trend test {test!r}; accepted: {', '.join(checks)}")
    return bool(checks[test])


def trend_verdict(test: str, round_changes: Sequence[float]) -> str:
    """A method's trend judged as the chapter judges a speedup, across its rounds: "as predicted" where every
    round's change (:func:`sweep_change` of that round alone) passes :func:`trend_holds`' ``test``,
    "contradicted" where every round's fails it, else :func:`not_resolved` (the rounds disagree)."""
    if not round_changes:
        raise ValueError("trend_verdict needs at least one round's change, got none")
    passed = [trend_holds(test, c) for c in round_changes]
    if all(passed):
        return "as predicted"
    return "contradicted" if not any(passed) else not_resolved(len(round_changes))


def steps_gap(tokens: float, drafts: float, speedup: float, predicted: float) -> float:
    """Measured minus predicted decode time of one answer of ``tokens`` tokens, in plain steps per
    verification: (tokens - 1) / speedup plain steps were measured, (tokens - 1) / predicted predicted."""
    if drafts <= 0 or speedup <= 0 or predicted <= 0 or tokens <= 1:
        raise ValueError(f"need tokens > 1 and positive drafts and speedups, got {tokens}, {drafts}, "
                         f"{speedup}, {predicted}")
    return (tokens - 1) * (1 / speedup - 1 / predicted) / drafts


def logits_gap(b: int, k: int, verify_s: float, step_s: float, row_s: float) -> float:
    """What the forward-cost proxy leaves out of a verification, in plain steps: the proxy's passes
    compute logits at one position, while a verification of b requests computes them at b (k + 1)
    and a plain step at b. With ``row_s`` the seconds of one position's logits, this is the
    verification / plain step ratio with those rows added to the proxy's ``verify_s`` and ``step_s``
    minus the ratio without them."""
    b, k = int_at_least("b", b, 1), int_at_least("k", k, 1)
    if min(verify_s, step_s) <= 0 or row_s < 0:
        raise ValueError(f"need positive pass times and a row time >= 0, got {verify_s}, {step_s}, {row_s}")
    return (verify_s + (b * (k + 1) - 1) * row_s) / (step_s + (b - 1) * row_s) - verify_s / step_s


def reserved_slots(speculative_config: Mapping | None, k: int) -> int:
    """KV slots vLLM reserves per request beyond its tokens: the k drafted tokens each verification
    scores, and for a draft model (``draft_model``, EAGLE) k more lookahead slots for the draft's own
    passes (``num_lookahead_tokens`` in ``vllm/config/vllm.py``, added in ``allocate_slots`` of
    ``vllm/v1/core/kv_cache_manager.py``). 0 without speculation."""
    if not speculative_config:
        return 0
    k = int_at_least("k", k, 1)
    method = speculative_config.get("method")
    if method == "ngram":
        return k
    if method in ("draft_model", "eagle", "eagle3"):
        return 2 * k
    raise ValueError(f"unknown speculative method {method!r}; accepted: ngram, draft_model, eagle, eagle3")


def sweep_blocks(prompt_tokens: int, max_tokens: int, slots: int, block_size: int, requests: int) -> int:
    """KV blocks a wave of ``requests`` requests holds at its end, each with its prompt, ``max_tokens``
    and ``slots`` reserved slots (:func:`reserved_slots`), no block shared (an upper bound:
    identical prompts share their full blocks)."""
    tokens = sum(int_at_least(n, v, 1) for n, v in (("prompt_tokens", prompt_tokens), ("max_tokens", max_tokens)))
    per_request = -(-(tokens + int_at_least("slots", slots, 0)) // int_at_least("block_size", block_size, 1))
    return int_at_least("requests", requests, 1) * per_request
