import ast
import re

from servelab.engines.launch import SGL_STAND_IN
from servelab.machine import profiles
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
