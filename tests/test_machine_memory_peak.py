"""The peak memory of a process tree: a child that holds memory counts, and its end is seen."""

from __future__ import annotations

import subprocess
import sys

from servelab.machine import memory_peak

HOLD = "import time; block = bytearray({n}); block[::4096] = b'x' * len(block[::4096]); time.sleep({s})"


def test_a_child_holding_memory_counts_in_its_parents_tree():
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
                               f"{HOLD.format(n=300 * 2**20, s=1.5)!r}])"])
    with memory_peak.PeakMemory(parent.pid, interval=0.1) as peak:
        parent.wait()
    assert 0.29 < peak.gib < 0.6  # the grandchild's 300 MiB, and two interpreters
    assert memory_peak.tree_bytes(parent.pid) == 0  # gone


def test_this_process_holds_something():
    assert memory_peak.tree_bytes(memory_peak.os.getpid()) > 10 * 2**20
