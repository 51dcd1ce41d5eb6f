"""Shallow drafts cut from the same checkpoint: a local model's first n decoder layers, as a folder.

A draft for speculative decoding must share the target's tokenizer (vLLM checks that the
vocabulary sizes match). No other small model shares SmolLM2's, so chapter 06 makes drafts from the
model itself: its first n layers, then its own final norm and LM head. Such a draft was never
trained to stop early, so how often the target accepts its tokens is an open question the chapter
measures.

The cut runs inside an engine venv (``venv_scripts/truncate_layers.py``: safetensors and torch) and
is written to a temporary folder beside the final one, then renamed into place with its manifest,
so a half-written draft is never mistaken for one. A draft whose manifest records the current
checksums of its source is reused.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from servelab.integers import int_at_least
from servelab.machine.engine_envs import ScriptFailed, run_script
from servelab.machine.models import MANIFEST, VENV_SCRIPTS, ModelMissing, check_local_name, is_prepared, sha256
from servelab.machine.models import local_dir as model_dir


def draft_name(name: str, n_layers: int) -> str:
    return f"{name}-first{n_layers}"


def _checksums(folder: Path) -> dict[str, str]:
    return {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}


def _is_current(folder: Path, source_sums: dict[str, str], n_layers: int) -> bool:
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return False
    recorded = json.loads(manifest.read_text())
    return recorded.get("n_layers") == n_layers and recorded.get("source_sha256") == source_sums


def truncated_copy(name: str, n_layers: int, python: Path) -> Path:
    """The folder of local model ``name`` cut to its first ``n_layers`` layers, made if needed.

    ``python`` is an engine venv's interpreter (it needs safetensors and torch). The folder is
    ``$SERVELAB_HOME/models/<name>-first<n>``; pass it to an engine as a draft model path.
    """
    check_local_name(name)
    n_layers = int_at_least("n_layers", n_layers, 1, "decoder layers to keep")
    if not is_prepared(name):
        raise ModelMissing(f"model {name!r} is not prepared; run: python -m servelab setup --model {name}")
    source = model_dir(name)
    total = json.loads((source / "config.json").read_text())["num_hidden_layers"]
    if n_layers > total:
        raise ValueError(f"n_layers must be at most {name}'s {total} layers, got {n_layers}")
    source_sums = json.loads((source / MANIFEST).read_text())["sha256"]
    final = model_dir(draft_name(name, n_layers))
    if _is_current(final, source_sums, n_layers):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{final.name}-") as tmp:
        out = Path(tmp) / final.name
        try:
            report = run_script(python, VENV_SCRIPTS / "truncate_layers.py", str(source), str(out), str(n_layers))
        except ScriptFailed as err:
            raise ModelMissing(f"cutting {name} to {n_layers} layers: {err}") from None
        manifest = {"name": final.name, "truncated_from": name, "n_layers": n_layers, "report": report,
                    "source_sha256": source_sums, "sha256": _checksums(out)}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if final.exists():
            shutil.move(str(final), str(Path(tmp) / "stale"))  # removed with the temporary folder
        out.rename(final)
    return final
