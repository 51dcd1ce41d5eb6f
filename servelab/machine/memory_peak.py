"""The most memory a process and everything it started held at once, sampled while it runs.

A chapter's engines are children of its kernel (each in its own process group, still a descendant), so the sum over
the process tree is what the chapter takes from the machine. Each process counts its proportional set size (PSS,
from /proc/PID/smaps_rollup): a page shared by several processes (the engine's libraries, mapped by every process of
a server) counts once over them all, as the machine's memory does. Where smaps_rollup cannot be read, the resident
size counts instead (larger: shared pages count in every process). A sample every `interval` seconds can miss a
spike shorter than that; the engines' memory grows with what they hold, over seconds, not in spikes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PROC = Path("/proc")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _bytes(pid: int) -> int:
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return int((PROC / str(pid) / "statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0  # gone meanwhile


def tree_bytes(root: int) -> int:
    """The memory `root` and all its descendants hold now, in bytes (0 when it is gone)."""
    tree, total, stack, seen = _children(), 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _bytes(pid)
        stack += tree.get(pid, [])
    return total


class PeakMemory:
    """`with PeakMemory(pid) as peak: ...`, then `peak.gib`: the largest `tree_bytes(pid)` seen, in GiB."""

    def __init__(self, root: int | None = None, interval: float = 1.0) -> None:
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, tree_bytes(self.root))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def gib(self) -> float:
        return self.peak / 2**30
