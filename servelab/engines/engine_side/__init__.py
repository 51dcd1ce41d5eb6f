"""Scripts that run inside an engine's venv (they import vllm or sglang), one JSON document on stdout.

The notebook kernel never imports an engine: it runs these files with
`servelab.machine.engine_envs.run_script(python, script(NAME), ...)`. They import nothing from servelab.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def script(name: str) -> Path:
    """The path of engine-side script `name` (e.g. "sgl_agent.py"); a ValueError if there is none."""
    path = HERE / name
    if not path.is_file():
        known = ", ".join(sorted(p.name for p in HERE.glob("*.py") if not p.name.startswith("_")))
        raise ValueError(f"no engine-side script {name!r}; available: {known}")
    return path
