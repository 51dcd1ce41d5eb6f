"""vLLM's speculative-decoding defaults, read from its own SpeculativeConfig (chapter 06).

Runs inside the vLLM venv and imports nothing from servelab. Prints one JSON object: the field
defaults of `vllm.config.speculative.SpeculativeConfig` that decide what speculation does
(`draft_sample_method`, `rejection_sample_method`, `num_speculative_tokens_per_batch_size`,
`use_heterogeneous_vocab`, `prompt_lookup_min` / `_max`), and what its own validation resolves for
`method="ngram"` given only `num_speculative_tokens` (the prompt-lookup lengths it fills in).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

FIELDS = ("draft_sample_method", "rejection_sample_method", "num_speculative_tokens_per_batch_size",
          "use_heterogeneous_vocab", "prompt_lookup_min", "prompt_lookup_max")


def main() -> dict:
    import vllm
    from vllm.config.speculative import SpeculativeConfig

    defaults = {f.name: getattr(f.default, "default", f.default)  # a pydantic Field(...) holds its default inside
                for f in dataclasses.fields(SpeculativeConfig) if f.name in FIELDS}
    ngram = SpeculativeConfig(method="ngram", num_speculative_tokens=4)
    resolved = {name: getattr(ngram, name) for name in FIELDS}
    return {"version": vllm.__version__, "field defaults": defaults, "ngram, k = 4, nothing else given": resolved}


if __name__ == "__main__":
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)  # whatever vLLM prints goes to stderr
        report = main()
        out.write(json.dumps(report, default=str))
    sys.exit(0)
