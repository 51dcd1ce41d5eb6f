"""Sending one token-id prompt that decodes a forced number of tokens, greedily, and getting back the engine's own
output token ids (which a replay needs: the KV of the outputs is cached too).

* vLLM 0.32, ``/v1/completions``: ``ignore_eos`` and ``min_tokens`` = ``max_tokens`` force the length,
  ``return_token_ids`` adds each choice's ``token_ids`` (``CompletionRequest`` in
  ``vllm/entrypoints/openai/completion/protocol.py``); ``usage.prompt_tokens_details.cached_tokens`` is the hit.
* SGLang 0.5.23, ``/generate`` with ``input_ids``: ``ignore_eos`` and ``min_new_tokens`` = ``max_new_tokens``
  (``SamplingParams`` in ``sglang/srt/sampling/sampling_params.py``); the reply carries ``output_ids``
  (``tokenizer_manager.py``) and ``meta_info.cached_tokens`` (with ``--enable-cache-report``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from servelab.engines.server import Server

TIMEOUT_S = 600.0


def generate(server: Server, prompt: Sequence[int], max_tokens: int) -> dict[str, Any]:
    """Send ``prompt`` (token ids) and decode exactly ``max_tokens`` tokens greedily; ``output`` (the token ids the
    engine generated) and ``cached_tokens`` (None where the engine does not report it)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    prompt = [int(t) for t in prompt]
    if server.engine == "vllm":
        reply = httpx.post(f"{server.api_url}/completions", timeout=TIMEOUT_S, json={
            "model": server.served_model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0.0, "return_token_ids": True})
        reply.raise_for_status()
        body = reply.json()
        output = body["choices"][0]["token_ids"]
        details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") or 0
    else:
        reply = httpx.post(f"{server.url}/generate", timeout=TIMEOUT_S, json={
            "input_ids": prompt, "sampling_params": {"max_new_tokens": max_tokens, "min_new_tokens": max_tokens,
                                                     "ignore_eos": True, "temperature": 0.0}})
        reply.raise_for_status()
        body = reply.json()
        output = body["output_ids"]
        reports = "--enable-cache-report" in server.spec.argv
        cached = body.get("meta_info", {}).get("cached_tokens") if reports else None
    if output is None or len(output) != max_tokens:
        raise RuntimeError(f"{server.engine} generated {None if output is None else len(output)} tokens, "
                           f"not the {max_tokens} forced")
    return {"output": [int(t) for t in output], "cached_tokens": None if cached is None else int(cached)}
