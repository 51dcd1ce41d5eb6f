"""The CI workflows: valid against GitHub's workflow schema, and running the commands the README names.

Validation uses check-jsonschema's vendored (offline) schemas; every call runs with proxies pointing
at a closed port, so a schema download would fail the test instead of silently using the network.
A deliberately broken workflow must fail the same validation, which proves the validator checks.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
CPU = WORKFLOWS / "book-cpu.yml"
GPU = WORKFLOWS / "book-gpu.yml"
PAGES = WORKFLOWS / "book-pages.yml"
BOOK_COMMAND = ".venv/bin/python -m servelab book"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
GPU_PROFILES = ["auto", "gpu-24g", "gpu-80g"]
TEST_COMMAND = "./test.sh"
CHECK_COMMAND = ('.venv/bin/python -m pytest tests/test_notebooks.py -k "ran_every_cell or check_cell_printed_true"'
                 " -p no:cacheprovider")


def validate(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with a builtin schema, with the network made unreachable."""
    dead = "http://127.0.0.1:9"
    env = {**os.environ, "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
           "NO_PROXY": "", "no_proxy": ""}
    return subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", schema, *map(str, files)],
                          capture_output=True, text=True, env=env, timeout=120)


def load(path: Path) -> dict[str, Any]:
    workflow = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in workflow:
        workflow["on"] = workflow.pop(True)
    return workflow


def job(workflow: dict[str, Any]) -> dict[str, Any]:
    (only,) = workflow["jobs"].values()
    return only


def commands(workflow: dict[str, Any]) -> list[str]:
    """Every shell command line of every step, whitespace-normalized."""
    lines = []
    for step in job(workflow)["steps"]:
        for line in str(step.get("run", "")).splitlines():
            if line.strip() and not line.strip().startswith("#"):
                lines.append(" ".join(line.split()))
    return lines


def uses(workflow: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in job(workflow)["steps"] if str(step.get("uses", "")).startswith(f"{action}@")]


@pytest.mark.parametrize("schema", ["vendor.github-workflows", "custom.github-workflows-require-timeout"])
def test_workflows_are_valid(schema: str) -> None:
    result = validate(schema, CPU, GPU, PAGES)
    assert result.returncode == 0, result.stdout + result.stderr


# A broken workflow and the error that must name the reason it is broken.
BROKEN = {
    "job without runs-on": (
        {"on": {"push": None}, "jobs": {"build": {"steps": [{"run": "./test.sh"}]}}},
        "'runs-on' is a required property",
    ),
    "unknown trigger": (
        {"on": {"pushed": None}, "jobs": {"build": {"runs-on": "ubuntu-latest", "steps": [{"run": "./test.sh"}]}}},
        "{'pushed': None}",
    ),
    "choice input without options": (
        {
            "on": {"workflow_dispatch": {"inputs": {"profile": {"type": "choice"}}}},
            "jobs": {"build": {"runs-on": "ubuntu-latest", "steps": [{"run": "./test.sh"}]}},
        },
        "'options' is a required property",
    ),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_workflow_fails_validation(name: str, tmp_path: Path) -> None:
    workflow, reason = BROKEN[name]
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(workflow, sort_keys=False))
    result = validate("vendor.github-workflows", path)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Schema validation errors were encountered" in output
    assert reason in output


