"""Servers measured one after the other, started side by side where every server's memory is bounded.

On the cpu profile each engine server holds a KV budget given in tokens, so several fit in memory
at once and their starts (mostly imports, each in its own processes) can overlap; an idle vLLM
server uses next to no CPU, so one can be measured while the others wait. On a GPU profile each
server claims most of the GPU's memory: there they must run one at a time (`side_by_side`).

`in_rounds` measures several servers in rounds: each round measures every server in turn, round r
starting with server r mod n, so whatever slows the machine for a while falls on all of them and none
is always first. Side by side the servers stay up; one at a time every round starts each server afresh
(rounds x servers starts), so a drift of the machine lands on every server there too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from functools import partial
from typing import TypeVar
from unittest.mock import patch

from tqdm import tqdm

from servelab.engines import server as server_module
from servelab.engines.server import Server
from servelab.integers import int_at_least
from servelab.machine.profiles import Profile

T = TypeVar("T")


class Lineup:
    """Servers measured one after the other.

    ``together``: all start at once, side by side (their starts overlap; each idles while another
    is measured), for machines where every server's memory is bounded. With ``background`` the
    constructor returns at once (no progress bar: it would print into whichever cell runs) and
    :meth:`take` waits for the starts. Without ``together`` each server starts when its turn
    comes, after the ones before it stopped.
    """

    def __init__(self, servers: Mapping[str, Server], together: bool, background: bool = False) -> None:
        if not servers:
            raise ValueError("a lineup needs at least one server")
        self.servers, self.together = dict(servers), together
        self._pool: ThreadPoolExecutor | None = None
        self._starting: Future | None = None
        if together:
            self._pool = ThreadPoolExecutor(1)
            self._starting = self._pool.submit(self._start_all, not background)
            if not background:
                self._wait()

    def _start_all(self, progress: bool) -> None:
        """Start every server at once, with one progress bar for all of them (not one each)."""
        quiet = partial(server_module.tqdm, disable=True)
        with ThreadPoolExecutor(len(self.servers)) as pool, patch.object(server_module, "tqdm", quiet), \
                tqdm(total=len(self.servers), desc="servers started", disable=not progress) as bar:
            futures = [pool.submit(s.start) for s in self.servers.values()]
            for _ in as_completed(futures):
                bar.update()
            failed = [f.exception() for f in futures]
        if any(failed):
            for server in self.servers.values():
                server.stop()
            raise next(err for err in failed if err)

    def _wait(self) -> None:
        """Wait for a start in progress (any number of threads may); its error, if it failed."""
        if self._starting is not None:
            self._starting.result()
            self._pool.shutdown()

    def take(self, name: str) -> Server:
        """Server ``name``, running (the others stopped first unless they run side by side)."""
        if name not in self.servers:
            raise ValueError(f"no server {name!r} in this lineup; it has: {', '.join(self.servers)}")
        self._wait()
        if not self.together:
            for other, server in self.servers.items():
                if other != name:
                    server.stop()
        server = self.servers[name]
        return server if server.running else server.start()

    def in_rounds(self, rounds: int, measure: Callable[[str, Server, int], T],
                  prepare: Callable[[str, Server], None] | None = None) -> list[tuple[int, str, T]]:
        """``measure(name, server, round)`` for every server in every round, as (round, name, result).

        Side by side: every server ``prepare``d once, then each round measures them all in turn, round r
        starting with the (r mod n)-th. One at a time: the same turns, each server started (a running one is
        reused once) and ``prepare``d afresh for every round, and stopped after its turn.
        """
        rounds = int_at_least("rounds", rounds, 1)
        names = list(self.servers)
        turns = [names[r % len(names):] + names[:r % len(names)] for r in range(rounds)]
        out: list[tuple[int, str, T]] = []
        if self.together:
            for name in names:
                if prepare:
                    prepare(name, self.take(name))
            for r, order in enumerate(turns):
                out += [(r, name, measure(name, self.take(name), r)) for name in order]
            return out
        for r, order in enumerate(turns):
            for name in order:
                server = self.take(name)  # the one before it stopped
                if prepare:
                    prepare(name, server)
                out.append((r, name, measure(name, server, r)))
                server.stop()
        return out

    def stop(self) -> None:
        """Stop every server (after any start in progress has finished or failed)."""
        try:
            self._wait()
        finally:
            for server in self.servers.values():
                server.stop()


def side_by_side(profile: Profile) -> bool:
    """Whether a chapter's servers can run side by side: where the profile bounds every server's KV memory
    (cpu). On a GPU, vLLM asks for its share of the whole card at start (``request_memory`` in
    ``vllm/v1/worker/utils.py``), whatever KV budget it is given, so a second server does not fit beside it."""
    return profile.kv_cache_tokens is not None


def in_rounds(servers: Mapping[str, Server], rounds: int, *, together: bool,
              measure: Callable[[str, Server, int], T],
              prepare: Callable[[str, Server], None] | None = None) -> list[tuple[int, str, T]]:
    """:meth:`Lineup.in_rounds` on a lineup of ``servers`` of its own; every server is stopped at the end, also when
    a measurement fails."""
    lineup = Lineup(servers, together=together, background=True)
    try:
        return lineup.in_rounds(rounds, measure, prepare)
    finally:
        lineup.stop()
