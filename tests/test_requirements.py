import re

from servelab.machine.paths import REPO


def _pins(text: str) -> list[str]:
    return sorted(m.group(1) for m in re.finditer(r"^\s*(?:- )?([A-Za-z0-9_.-]+==[^\s#]+)", text, re.M))


def test_environment_yml_and_requirements_txt_pin_the_same_kernel_env():
    reqs = _pins((REPO / "requirements.txt").read_text())
    assert reqs and reqs == _pins((REPO / "environment.yml").read_text())


def test_kernel_env_has_no_torch():
    assert not [p for p in _pins((REPO / "requirements.txt").read_text()) if p.startswith(("torch", "vllm", "sglang"))]
