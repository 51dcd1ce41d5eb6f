"""The chapters' server declarations (servelab.measure.chapter_servers) are what the chapters start.

On cpu, each chapter's declared launches, built into argv the way servelab.engines.server does, must equal the
starts its last execution recorded (`starts` in the executed notebook's metadata): a server started but not
declared, or declared but never started, fails. On the GPU profiles the declarations must build, and must not
need what only the cpu profile has.
"""

from __future__ import annotations

from collections import Counter

import pytest

from servelab.book import chapters, execution_key, launch_plan
from servelab.machine import profiles
from servelab.measure import chapter_servers
from servelab.measure.chapter_servers import Launch

SOURCES = chapters.sources()
GPU_PROFILES = [n for n in profiles.names() if profiles.load(n).device == "cuda"]


def declared(source, profile: profiles.Profile, overrides: dict | None = None) -> Counter:
    counts: Counter = Counter()
    for planned in launch_plan.plan_launches(profile, [source], overrides):
        if not planned.launch.needs:
            counts[(planned.launch.engine, tuple(chapters.comparable_argv(planned.argv)))] += planned.launch.starts
    return counts


def _without_event_address(argv: list[str]) -> tuple[str, ...]:
    """A start's argv without `--kv-events-config` and its value: chapters 03 and 04 add it at run time, pointing
    at their recorder's free port, which no declaration can know."""
    out = list(argv)
    if "--kv-events-config" in out:
        i = out.index("--kv-events-config")
        del out[i:i + 2]
    return tuple(out)


@pytest.mark.engine_venv  # chapter 06's drafts are cut from the converted cpu model (its config.json)
@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_a_chapter_starts_exactly_the_servers_it_declares(source, require_engine):
    require_engine("vllm")
    meta = execution_key.recorded(source.with_suffix(".ipynb")) or {}
    assert "starts" in meta, f"{source.stem}: its executed notebook records no starts; re-execute it"
    recorded = Counter((s["engine"], _without_event_address(s["argv"])) for s in meta["starts"])
    expected = declared(source, profiles.load(meta["profile"]), meta.get("parameters"))
    assert recorded == expected, {"started, not declared": recorded - expected,
                                  "declared, not started": expected - recorded}


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_every_gpu_declaration_builds_without_cpu_artifacts(name):
    prof = profiles.load(name)
    planned = launch_plan.plan_launches(prof)
    assert {p.chapter for p in planned} == {s.stem for s in SOURCES if launch_plan.starts_engines(s)}
    for p in planned:
        assert not (p.launch.model or prof.model).startswith("local:"), (p.chapter, p.launch.name)
        assert "$SERVELAB_HOME" not in " ".join(chapters.comparable_argv(p.argv)), (p.chapter, p.launch.name)
        assert p.models, (p.chapter, p.launch.name)  # every GPU launch reads a hub model that setup downloads


def test_an_unknown_chapter_is_one_line():
    with pytest.raises(ValueError, match="unknown chapter '09'; accepted: 00, 01"):
        chapter_servers.of("09", profiles.load("gpu-24g"))


def test_a_launch_builds_the_servers_command():
    prof = profiles.load("gpu-24g")
    argv = launch_plan.planned(prof, "99", Launch("x", "vllm", {"kv_cache_tokens": 4096, "block_size": 16})).argv
    assert argv[argv.index("--block-size") + 1] == "16" and "--kv-cache-memory-bytes" in argv
