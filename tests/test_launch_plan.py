"""`python -m servelab plan`: every GPU profile's plan holds (each launch parsed, paired and fitted by the engines'
own rules, without a GPU), and a bad launch is found, one line per problem."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servelab.book import chapters, launch_plan
from servelab.machine import gpu_checks, profiles
from servelab.machine.paths import REPO
from servelab.measure.chapter_servers import Launch

GPU_PROFILES = [n for n in profiles.names() if profiles.load(n).device == "cuda"]


@pytest.fixture(scope="module")
def plans() -> dict[str, launch_plan.Plan]:
    return {name: launch_plan.build(name) for name in GPU_PROFILES}


@pytest.mark.engine_venv
@pytest.mark.parametrize("name", GPU_PROFILES)
def test_every_gpu_profiles_plan_has_no_problem(plans, name):
    plan = plans[name]
    assert plan.problems == [], "\n".join(plan.problems)
    assert plan.profile.model in plan.models and len(plan.chapters) == len(chapters.sources())
    # every chapter but the ones that only read saved results (launch_plan.READS_ONLY) starts an engine
    assert all((c.starts > 0) == (c.chapter not in launch_plan.READS_ONLY) for c in plan.chapters)
    assert launch_plan.disk_bytes(plan) > sum(gpu_checks.model_bytes(m) for m in plan.models) > 0
    text = launch_plan.markdown(plan)
    assert "Problems: none" in text and "GPU-hours" in text


def _planned(profile: profiles.Profile, *launches: Launch) -> list[launch_plan.PlannedLaunch]:
    return [launch_plan.planned(profile, "99_control", item) for item in launches]


@pytest.mark.engine_venv
def test_the_plan_finds_what_the_engines_would_refuse(require_engine):
    """Controls that must fail: the pair SGLang refuses, a model too large for the card, an unknown flag, a cpu
    artifact on a GPU profile; one line each, naming the launch."""
    require_engine("sglang")
    prof = profiles.load("gpu-80g")
    bad = _planned(prof,
                   Launch("standalone", "sglang", {"speculative_algorithm": "STANDALONE",
                                                   "speculative_draft_model_path": "Qwen/Qwen2.5-0.5B-Instruct"}),
                   Launch("too big", "vllm", {}, model="Qwen/Qwen2.5-72B-Instruct"),
                   Launch("typo", "vllm", {"max_num_seqz": 4}),
                   Launch("cpu model", "vllm", {}, model="local:smollm2-135m-instruct"))
    found, _ = launch_plan.problems(prof, bad)
    assert all("\n" not in line for line in found)
    assert any("'standalone'" in line and "151936" in line and "152064" in line for line in found), found
    assert any("'too big'" in line and "vLLM needs" in line for line in found), found
    assert any("'typo'" in line and "unrecognized arguments: --max-num-seqz" in line for line in found), found
    assert any("'cpu model'" in line and "only the cpu profile converts" in line for line in found), found


def test_a_gated_model_is_named_with_what_to_do(monkeypatch):
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    prof = profiles.load("gpu-80g")
    planned = [p for p in launch_plan.plan_launches(prof) if "meta-llama/Llama-3.1-8B-Instruct" in p.models]
    assert planned and {p.chapter for p in planned} == {"06_speculative_decoding"}


def test_parameters_are_read_from_the_parameters_cell():
    params = launch_plan.parameters(REPO / "notebooks" / "06_speculative_decoding.py")
    assert params["profile"] == "auto" and params["k"] == 4 and params["lookup"] == (2, 4)


def test_a_bad_profile_is_one_line():
    out = subprocess.run([sys.executable, "-m", "servelab", "plan", "--profile", "gpu-7g"], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unknown profile 'gpu-7g'" in out.stderr


@pytest.mark.engine_venv
@pytest.mark.parametrize("name", GPU_PROFILES)
def test_the_cloud_page_shows_the_current_plan(plans, name):
    """book/cloud_gpu.md includes book/plans/<profile>.txt: what `plan` prints now, not what it printed once."""
    committed = (REPO / "book" / "plans" / f"{name}.txt").read_text()
    assert committed == launch_plan.markdown(plans[name]), (
        f"book/plans/{name}.txt is stale: python -m servelab plan --profile {name} --markdown book/plans/{name}.txt")


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_the_cloud_page_names_each_profiles_models(name):
    page = (REPO / "book" / "cloud_gpu.md").read_text()
    prof = profiles.load(name)
    row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
    assert prof.model.split("/")[1] in row and prof.draft_model.split("/")[1] in row
    assert f"plans/{name}.txt" in page
