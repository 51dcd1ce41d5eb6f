"""Convert a GGUF checkpoint into a plain safetensors model folder.

Runs inside an engine venv (it needs torch, transformers, gguf and accelerate), so it
imports nothing from servelab. transformers dequantizes GGUF on load but refuses to
save a model that still carries its GGUF quantization config, so the dequantized
weights are copied into a fresh model built from the same config without it.

Usage: python convert_gguf.py GGUF_FILE OUT_DIR (prints one JSON line when done)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def convert(gguf_file: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)

    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings legitimately leave lm_head out of the state dict.
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit(f"weights do not match the config: missing={missing} unexpected={unexpected}")
    plain.tie_weights()

    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    plain.generation_config.save_pretrained(out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: convert_gguf.py GGUF_FILE OUT_DIR")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
    print(json.dumps({"converted": sys.argv[2]}))
