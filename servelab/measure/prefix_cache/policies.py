"""SGLang's own scheduling policies ordering one waiting queue, run in-process (no server).

A schedule policy is fixed when an SGLang server starts, so measuring each policy live costs one
server start each. The ordering itself is SGLang code that needs no model:
``engine_side/sgl_schedule_policies.py`` builds the prefix cache a live server builds
(``UnifiedRadixCache``) holding a warm-up prompt, queues SGLang ``Req`` objects in arrival order and
lets ``SchedulePolicy.calc_priority`` sort them, for every policy it can run, in three cases: the queue
as it is ("burst"), padded past the length at which ``lpm`` and ``hrrn`` give up matching ("padded"),
and with the radix cache disabled ("radix off"). :func:`sglang_policy_orders` runs it and returns one
row per (case, policy, position); :func:`order_table` lays a case out as policy x position, and
:func:`policy_summary` says per policy whether it kept the arrival order or put a group first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from servelab.engines.engine_side import script
from servelab.machine import engine_envs
from servelab.machine.profiles import Profile

CASES = ("burst", "padded", "radix off")
# The policies that sort the in-batch check's requests to the back of the queue (``_sort_by_longest_prefix``,
# ``_sort_by_hrrn``, ``_sort_by_shortest_prefill`` in ``schedule_policy.py``); ``dfs-weight`` computes the set
# and ignores it, and nothing else reads it: ``PrefillAdder`` may still admit those requests in the same round.
TO_THE_BACK = ("lpm", "hrrn", "shortest-prefill-first")


def start_policy_orders(profile: Profile) -> engine_envs.StartedScript:
    """Start the script now, so it imports SGLang (seconds of CPU) while the caller prepares the queue;
    :func:`sglang_policy_orders` with ``started=`` hands it the queue."""
    python = engine_envs.get(profile.sglang_env).require().python
    env = engine_envs.cpu_only_env("SGLANG_USE_CPU_ENGINE", "PYTHONPATH")
    return engine_envs.start_script(python, script("sgl_schedule_policies.py"), env=env)


def sglang_policy_orders(profile: Profile, warm: Sequence[int], prompts: Sequence[Sequence[int]],
                         names: Sequence[str], *, page_size: int = 1, max_new_tokens: int = 1,
                         waited_tokens: int | None = None, seed: int = 0, timeout: float = 300,
                         started: engine_envs.StartedScript | None = None) -> pd.DataFrame:
    """Each SGLang policy's order for ``prompts`` (named ``names``, in arrival order) behind a cached ``warm``.

    ``page_size`` is the live server's (the tree keeps whole pages); ``max_new_tokens`` what every
    request asks for (``lof`` sorts by it); ``waited_tokens`` (default: the warm-up's length) the prefill
    tokens processed since the queue formed in the "hrrn, waited" row. Runs in SGLang's venv on the CPU
    with CUDA hidden, so a GPU machine gives the same answer; ``started``: a script already started by
    :func:`start_policy_orders` (else one starts now). See :func:`policy_frame` for the rows.
    """
    if len(names) != len(prompts) or len(set(names)) != len(names) or not names:
        raise ValueError(f"need one distinct name per prompt; got {len(names)} names for {len(prompts)} prompts")
    if page_size < 1 or max_new_tokens < 1 or not warm:
        raise ValueError(f"need page_size >= 1, max_new_tokens >= 1 and a non-empty warm-up; got {page_size}, "
                         f"{max_new_tokens}, {len(warm)} warm-up tokens")
    request = {"warm": list(warm), "names": list(names), "prompts": [list(p) for p in prompts],
               "page_size": page_size, "max_new_tokens": max_new_tokens,
               "waited_tokens": len(warm) if waited_tokens is None else waited_tokens, "seed": seed}
    report = (started or start_policy_orders(profile)).answer(json.dumps(request), timeout=timeout)
    return policy_frame(report)


def policy_frame(report: dict[str, Any]) -> pd.DataFrame:
    """The script's answer as rows: ``case``, ``policy``, ``active`` (the policy that sorted, after
    SGLang's fallbacks), ``position`` (from 1), ``request``, ``matched`` (its cached prefix, tokens),
    ``deprioritized`` (in the set SGLang's in-batch prefix check returned), and for a policy SGLang refused one row
    without a position: ``error`` (the message) and ``cause`` (the first exception in its chain). The
    rest of the report (version, tree class, constants, skipped policies, times) is in ``attrs``."""
    matched = report["matched"]
    rows = []
    for run in report["runs"]:
        base = {"case": run["case"], "policy": run["policy"], "active": run["active"], "error": run["error"],
                "cause": run.get("cause")}
        if run["error"] is not None:
            rows.append({**base, "position": None, "request": None, "matched": None, "deprioritized": None})
        for i, name in enumerate(run["order"], start=1):
            rows.append({**base, "position": i, "request": name, "matched": matched[name],
                         "deprioritized": name in run["deprioritized"]})
    frame = pd.DataFrame(rows, columns=["case", "policy", "active", "position", "request", "matched",
                                        "deprioritized", "error", "cause"]).astype({"position": "Int64",
                                                                                       "matched": "Int64"})
    frame.attrs.update({k: v for k, v in report.items() if k not in ("runs", "matched")}, matched=matched)
    return frame


def policy_summary(frame: pd.DataFrame, group: Sequence[str], label: str = "group first") -> pd.DataFrame:
    """Per (case, policy): the policy that sorted, whether the arrival order was kept, whether every
    request of ``group`` came first (column ``label``), whom the in-batch check moved to the back of the
    queue (only under the policies of ``TO_THE_BACK``), and why a refused policy was refused."""
    arrival = list(frame.attrs["names"])
    rows = []
    for (case, policy), runs in frame.groupby(["case", "policy"], sort=False):
        order = runs.dropna(subset=["position"]).sort_values("position").request.tolist()
        refused = runs.error.notna().any()
        rows.append({"case": case, "policy": policy, "sorted by": runs.active.iloc[0],
                     "arrival order kept": None if refused else order == arrival,
                     label: None if refused else ahead(order, group),
                     "moved to the back": (", ".join(runs.request[runs.deprioritized.eq(True)]) or "-")
                     if runs.active.iloc[0] in TO_THE_BACK else "-",
                     "refused": f"{runs.error.iloc[0]} (first raised: {runs.cause.iloc[0]})" if refused else "-"})
    return pd.DataFrame(rows).set_index(["case", "policy"])


def order_table(frame: pd.DataFrame, case: str = "burst") -> pd.DataFrame:
    """One case as policy x position (request names), with the policy that actually sorted and any refusal."""
    if case not in set(frame.case):
        raise ValueError(f"unknown case {case!r}; accepted: {', '.join(dict.fromkeys(frame.case))}")
    rows = frame[frame.case == case]
    policies = list(dict.fromkeys(rows.policy))
    table = rows.dropna(subset=["position"]).pivot(index="policy", columns="position", values="request")
    table = table.reindex(policies).rename(columns=lambda p: int(p))
    first = rows.groupby("policy", sort=False).first()
    return table.assign(sorted_by=first.active, refused=first.error).reindex(policies)


def ahead(order: Sequence[str], group: Sequence[str]) -> bool:
    """Whether every request of ``group`` comes before every other request in ``order``."""
    members = set(group)
    if not members or not members <= set(order):
        raise ValueError(f"group {sorted(members)} is empty or not all in the order {list(order)}")
    return all(name in members for name in order[:len(members)])
