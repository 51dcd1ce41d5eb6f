"""What the source articles' `sgl.Runtime(...)` call with speculative decoding does today.

Runs inside the SGLang venv and imports nothing from servelab. The arguments are the articles'
own (STANDALONE speculative decoding, 5 draft tokens, tp_size=4, mem_fraction_static=0.88) except
the two model ids, which point at a local model folder: SGLang reads the model's config before it
checks the speculative arguments, and this check must not depend on a model hub. Prints one JSON
object: whether it started, and the exception's type, message and the source line that raised it.

Usage: python sgl_runtime_speculative.py MODEL_DIR
"""

from __future__ import annotations

import json
import sys

import sglang as sgl
from engine_report import where  # beside this script

ARTICLE_KWARGS = {
    "model_path": "meta-llama/Meta-Llama-3.1-70B-Instruct",  # replaced by MODEL_DIR
    "speculative_algorithm": "STANDALONE",
    "speculative_draft_model_path": "meta-llama/Meta-Llama-3.1-8B-Instruct",  # replaced by MODEL_DIR
    "speculative_num_draft_tokens": 5,
    "mem_fraction_static": 0.88,
    "tp_size": 4,
    "device": "cuda",  # the articles ran on GPUs; without this SGLang stops at "No accelerator"
}


def main(model_dir: str) -> dict:
    kwargs = {**ARTICLE_KWARGS, "model_path": model_dir, "speculative_draft_model_path": model_dir}
    try:
        runtime = sgl.Runtime(**kwargs)
    except BaseException as err:  # noqa: BLE001 - reporting exactly what the engine raised
        file, line, statement = where(err)
        return {"started": False, "error": type(err).__name__, "message": str(err), "where": f"{file}:{line}",
                "statement": statement, "kwargs": kwargs}
    runtime.shutdown()
    return {"started": True, "kwargs": kwargs}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
