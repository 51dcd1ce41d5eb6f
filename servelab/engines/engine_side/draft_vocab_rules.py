"""An engine's own draft/target vocabulary check, run on stand-in objects: no model is loaded.

Runs inside the vLLM or the SGLang venv and imports nothing from servelab. Both checks read only a
few attributes of the objects they are methods of, so each is called unbound, with a stand-in
``self`` that carries those attributes:

- vLLM: ``SpeculativeConfig.verify_equal_vocab_size_if_draft_model`` (``vllm/config/speculative.py``)
  reads ``self.method`` and ``get_vocab_size()`` of the target's and the draft's model configs.
- SGLang: ``StandaloneWorkerV2._validate_vocab_compatibility``
  (``sglang/srt/speculative/standalone_worker_v2.py``) reads the draft runner's
  ``model_config.vocab_size`` and both tokenizers' ``get_vocab()``. The real token-to-id maps are
  not read here: a stand-in tokenizer's map is one entry naming its tokenizer family, so two models
  of one family compare equal and two of different families do not; a family that is not known
  ("") gives no tokenizer, which the check skips.

stdin: {"engine": "vllm" | "sglang", "cases": [{"method", "target_vocab", "draft_vocab",
"target_tokenizer", "draft_tokenizer"}, ...]}
stdout: one JSON document {"version": ..., "errors": ["" or the ValueError's message, one per case]}.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace


class _Tokenizer:
    def __init__(self, family: str) -> None:
        self.family = family

    def get_vocab(self) -> dict[str, int]:
        return {f"<tokenizer family {self.family}>": 0}


def _tokenizer(family: str) -> _Tokenizer | None:
    return _Tokenizer(family) if family else None


def _vllm(cases: list[dict]) -> tuple[str, list[str]]:
    import vllm
    from vllm.config.speculative import SpeculativeConfig

    errors = []
    for case in cases:
        stand_in = SimpleNamespace(
            method=case["method"],
            target_model_config=SimpleNamespace(get_vocab_size=lambda c=case: c["target_vocab"]),
            draft_model_config=SimpleNamespace(get_vocab_size=lambda c=case: c["draft_vocab"]))
        try:
            SpeculativeConfig.verify_equal_vocab_size_if_draft_model(stand_in)
            errors.append("")
        except ValueError as err:
            errors.append(str(err))
    return vllm.__version__, errors


def _sglang(cases: list[dict]) -> tuple[str, list[str]]:
    import sglang
    from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2

    errors = []
    for case in cases:
        runner = SimpleNamespace(model_config=SimpleNamespace(vocab_size=case["draft_vocab"]))
        worker = SimpleNamespace(tokenizer=_tokenizer(case["draft_tokenizer"]))
        draft = SimpleNamespace(draft_runner=runner, draft_worker=worker)
        try:
            StandaloneWorkerV2._validate_vocab_compatibility(
                SimpleNamespace(_draft_worker=draft), target_vocab_size=case["target_vocab"],
                target_tokenizer=_tokenizer(case["target_tokenizer"]))
            errors.append("")
        except ValueError as err:
            errors.append(str(err))
    return sglang.__version__, errors


def main() -> dict:
    request = json.loads(sys.stdin.read())
    version, errors = {"vllm": _vllm, "sglang": _sglang}[request["engine"]](request["cases"])
    return {"version": version, "errors": errors}


if __name__ == "__main__":
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)  # whatever the engine prints goes to stderr
        report = main()
        out.write(json.dumps(report))
    sys.exit(0)
