"""The lanes ./test.sh re-executes chapters in: longest first, each where it finishes soonest, one core each; a
chapter that reads what another re-executed chapter saves runs after them."""

from __future__ import annotations

import json

import pytest

from servelab import cli
from servelab.book import lanes
from servelab.book.execution_key import Status


def _notebook(folder, name, seconds=None, reads=(), saves=()):
    meta = {"reads": {r: "x" for r in reads}, "saves": list(saves)}
    if seconds is not None:
        meta["seconds"] = seconds
    (folder / f"{name}.ipynb").write_text(json.dumps({"metadata": {"servelab": meta}, "cells": []}))


def _stale(*names):
    return [Status(name, "k", "changed") for name in names]


def test_the_longest_chapter_goes_first_each_into_the_lane_that_finishes_soonest(tmp_path):
    for name, seconds in [("00_a", 200), ("01_b", 700), ("02_c", 450), ("03_d", 400), ("04_e", 300)]:
        _notebook(tmp_path, name, seconds)
    found, after = lanes.plan(_stale("00_a", "01_b", "02_c", "03_d", "04_e"), tmp_path, cpus=[0, 1])
    assert after == []
    # 700 -> lane 0; 450 -> lane 1; 400 -> lane 1 (850); 300 -> lane 0 (1000); 200 -> lane 1 (1050)
    assert [lane.chapters for lane in found] == [("01_b", "04_e"), ("00_a", "02_c", "03_d")]
    assert [lane.seconds for lane in found] == [1000, 1050]
    assert [lane.cpus for lane in found] == [(0,), (1,)]
    assert [lane.vllm_bind for lane in found] == ["0", "1"]


def test_a_chapter_reading_what_a_stale_chapter_saves_runs_after_the_lanes(tmp_path):
    _notebook(tmp_path, "04_a", 400, saves=["results/cpu/a.csv"])
    _notebook(tmp_path, "05_b", 300, saves=["results/cpu/b.csv"])
    _notebook(tmp_path, "08_guide", 5, reads=["results/cpu/a.csv"])
    _notebook(tmp_path, "09_other", 5, reads=["results/cpu/z.csv"])
    found, after = lanes.plan(_stale("04_a", "05_b", "08_guide", "09_other"), tmp_path, cpus=[0, 1])
    assert after == ["08_guide"]
    assert sorted(c for lane in found for c in lane.chapters) == ["04_a", "05_b", "09_other"]


def test_one_chapter_or_one_core_is_one_lane_not_pinned(tmp_path):
    for name in ("06_a", "07_b"):
        _notebook(tmp_path, name, 100)
    found, after = lanes.plan(_stale("06_a"), tmp_path, cpus=[0, 1])
    assert [(lane.cpus, lane.chapters) for lane in found] == [((), ("06_a",))] and after == []
    found, _ = lanes.plan(_stale("06_a", "07_b"), tmp_path, cpus=[3])
    assert [(lane.cpus, lane.chapters) for lane in found] == [((), ("06_a", "07_b"))]
    assert lanes.plan([Status("06_a", "k", "")], tmp_path, cpus=[0, 1]) == ([], [])


def test_a_chapter_with_no_recorded_run_time_counts_as_long(tmp_path):
    _notebook(tmp_path, "00_a", 500)
    _notebook(tmp_path, "01_b", 100)
    _notebook(tmp_path, "02_new")
    assert lanes.recorded_seconds(tmp_path / "02_new.ipynb") == lanes.UNRECORDED_S
    found, _ = lanes.plan(_stale("00_a", "01_b", "02_new"), tmp_path, cpus=[0, 1])
    assert found[0].chapters == ("02_new",)


def test_cores_split_into_contiguous_parts_and_vllm_keeps_one_for_its_scheduler():
    assert lanes.split_cpus([0, 1, 2, 3, 4], 2) == [(0, 1, 2), (3, 4)]
    assert lanes.Lane((0, 1, 2), (), 0).vllm_bind == "1,2"
    assert lanes.Lane((), (), 0).vllm_bind == ""
    with pytest.raises(ValueError, match="cannot split 1 cores into 2 lanes"):
        lanes.split_cpus([0], 2)


def test_keys_command_writes_the_lanes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lanes.os, "sched_getaffinity", lambda pid: {0, 1})
    out = tmp_path / "lanes.txt"
    assert cli.main(["keys", "--all", "--lanes", str(out)]) == 0
    rows = [line.split() for line in out.read_text().splitlines()]
    assert {(lane, cpus, bind) for lane, cpus, bind, _ in rows} == {("0", "0", "0"), ("1", "1", "1"),
                                                                    ("after", "-", "-")}
    assert [path for lane, *_, path in rows if lane == "after"] == ["notebooks/08_selection_guide.ipynb"]
    assert len(rows) == 9 and "[lanes] lane 0 (cores 0)" in capsys.readouterr().out
