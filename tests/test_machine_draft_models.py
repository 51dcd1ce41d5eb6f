"""Shallow drafts cut from the cpu profile's model: config, tensor names and bytes, reuse, loadability.

Needs the vLLM venv (safetensors, torch, transformers) and the converted model; starts no server.
The copy is made under a temporary SERVELAB_HOME that links to the real model folder.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from servelab.machine import draft_models, engine_envs, models
from servelab.measure.speculative.verification import llama_parameters, safetensors_parameters

pytestmark = pytest.mark.engine_venv


def _header(path: Path) -> tuple[dict, int]:
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length)), 8 + length


def _tensor_bytes(path: Path, name: str) -> bytes:
    header, start = _header(path)
    begin, end = header[name]["data_offsets"]
    with path.open("rb") as f:
        f.seek(start + begin)
        return f.read(end - begin)


@pytest.fixture(scope="module")
def cut(require_engine, cpu, tmp_path_factory):
    require_engine("vllm")
    name = cpu.model.removeprefix("local:")
    source = Path(models.resolve(cpu.model).source)
    python = engine_envs.get(cpu.vllm_env).require().python
    home = tmp_path_factory.mktemp("servelab-home")
    (home / "models").mkdir()
    (home / "models" / name).symlink_to(source)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVELAB_HOME", str(home))
        folder = draft_models.truncated_copy(name, 2, python)
        again = draft_models.truncated_copy(name, 2, python)
        yield {"name": name, "source": source, "folder": folder, "again": again, "python": python, "home": home}


def test_the_copy_keeps_two_layers_in_its_config(cut):
    folder, source = cut["folder"], cut["source"]
    assert folder == cut["home"] / "models" / f"{cut['name']}-first2"
    config, original = (json.loads((d / "config.json").read_text()) for d in (folder, source))
    assert original["num_hidden_layers"] > 2 and config["num_hidden_layers"] == 2
    assert {k: v for k, v in config.items() if k != "num_hidden_layers"} == \
        {k: v for k, v in original.items() if k != "num_hidden_layers"}


def test_the_copy_holds_exactly_the_first_two_layers_with_the_same_bytes(cut):
    folder, source = cut["folder"], cut["source"]
    kept, _ = _header(folder / "model.safetensors")
    full, _ = _header(source / "model.safetensors")
    layer = re.compile(r"\.layers\.(\d+)\.")
    expected = {n for n in full if n != "__metadata__" and not ((m := layer.search(n)) and int(m.group(1)) >= 2)}
    assert set(kept) - {"__metadata__"} == expected
    assert {int(m.group(1)) for n in kept if (m := layer.search(n))} == {0, 1}
    assert "model.embed_tokens.weight" in kept and "model.norm.weight" in kept
    for name in ("model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight"):
        assert _tensor_bytes(folder / "model.safetensors", name) == _tensor_bytes(source / "model.safetensors", name)
    for tokenizer_file in ("tokenizer.json", "tokenizer_config.json"):
        assert (folder / tokenizer_file).read_bytes() == (source / tokenizer_file).read_bytes()


def test_parameter_counts_from_headers_and_from_config_agree_on_the_real_checkpoint(cut):
    for folder in (cut["source"], cut["folder"]):
        assert safetensors_parameters(folder) == llama_parameters(json.loads((folder / "config.json").read_text()))


def test_the_copy_is_reused_and_leaves_no_temporary_folder(cut):
    assert cut["again"] == cut["folder"]
    manifest = json.loads((cut["folder"] / models.MANIFEST).read_text())
    assert manifest["n_layers"] == 2 and manifest["report"]["layers_kept"] == 2
    assert not [p for p in (cut["home"] / "models").iterdir() if p.name.startswith(".")]


def test_transformers_loads_the_draft_and_decodes(cut):
    out = models.reference_completions(cut["python"], cut["folder"], ["Name a colour."], 4)
    assert len(out) == 1 and len(out[0]["token_ids"]) >= 1


def test_bad_layer_counts_are_one_clear_error(cut):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVELAB_HOME", str(cut["home"]))
        with pytest.raises(ValueError, match="n_layers must be an integer >= 1"):
            draft_models.truncated_copy(cut["name"], 0, cut["python"])
        layers = json.loads((cut["source"] / "config.json").read_text())["num_hidden_layers"]
        with pytest.raises(ValueError, match=f"at most .*'s {layers} layers, got {layers + 1}"):
            draft_models.truncated_copy(cut["name"], layers + 1, cut["python"])
