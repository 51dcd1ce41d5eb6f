"""A recorder wrapped round SGLang's sgl_kernel stand-in: every name SGLang asks of it, every submodule import
attempt, the first call of each op. Used by tests/test_sgl_stand_in.py and by the session's shared SGLang server
(conftest `live`), which serves with it so that one server start answers both."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from servelab.engines import launch

# Installed in front of the real stand-in: turns the module into one that logs every name SGLang asks of it
# (present or not), every `sgl_kernel.<sub>` import attempt, and the first call of each provided op.
# SERVELAB_SGL_RECORD names the log file (one JSON object per line).
RECORDER = """
import importlib.abc, json, os, sys, types
_log_path = os.environ["SERVELAB_SGL_RECORD"]

def _log(kind, name):
    with open(_log_path, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "kind": kind, "name": name}) + "\\n")

class _SubmoduleSpy(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("sgl_kernel."):
            _log("submodule", fullname)
        return None

sys.meta_path.insert(0, _SubmoduleSpy())
import sgl_kernel as _sk
_PINNED = {"version": _sk.SGLANG_VERSION, "ops": _sk.OPS, "unsupported": _sk.UNSUPPORTED}

def _spy(name, fn):
    called = []
    def wrapper(*args, **kwargs):
        if not called:
            called.append(True)
            _log("call", name)
        return fn(*args, **kwargs)
    return wrapper

for _n in _sk.OPS + _sk.UNSUPPORTED:
    setattr(_sk, _n, _spy(_n, getattr(_sk, _n)))

class _Recording(types.ModuleType):
    def __getattribute__(self, name):
        if not name.startswith("__"):
            _log("get", name)
        return super().__getattribute__(name)

_sk.__class__ = _Recording
"""


def read_record(path: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"get": set(), "submodule": set(), "call": set()}
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            out[rec["kind"]].add(rec["name"])
    return out


def server_env(folder: Path) -> tuple[dict[str, str], Path]:
    """The environment that makes an SGLang CPU server record (a sitecustomize in front of the stand-in), and the
    file it records to."""
    site = folder / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('SGLANG_USE_CPU_ENGINE') == '1':\n" + textwrap.indent(RECORDER, "    "))
    log = folder / "record.jsonl"
    return {"SERVELAB_SGL_RECORD": str(log), "PYTHONPATH": f"{site}{os.pathsep}{launch.SGL_STAND_IN}"}, log
