"""Which re-executed chapters run side by side, and on which cores.

Each chapter's engines compute on one thread (vLLM's CPU build binds its compute to one core and keeps one for its
scheduler; SGLang's cpu launch sets OMP_NUM_THREADS=1), so a chapter keeps about one core busy: on a 2-core
machine two chapters, each pinned to its own core, take about as long side by side as each alone (chapters 00 and
02 measured so, every checked cell passing). `./test.sh` therefore splits the chapters it re-executes into lanes,
one per core: the longest first, each into the lane that would finish soonest, by the run time each chapter's last
execution recorded. A chapter that reads results another re-executed chapter saves runs after the lanes, since it
must read what they saved in this run.

On a machine with one core, or with one chapter to run, there is one lane and nothing is pinned: the run is as
it always was.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from servelab.book.execution_key import Status, recorded

UNRECORDED_S = 600  # a chapter that never recorded its run time is taken to be long


@dataclass(frozen=True)
class Lane:
    cpus: tuple[int, ...]  # empty: not pinned
    chapters: tuple[str, ...]
    seconds: float  # the chapters' recorded run times, summed

    @property
    def vllm_bind(self) -> str:
        """VLLM_CPU_OMP_THREADS_BIND for this lane's vLLM servers: its own cores, not those auto-binding picks
        (the same core in every lane). With several cores, the first is left to the scheduler, as vLLM's auto
        binding leaves one."""
        cores = self.cpus[1:] if len(self.cpus) > 1 else self.cpus
        return ",".join(map(str, cores))


def recorded_seconds(notebook: Path) -> float:
    meta = recorded(notebook) or {}
    seconds = meta.get("seconds")
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else float(UNRECORDED_S)


def _reads_a_stale_chapter(name: str, stale: list[str], metas: dict[str, dict]) -> bool:
    reads = set(metas[name].get("reads", {}))
    return any(reads & set(metas[other].get("saves", [])) for other in stale if other != name)


def split_cpus(cpus: list[int], n: int) -> list[tuple[int, ...]]:
    """`cpus` in `n` contiguous parts as even as can be (the first parts one larger)."""
    if not 1 <= n <= len(cpus):
        raise ValueError(f"cannot split {len(cpus)} cores into {n} lanes: give 1 to {len(cpus)} lanes")
    size, extra = divmod(len(cpus), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        parts.append(tuple(cpus[start:end]))
        start = end
    return parts


def plan(statuses: list[Status], notebooks: Path, cpus: list[int] | None = None,
         max_lanes: int = 2) -> tuple[list[Lane], list[str]]:
    """The lanes the stale chapters of `statuses` run in, and the chapters that run after them (in book order).

    `cpus`: the cores this process may use (default: its affinity). One lane, not pinned, where there is one core
    or fewer than two chapters can run side by side."""
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else sorted(cpus)
    stale = [st.chapter for st in statuses if not st.current]
    metas = {name: recorded(notebooks / f"{name}.ipynb") or {} for name in stale}
    after = [name for name in stale if _reads_a_stale_chapter(name, stale, metas)]
    free = [name for name in stale if name not in after]
    seconds = {name: recorded_seconds(notebooks / f"{name}.ipynb") for name in free}
    n = min(max_lanes, len(cpus), len(free))
    if n < 2:
        return ([Lane((), tuple(free), sum(seconds.values()))] if free else []), after
    loads: list[list[str]] = [[] for _ in range(n)]
    totals = [0.0] * n
    for name in sorted(free, key=lambda c: (-seconds[c], c)):  # longest first, each where it finishes soonest
        i = totals.index(min(totals))
        loads[i].append(name)
        totals[i] += seconds[name]
    order = {name: i for i, name in enumerate(stale)}
    return [Lane(part, tuple(sorted(chs, key=order.__getitem__)), total)
            for part, chs, total in zip(split_cpus(cpus, n), loads, totals, strict=True)], after