def test_fixed_workflow_passes_validation(tmp_path: Path) -> None:
    """The control for the broken ones: the first, with runs-on added, is valid."""
    workflow, _ = BROKEN["job without runs-on"]
    workflow = {**workflow, "jobs": {"build": {**workflow["jobs"]["build"], "runs-on": "ubuntu-latest"}}}
    path = tmp_path / "fixed.yml"
    path.write_text(yaml.safe_dump(workflow, sort_keys=False))
    result = validate("vendor.github-workflows", path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cpu_workflow_runs_the_test_command() -> None:
    workflow = load(CPU)
    assert set(workflow["on"]) == {"push", "pull_request"}
    build = job(workflow)
    assert build["runs-on"] == "ubuntu-latest"
    assert build["timeout-minutes"] == 90
    assert TEST_COMMAND in commands(workflow)
    (python,) = uses(workflow, "actions/setup-python")
    assert str(python["with"]["python-version"]) == "3.11"
    (cache,) = uses(workflow, "actions/cache")
    assert cache["with"]["path"] == "~/.cache/servelab"
    assert "hashFiles('servelab/data/locks/*.txt', 'servelab/data/*.toml')" in cache["with"]["key"]
    (upload,) = uses(workflow, "actions/upload-artifact")
    assert upload["with"]["path"] == "_build/html"


def test_gpu_workflow_runs_setup_papermill_and_checks_each_notebook_once() -> None:
    workflow = load(GPU)
    dispatch = workflow["on"]["workflow_dispatch"]["inputs"]["profile"]
    assert dispatch["type"] == "choice"
    assert dispatch["options"] == GPU_PROFILES
    assert dispatch["default"] == "auto"
    assert workflow["on"]["schedule"]
    notebooks = job(workflow)
    assert notebooks["runs-on"] == ["self-hosted", "linux", "gpu"]
    assert notebooks["timeout-minutes"] == 240
    assert notebooks["env"]["PROFILE"] == "${{ inputs.profile || 'auto' }}"
    lines = commands(workflow)
    bootstrap = lines.index("source scripts/bootstrap.sh")
    setup = next(i for i, c in enumerate(lines) if c.endswith('-m servelab setup --profile "$PROFILE"'))
    plan = next(i for i, c in enumerate(lines) if '-m servelab plan --profile "$PROFILE"' in c)
    assert bootstrap < plan < setup, "the plan checks every launch before anything is installed or downloaded"
    run_all = '-m servelab notebooks --profile "$PROFILE" --keep-going'
    execute = next(i for i, c in enumerate(lines) if c.endswith(run_all))
    check = lines.index(CHECK_COMMAND)
    assert bootstrap < setup < execute < check
    assert not [c for c in lines if "nbval" in c], "a second execution of every notebook"
    selected = shlex.split(lines[check])[shlex.split(lines[check]).index("-k") + 1]
    tests = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-k", selected,
                            str(REPO / "tests" / "test_notebooks.py")], capture_output=True, text=True, cwd=REPO)
    names = {line.split("::")[1].split("[")[0] for line in tests.stdout.splitlines() if "::" in line}
    assert names == {"test_committed_notebook_ran_every_cell_without_error", "test_every_check_cell_printed_true"}
    assert any("SERVELAB_HOME=" in c and "runner.tool_cache" in c and "GITHUB_ENV" in c for c in lines)
    (upload,) = uses(workflow, "actions/upload-artifact")
    assert upload["if"] == "always()"
    assert {"plan.md", "notebooks/*.ipynb", "results/", "_build/failed/", "${{ env.SERVELAB_HOME }}/logs/"} <= set(
        upload["with"]["path"].splitlines())
    assert notebooks["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    (python,) = uses(workflow, "actions/setup-python")
    assert str(python["with"]["python-version"]) == "3.11"


def test_every_workflow_is_validated() -> None:
    assert sorted(WORKFLOWS.glob("*.y*ml")) == sorted([CPU, GPU, PAGES])


def test_pages_workflow_builds_the_committed_book_and_deploys_it_with_the_pages_actions() -> None:
    """On pushes to main: the kernel venv, the five-language book from the committed notebooks (nothing executed,
    no engine set up), the site folder uploaded as the Pages artifact; a second job deploys it to github-pages."""
    workflow = load(PAGES)
    assert workflow["on"]["push"] == {"branches": ["main"]} and set(workflow["on"]) <= {"push", "workflow_dispatch"}
    assert workflow["permissions"] == {"contents": "read"}, "the workflow's default stays read-only"
    assert workflow["concurrency"]["cancel-in-progress"] is False, "a deployment under way is never cancelled"
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert build["runs-on"] == deploy["runs-on"] == "ubuntu-latest"
    steps = build["steps"]
    lines = [" ".join(line.split()) for step in steps for line in str(step.get("run", "")).splitlines() if line]
    assert lines == ["source scripts/bootstrap.sh", BOOK_COMMAND], "no setup, no notebooks, no engine: only the book"
    action = [str(step.get("uses", "")).split("@")[0] for step in steps]
    assert action == ["actions/checkout", "actions/setup-python", "", "", "actions/configure-pages",
                      "actions/upload-pages-artifact"]
    assert str(steps[1]["with"]["python-version"]) == "3.11"
    from servelab.book import chapters

    assert REPO / steps[-1]["with"]["path"] == chapters.REPO / "_build" / "html", "what `servelab book` writes"
    assert build["permissions"] == {"contents": "read", "pages": "read"}
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"] == {"name": "github-pages", "url": "${{ steps.deployment.outputs.page_url }}"}
    (step,) = deploy["steps"]
    assert step["id"] == "deployment" and step["uses"].split("@")[0] == "actions/deploy-pages"
    from servelab import cli

    with pytest.raises(SystemExit) as done:  # the command exists and takes no option the workflow forgot
        cli.main([*shlex.split(BOOK_COMMAND)[3:], "--help"])
    assert done.value.code == 0


def test_readme_names_the_commands_the_workflows_run() -> None:
    readme = REPO / "README.md"
    if not readme.exists():
        pytest.skip("README.md not written yet")
    text = readme.read_text()
    assert TEST_COMMAND in text
    assert "./lab.sh" in text
