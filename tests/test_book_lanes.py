"""The lanes ./test.sh runs its sessions and re-executed chapters in: one per core, each lane taking the longest job
left whenever it is free; a chapter that reads what another re-executed chapter saves starts once that one ended."""

from __future__ import annotations

import json
import sys

import pytest

from servelab.book import lanes
from servelab.machine import engine_envs, profiles


def _notebook(folder, name, seconds=None, reads=(), saves=(), peak_gib=None):
    meta = {"reads": {r: "x" for r in reads}, "saves": list(saves)}
    if seconds is not None:
        meta["seconds"] = seconds
    if peak_gib is not None:
        meta["peak_gib"] = peak_gib
    (folder / f"{name}.ipynb").write_text(json.dumps({"metadata": {"servelab": meta}, "cells": []}))


def _sleeper(name, seconds, exit_code=0, gib=1.0):
    """A job that sleeps `seconds`, prints its cores and exits with `exit_code`."""
    code = (f"import os, time; time.sleep({seconds}); print(sorted(os.sched_getaffinity(0)), "
            f"os.environ.get('VLLM_CPU_OMP_THREADS_BIND')); raise SystemExit({exit_code})")
    return lanes.Job(name, (sys.executable, "-c", code), seconds, gib)


def _two_lanes() -> list:
    """Two lanes pinned to the cores this process may use: two of them, or its one core twice (./test.sh runs this
    test in a session pinned to one core)."""
    cpus = sorted(lanes.os.sched_getaffinity(0))
    return [lanes.Lane((cpus[0],)), lanes.Lane((cpus[-1],))]


def test_a_chapter_reading_what_a_stale_chapter_saves_needs_that_chapter(tmp_path):
    _notebook(tmp_path, "04_a", 400, saves=["results/cpu/a.csv"], peak_gib=8)
    _notebook(tmp_path, "05_b", 300, saves=["results/cpu/b.csv"])
    _notebook(tmp_path, "08_guide", 5, reads=["results/cpu/a.csv"])
    _notebook(tmp_path, "09_other", 5, reads=["results/cpu/z.csv"])
    jobs = lanes.chapter_jobs(["04_a", "05_b", "08_guide", "09_other"], tmp_path, ("-x",))
    assert [(j.name, j.seconds, j.needs) for j in jobs] == [("04_a", 400, ()), ("05_b", 300, ()),
                                                            ("08_guide", 5, ("04_a",)), ("09_other", 5, ())]
    assert jobs[0].gib == 8 * lanes.MARGIN and jobs[1].gib is None  # 05_b never recorded its peak
    assert jobs[0].command[1:4] == ("-m", "pytest", str(tmp_path / "04_a.ipynb"))
    assert "--nbval-lax" in jobs[0].command and jobs[0].command[-1] == "-x"


def test_a_chapter_with_no_recorded_run_time_counts_as_long(tmp_path):
    _notebook(tmp_path, "02_new")
    assert lanes.recorded_seconds(tmp_path / "02_new.ipynb") == lanes.UNRECORDED_S
    assert lanes.recorded_seconds(tmp_path / "missing.ipynb") == lanes.UNRECORDED_S


def test_cores_split_into_contiguous_parts_and_vllm_keeps_one_for_its_scheduler():
    assert lanes.split_cpus([0, 1, 2, 3, 4], 2) == [(0, 1, 2), (3, 4)]
    assert lanes.Lane((0, 1, 2)).vllm_bind == "1,2" and lanes.Lane((1,)).vllm_bind == "1"
    assert [lane.cpus for lane in lanes.lanes_for([0, 1])] == [(0,), (1,)]
    assert [lane.cpus for lane in lanes.lanes_for([5])] == [()]  # one core: one lane, not pinned
    with pytest.raises(ValueError, match="cannot split 1 cores into 2 lanes"):
        lanes.split_cpus([0], 2)


def test_each_lane_takes_the_longest_job_left_pinned_to_its_core(tmp_path):
    jobs = [_sleeper("long", 1.2), _sleeper("mid", 0.8), _sleeper("short", 0.3), _sleeper("tiny", 0.1)]
    done = lanes.run(jobs, _two_lanes(), tmp_path, budget_gib=10)
    order = [[d.job.name for d in lane.done] for lane in done]
    # long -> lane 0, mid -> lane 1; mid ends first, so lane 1 takes short, then tiny (0.8 + 0.3 + 0.1 < 1.2)
    assert order == [["long"], ["mid", "short", "tiny"]]
    for lane in done:
        for d in lane.done:
            assert d.returncode == 0
            assert d.log.read_text().split() == [f"[{lane.cpus[0]}]", str(lane.cpus[0])]


def test_a_job_runs_only_where_its_memory_fits_beside_the_running_ones(tmp_path):
    # big (6 GiB) and heavy (5 GiB) do not fit together in 10: heavy waits for big although a lane is free, and the
    # light jobs run beside big meanwhile
    jobs = [_sleeper("big", 1.0, gib=6), _sleeper("heavy", 0.9, gib=5), _sleeper("light", 0.3, gib=2),
            _sleeper("light too", 0.2, gib=2)]
    done = lanes.run(jobs, _two_lanes(), tmp_path, budget_gib=10)
    assert [[d.job.name for d in lane.done] for lane in done] in (
        [["big", "heavy"], ["light", "light too"]], [["big"], ["light", "light too", "heavy"]])


