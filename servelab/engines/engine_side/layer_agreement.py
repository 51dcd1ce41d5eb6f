"""Would a draft made of a model's first L layers have proposed each token of a greedy answer? All L at once.

Runs inside an engine venv (torch and transformers) and imports nothing from servelab. A draft cut
to the first L decoder layers (servelab.machine.draft_models) computes exactly the target's hidden
state after layer L and then the target's own final norm and LM head. So one forward pass of the
full model over prompt + answer, with the output of every decoder layer kept, gives the greedy
choice of every such draft at every position: ``argmax(lm_head(norm(h_L)))``. The answer's own
tokens are the context (teacher forcing), which is what a greedy draft sees as long as its
proposals are accepted; at its first wrong token verification stops anyway.

stdin: {"sequences": [{"prompt": [ids], "answer": [ids]}, ...], "dtype": "float32" | "bfloat16" | "float16"}
(the model runs on the GPU when there is one, else on the CPU). A sequence may give
{"prompt": [ids], "generate": n} instead of an answer: the model's own greedy answer of n tokens is
used (and returned in "answers").
stdout: one JSON document {"layers": N, "target_agrees": [bool per sequence], "answers": [[ids] per
sequence], "matches": {"L": ["0101...", ...] per sequence}}: position j of a string says whether
depth L's choice after prompt + answer[:j] equals answer[j]. L = N is the model itself, so
"target_agrees" says whether its greedy choice reproduces every answer token (in float32 it
should; in 16-bit dtypes two implementations may round a near tie differently).

Usage: python layer_agreement.py MODEL_DIR < request.json
"""

from __future__ import annotations

import json
import os
import sys


def main(model_dir: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    request = json.load(sys.stdin)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, request.get("dtype", "float32")))
    model = model.to(device).eval()
    layers = model.model.layers
    captured: dict[int, torch.Tensor] = {}
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda _m, _args, out, i=i: captured.__setitem__(i + 1, out[0] if isinstance(
            out, tuple) else out))
    matches: dict[str, list[str]] = {str(depth): [] for depth in range(1, len(layers) + 1)}
    agrees, answers = [], []
    with torch.inference_mode():
        for seq in request["sequences"]:
            prompt = list(seq["prompt"])
            if "generate" in seq:
                out = model.generate(torch.tensor([prompt], device=device), max_new_tokens=int(seq["generate"]),
                                     min_new_tokens=int(seq["generate"]), do_sample=False)
                seq = {"answer": out[0, len(prompt):].tolist()}
            answer = list(seq["answer"])
            answers.append(answer)
            ids = torch.tensor([prompt + answer], device=device)
            captured.clear()
            model(ids, use_cache=False)
            truth = torch.tensor(answer, device=device)
            start = len(prompt) - 1  # the position whose output predicts answer[0]
            for depth in range(1, len(layers) + 1):
                hidden = captured[depth][0, start:start + len(answer)]
                chosen = model.lm_head(model.model.norm(hidden)).argmax(dim=-1)
                matches[str(depth)].append("".join("1" if m else "0" for m in (chosen == truth).tolist()))
            agrees.append(matches[str(len(layers))][-1] == "1" * len(answer))
    return {"layers": len(layers), "target_agrees": agrees, "matches": matches, "answers": answers}


if __name__ == "__main__":
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)  # whatever torch or transformers print goes to stderr
        out.write(json.dumps(main(sys.argv[1])))
