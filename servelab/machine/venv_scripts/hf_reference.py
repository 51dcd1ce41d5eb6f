"""Greedy reference completions from plain transformers, to check the engines against.

Runs inside an engine venv (needs torch and transformers) and imports nothing from servelab.
Reads a JSON list of chat prompts on stdin, writes a JSON list of
{"text": ..., "token_ids": [...]} on stdout, one per prompt, greedy, fp32.

Usage: python hf_reference.py MODEL_DIR MAX_TOKENS < prompts.json
"""

from __future__ import annotations

import json
import sys


def complete(model_dir: str, prompts: list[str], max_tokens: int) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    results = []
    for prompt in prompts:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt",
            return_dict=True,
        )
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False)
        new = out[0, ids["input_ids"].shape[1]:].tolist()
        if new and new[-1] in (tok.eos_token_id, model.generation_config.eos_token_id):
            new = new[:-1]
        results.append({"text": tok.decode(new, skip_special_tokens=True), "token_ids": new})
    return results


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: hf_reference.py MODEL_DIR MAX_TOKENS < prompts.json")
    json.dump(complete(sys.argv[1], json.load(sys.stdin), int(sys.argv[2])), sys.stdout)
