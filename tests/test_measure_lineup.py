"""Lineup: servers started side by side or one at a time, with stand-in servers (no engine)."""

from __future__ import annotations

import threading
import time

import pytest

from servelab.engines import server as server_module
from servelab.measure.lineup import Lineup, in_rounds, side_by_side


class FakeServer:
    """Start takes `delay` seconds (or raises `fail`); records what happened, and when."""

    def __init__(self, name: str, log: list, delay: float = 0.2, fail: Exception | None = None) -> None:
        self.name, self.log, self.delay, self.fail = name, log, delay, fail
        self.running = False
        self.quiet_bar = None

    def start(self) -> FakeServer:
        self.log.append(("start", self.name, time.monotonic()))
        self.quiet_bar = server_module.tqdm(total=1).disable  # what Server._wait_healthy would draw
        time.sleep(self.delay)
        if self.fail:
            raise self.fail
        self.running = True
        return self

    def stop(self) -> None:
        self.log.append(("stop", self.name, time.monotonic()))
        self.running = False


def _servers(log: list, **kw) -> dict[str, FakeServer]:
    return {name: FakeServer(name, log, **kw) for name in ("a", "b", "c")}


def test_together_starts_every_server_at_once_without_their_own_bars():
    log: list = []
    servers = _servers(log, delay=0.3)
    t0 = time.monotonic()
    lineup = Lineup(servers, together=True)
    assert time.monotonic() - t0 < 0.8  # three starts of 0.3 s overlapped
    assert all(s.running and s.quiet_bar is True for s in servers.values())
    assert lineup.take("b") is servers["b"] and servers["a"].running  # the others keep running
    lineup.stop()
    assert not any(s.running for s in servers.values())
    assert server_module.tqdm(total=1, disable=False).disable is False  # the patch is gone


def test_one_at_a_time_starts_on_take_and_stops_the_others():
    log: list = []
    servers = _servers(log, delay=0.0)
    lineup = Lineup(servers, together=False)
    assert not log
    lineup.take("a")
    lineup.take("c")
    assert servers["c"].running and not servers["a"].running
    assert [(e, n) for e, n, _ in log if e == "start"] == [("start", "a"), ("start", "c")]
    assert ("stop", "a") in [(e, n) for e, n, _ in log]


def test_background_returns_at_once_and_take_waits():
    log: list = []
    servers = _servers(log, delay=0.4)
    t0 = time.monotonic()
    lineup = Lineup(servers, together=True, background=True)
    assert time.monotonic() - t0 < 0.2 and threading.active_count() > 1
    assert lineup.take("a").running and time.monotonic() - t0 >= 0.4
    lineup.stop()


def test_takes_from_several_threads_all_wait_for_the_background_start():
    from concurrent.futures import ThreadPoolExecutor

    log: list = []
    servers = _servers(log, delay=0.4)
    lineup = Lineup(servers, together=True, background=True)
    with ThreadPoolExecutor(3) as pool:
        taken = list(pool.map(lambda name: lineup.take(name).running, ["a", "b", "c"]))
    assert taken == [True, True, True]
    assert sorted(n for e, n, _ in log if e == "start") == ["a", "b", "c"]  # each started once, not again
    lineup.stop()


@pytest.mark.parametrize("background", [False, True])
def test_a_failed_start_stops_every_server_and_raises_its_error(background):
    log: list = []
    servers = _servers(log, delay=0.05)
    servers["b"].fail = RuntimeError("engine b would not start")
    if background:
        lineup = Lineup(servers, together=True, background=True)
        with pytest.raises(RuntimeError, match="engine b"):
            lineup.take("a")
    else:
        with pytest.raises(RuntimeError, match="engine b"):
            Lineup(servers, together=True)
    assert not any(s.running for s in servers.values())
    assert {n for e, n, _ in log if e == "stop"} == {"a", "b", "c"}


def test_bad_names_and_empty_lineups():
    lineup = Lineup(_servers([], delay=0.0), together=False)
    with pytest.raises(ValueError, match="no server 'd' in this lineup; it has: a, b, c"):
        lineup.take("d")
    with pytest.raises(ValueError, match="at least one server"):
        Lineup({}, together=True)


def test_in_rounds_side_by_side_turns_the_order_every_round():
    log: list = []
    servers = _servers(log, delay=0.0)
    prepared = []
    got = in_rounds(servers, 3, together=True, measure=lambda name, server, r: (server.running, r),
                    prepare=lambda name, server: prepared.append(name))
    assert prepared == ["a", "b", "c"]
    assert [(r, name) for r, name, _ in got] == [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"),
                                                 (2, "c"), (2, "a"), (2, "b")]
    assert all(running for _, _, (running, _) in got) and not any(s.running for s in servers.values())
    assert [e[0] for e in log].count("start") == 3  # each server started once


def test_in_rounds_stops_every_server_when_a_measurement_fails_and_refuses_zero_rounds():
    log: list = []
    servers = _servers(log, delay=0.0)

    def broken(name, server, r):
        raise RuntimeError("measurement failed")

    for together in (True, False):
        with pytest.raises(RuntimeError, match="measurement failed"):
            in_rounds(servers, 2, together=together, measure=broken)
        assert not any(s.running for s in servers.values())
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        in_rounds(servers, 0, together=True, measure=broken)


def test_in_rounds_one_at_a_time_takes_the_same_turns_starting_each_server_every_round():
    log: list = []
    servers = _servers(log, delay=0.0)
    prepared, alone = [], []
    got = in_rounds(servers, 3, together=False,
                    measure=lambda name, server, r: alone.append(sum(s.running for s in servers.values())),
                    prepare=lambda name, server: prepared.append(name))
    order = [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"), (2, "c"), (2, "a"), (2, "b")]
    assert [(r, name) for r, name, _ in got] == order and set(alone) == {1}
    assert prepared == [name for _, name in order]  # every start is prepared (warmed up) again
    assert [e[0] for e in log].count("start") == 9 and not any(s.running for s in servers.values())


def test_a_lineups_rounds_reuse_a_server_already_running_for_its_first_turn():
    log: list = []
    servers = _servers(log, delay=0.0)
    lineup = Lineup(servers, together=False)
    lineup.take("a")  # measured before the rounds, as chapter 06 times its plain server
    got = lineup.in_rounds(2, measure=lambda name, server, r: server.running)
    assert all(running for _, _, running in got) and [e[0] for e in log].count("start") == 2 * 3
    lineup.stop()


def test_servers_run_side_by_side_only_where_the_profile_bounds_their_kv_memory():
    from servelab.machine import profiles

    assert side_by_side(profiles.load("cpu")) and not side_by_side(profiles.load("gpu-24g"))
