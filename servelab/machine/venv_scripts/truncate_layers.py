"""Write a copy of a model folder that keeps only its first N decoder layers: a shallow draft.

Runs inside an engine venv (it needs safetensors and torch) and imports nothing from servelab.
The copy keeps the embeddings, the final norm and the LM head, drops every tensor of layers N and
above (names containing ``layers.<i>.``), sets ``num_hidden_layers = N`` in config.json (and cuts a
per-layer ``layer_types`` list to N), and copies every other file (tokenizer, chat template,
generation config). Tensors keep their dtype and values; the safetensors metadata is kept.

Usage: python truncate_layers.py SRC_DIR OUT_DIR N   (OUT_DIR must not exist; prints one JSON line)
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
SKIP = {"config.json", "model.safetensors.index.json", "servelab-model.json"}


def truncate(src: Path, out: Path, n_layers: int) -> dict:
    from safetensors import safe_open
    from safetensors.torch import save_file

    config = json.loads((src / "config.json").read_text())
    total = config["num_hidden_layers"]
    if not 1 <= n_layers <= total:
        raise SystemExit(f"N must be between 1 and the model's {total} layers, got {n_layers}")
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"no .safetensors file in {src}")
    out.mkdir(parents=True)
    kept, dropped, layers_seen, weight_map = 0, 0, set(), {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata()
            tensors, names = {}, list(f.keys())  # a safe_open handle, not a dict
            for name in names:
                match = LAYER.search(name)
                if match:
                    layers_seen.add(int(match.group(1)))
                if match and int(match.group(1)) >= n_layers:
                    dropped += 1
                    continue
                tensors[name] = f.get_tensor(name)
        if tensors:
            save_file(tensors, str(out / path.name), metadata=metadata)
            weight_map.update(dict.fromkeys(tensors, path.name))
            kept += len(tensors)
    if layers_seen != set(range(total)):
        raise SystemExit(f"expected tensors of layers 0..{total - 1} named '...layers.<i>...', "
                         f"found layers {sorted(layers_seen)}")
    config["num_hidden_layers"] = n_layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:n_layers]
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if (src / "model.safetensors.index.json").is_file():
        index = json.loads((src / "model.safetensors.index.json").read_text())
        index["weight_map"] = weight_map
        index.get("metadata", {}).pop("total_size", None)
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    for path in src.iterdir():
        if path.is_file() and path.suffix != ".safetensors" and path.name not in SKIP:
            shutil.copy2(path, out / path.name)
    return {"layers_kept": n_layers, "layers_dropped": total - n_layers, "tensors_kept": kept,
            "tensors_dropped": dropped}


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: truncate_layers.py SRC_DIR OUT_DIR N")
    print(json.dumps(truncate(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))))
