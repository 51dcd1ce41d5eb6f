"""Scripts that run inside an engine's venv (they import torch, transformers, vllm or sglang).

The notebook kernel never imports an engine; it runs these files with the engine venv's python
and reads one JSON document from their stdout. They import nothing from servelab.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run_script(python: Path, script: str, *args: str, stdin: str | None = None, timeout: float = 600,
               env: dict[str, str] | None = None) -> Any:
    """Run `script` (a file in this folder) with an engine venv's python; return its JSON output."""
    out = subprocess.run(
        [str(python), str(HERE / script), *args], input=stdin, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )
    if out.returncode:
        tail = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{script} failed with exit code {out.returncode}: {tail[0]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