def test_a_chapter_never_measured_leaves_room_for_light_jobs_only(tmp_path):
    jobs = [_sleeper("unmeasured", 0.8, gib=None), _sleeper("engine tests", 0.5, gib=4),
            _sleeper("fast tests", 0.2, gib=2)]
    # budget 10: the unmeasured chapter counts 7.5, so only the 2-GiB job runs beside it; the 4-GiB one waits
    done = lanes.run(jobs, _two_lanes(), tmp_path, budget_gib=10)
    orders = [[d.job.name for d in lane.done] for lane in done]
    assert ["unmeasured", "engine tests"] in orders or ["fast tests", "engine tests"] in orders
    ends = {d.job.name: d for lane in done for d in lane.done}
    assert ends["engine tests"].seconds < 1.0 and all(d.returncode == 0 for d in ends.values())


def test_a_job_too_big_for_the_budget_runs_alone(tmp_path):
    done = lanes.run([_sleeper("huge", 0.1, gib=50), _sleeper("small", 0.1, gib=1)],
                     _two_lanes(), tmp_path, budget_gib=10)
    assert sorted(d.job.name for lane in done for d in lane.done) == ["huge", "small"]


def test_a_failed_job_fails_the_report_and_so_does_testing_nothing(tmp_path, capsys):
    lane = lanes.Lane(())
    lane.done = [lanes.Done(_sleeper("ok", 0), (), 0, 1.0, tmp_path / "ok.log"),
                 lanes.Done(_sleeper("none", 0), (), lanes.NO_TESTS, 1.0, tmp_path / "none.log")]
    for d in lane.done:
        d.log.write_text(f"{d.job.name} said this\n")
    assert lanes.report([lane]) == 0
    assert "ok said this" in capsys.readouterr().out
    lane.done[0].returncode = 1
    assert lanes.report([lane]) == 1
    lane.done[0].returncode = lanes.NO_TESTS
    assert lanes.report([lane]) == 1


def test_sessions_file_lines_and_one_clear_line_for_a_bad_one(tmp_path):
    sessions = tmp_path / "sessions.tsv"
    sessions.write_text('fast tests\t180\t2.5\tpython -m pytest tests -m "not server"\n\n')
    [job] = lanes.read_sessions(sessions, ("-k", "x"))
    assert job == lanes.Job("fast tests", ("python", "-m", "pytest", "tests", "-m", "not server", "-k", "x"), 180, 2.5)
    sessions.write_text("fast tests\t180\tpython -m pytest\n")
    with pytest.raises(ValueError, match=r"sessions.tsv:1: .* is not NAME<TAB>SECONDS<TAB>GIB<TAB>COMMAND"):
        lanes.read_sessions(sessions)


def test_a_job_starts_once_what_it_needs_ended_and_a_cycle_is_one_clear_line(tmp_path):
    clock = "import time; print(time.monotonic()); time.sleep({})"
    first = lanes.Job("04_a", (sys.executable, "-c", "import time; time.sleep(0.5); print(time.monotonic())"), 0.5, 1.0)
    other = lanes.Job("05_b", (sys.executable, "-c", clock.format(0.1)), 0.1, 1.0)
    reader = lanes.Job("08_guide", (sys.executable, "-c", clock.format(0.1)), 5.0, 1.0, needs=("04_a",))
    done = {d.job.name: d for lane in lanes.run([first, other, reader], _two_lanes(), tmp_path, budget_gib=10)
            for d in lane.done}
    at = {name: float(d.log.read_text()) for name, d in done.items()}  # 04_a: when it ended; the others: started
    # the reader is the longest job but needs 04_a: 05_b starts first, the reader once 04_a ended
    assert at["05_b"] < at["04_a"] < at["08_guide"]
    _notebook(tmp_path, "04_a", 400, reads=["results/cpu/b.csv"], saves=["results/cpu/a.csv"])
    _notebook(tmp_path, "07_b", 300, reads=["results/cpu/a.csv"], saves=["results/cpu/b.csv"])
    with pytest.raises(ValueError, match=r"chapters 04_a, 07_b each need another of them to run first"):
        lanes.chapter_jobs(["04_a", "07_b"], tmp_path)


def test_the_command_runs_sessions_and_chapters_and_counts_the_engine_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lanes, "NOTEBOOKS", tmp_path)
    # each job notes when it ends; 04_a also notes an engine start, as a chapter's server would
    envs = str(engine_envs.get(profiles.load("cpu").vllm_env).path)
    note = ("import json, os, time; log = os.environ['SERVELAB_START_LOG']; "
            "open(log, 'a').write(json.dumps({{'engine': 'vllm', 'by': '{0}', 'argv': ['" + envs + "/bin/vllm']}})"
            " + chr(10)) if '{0}' == '04_a' else None; time.sleep(0.2); print('{0}', time.monotonic())")
    monkeypatch.setattr(lanes, "chapter_jobs", lambda stale, pytest_args: [
        lanes.Job(n, (sys.executable, "-c", note.format(n)), 1, 1.0, needs=("04_a",) if n == "08_guide" else ())
        for n in stale])
    (tmp_path / "stale.txt").write_text("notebooks/04_a.ipynb\nnotebooks/08_guide.ipynb\n")
    (tmp_path / "sessions.tsv").write_text(f"fast tests\t1\t1\t{sys.executable} -c 'print(\"fast\")'\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    assert lanes.main(["--stale", str(tmp_path / "stale.txt"), "--sessions", str(tmp_path / "sessions.tsv"), "--logs",
                       str(logs)]) == 0
    out = capsys.readouterr().out
    assert "3 jobs" in out and "08_guide (~1 s, 1.0 GiB, after 04_a)" in out and "peak" in out
    ended = {n: float((logs / f"{n}.log").read_text().split()[1]) for n in ("04_a", "08_guide")}
    assert ended["08_guide"] > ended["04_a"] + 0.2  # it started after 04_a ended
    assert "engine starts: 1 real (vllm 1), 0 of the lifecycle tests' stand-in" in out and "1  04_a" in out
