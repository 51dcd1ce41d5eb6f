"""What the source articles' `sgl.Runtime(...)` call with speculative decoding does today.

Runs inside the SGLang venv and imports nothing from servelab. The arguments are the articles'
own (STANDALONE speculative decoding, 5 draft tokens, tp_size=4, mem_fraction_static=0.88) except
the two model ids, which point at a local model folder: SGLang reads the model's config before it
checks the speculative arguments, and this check must not depend on a model hub. Prints one JSON
object: whether it started, and the exception's type, message and the source line that raised it.

Usage: python sgl_runtime_speculative.py MODEL_DIR
"""

from __future__ import annotations

import ast
import json
import linecache
import sys
import traceback

import sglang as sgl

ARTICLE_KWARGS = {
    "model_path": "meta-llama/Meta-Llama-3.1-70B-Instruct",  # replaced by MODEL_DIR
    "speculative_algorithm": "STANDALONE",
    "speculative_draft_model_path": "meta-llama/Meta-Llama-3.1-8B-Instruct",  # replaced by MODEL_DIR
    "speculative_num_draft_tokens": 5,
    "mem_fraction_static": 0.88,
    "tp_size": 4,
    "device": "cuda",  # the articles ran on GPUs; without this SGLang stops at "No accelerator"
}


def statement_at(filename: str, lineno: int) -> str:
    """The whole source statement around `lineno` (an assert can span several lines)."""
    source = "".join(linecache.getlines(filename))
    best = None
    for node in ast.walk(ast.parse(source)):
        inside = isinstance(node, ast.stmt) and node.lineno <= lineno <= (node.end_lineno or node.lineno)
        if inside and (best is None or node.lineno >= best.lineno):
            best = node
    segment = ast.get_source_segment(source, best) if best else linecache.getline(filename, lineno)
    return " ".join(segment.split())


def main(model_dir: str) -> dict:
    kwargs = {**ARTICLE_KWARGS, "model_path": model_dir, "speculative_draft_model_path": model_dir}
    try:
        runtime = sgl.Runtime(**kwargs)
    except BaseException as err:  # noqa: BLE001 - reporting exactly what the engine raised
        frame = traceback.extract_tb(err.__traceback__)[-1]
        return {"started": False, "error": type(err).__name__, "message": str(err),
                "where": f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}",
                "statement": statement_at(frame.filename, frame.lineno), "kwargs": kwargs}
    runtime.shutdown()
    return {"started": True, "kwargs": kwargs}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
