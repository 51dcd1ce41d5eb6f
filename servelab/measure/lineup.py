"""Servers measured one after the other, started side by side where every server's memory is bounded.

On the cpu profile each engine server holds a KV budget given in tokens, so several fit in memory
at once and their starts (mostly imports, each in its own processes) can overlap; an idle vLLM
server uses next to no CPU, so one can be measured while the others wait. On a GPU profile each
server claims most of the GPU's memory: there they must run one at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from functools import partial
from unittest.mock import patch

from tqdm import tqdm

from servelab.engines import server as server_module
from servelab.engines.server import Server


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

    def stop(self) -> None:
        """Stop every server (after any start in progress has finished or failed)."""
        try:
            self._wait()
        finally:
            for server in self.servers.values():
                server.stop()
