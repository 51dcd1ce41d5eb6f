"""A small load client over the OpenAI-compatible API: one request, or many at a set concurrency.

Requests stream, so time to first token (TTFT) is measured where the reader feels it; usage
(prompt, completion and cached prompt tokens) comes from the final streamed chunk.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import pandas as pd
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletion
from tqdm import tqdm


class Endpoint(Protocol):
    api_url: str
    served_model: str


@dataclass
class Result:
    prompt: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    ttft_s: float
    latency_s: float
    start_s: float
    finish_reason: str | None

    @property
    def decode_tokens_per_s(self) -> float:
        decode = self.latency_s - self.ttft_s
        return (self.completion_tokens - 1) / decode if decode > 0 and self.completion_tokens > 1 else 0.0


def _messages(prompt: str | list[dict]) -> list[dict]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


def chat_response(server: Endpoint, prompt: str | list[dict], *, max_tokens: int = 64, temperature: float = 0.0,
                  **extra: Any) -> ChatCompletion:
    """One non-streaming chat completion, the whole response (choices, usage); greedy by default."""
    client = OpenAI(base_url=server.api_url, api_key="servelab", timeout=600, max_retries=0)
    return client.chat.completions.create(
        model=server.served_model, messages=_messages(prompt), max_tokens=max_tokens,
        temperature=temperature, **extra,
    )


def chat(server: Endpoint, prompt: str | list[dict], **kwargs: Any) -> str:
    """The text of one chat completion (see `chat_response`)."""
    return chat_response(server, prompt, **kwargs).choices[0].message.content or ""


async def _stream_one(client: AsyncOpenAI, model: str, prompt: str | list[dict], t0: float,
                      max_tokens: int, temperature: float, extra: dict[str, Any]) -> Result:
    start = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    usage, finish = None, None
    stream = await client.chat.completions.create(
        model=model, messages=_messages(prompt), max_tokens=max_tokens, temperature=temperature,
        stream=True, stream_options={"include_usage": True}, **extra,
    )
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.index != 0:  # with n > 1 the samples' chunks interleave; time and keep the first
                continue
            if choice.delta.content and first is None:
                first = time.perf_counter()
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    end = time.perf_counter()
    details = getattr(usage, "prompt_tokens_details", None)
    return Result(
        prompt=prompt if isinstance(prompt, str) else prompt[-1]["content"],
        text="".join(parts),
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        cached_tokens=(getattr(details, "cached_tokens", None) or 0) if details else 0,
        ttft_s=(first or end) - start,
        latency_s=end - start,
        start_s=start - t0,
        finish_reason=finish,
    )


async def _run(server: Endpoint, prompts: Sequence[str | list[dict]], concurrency: int, max_tokens: int,
               temperature: float, extra: dict[str, Any], progress: bool,
               per_request: Sequence[dict[str, Any]]) -> list[Result]:
    client = AsyncOpenAI(base_url=server.api_url, api_key="servelab", timeout=3600, max_retries=0)
    gate = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(prompts), desc=f"requests (concurrency {concurrency})", disable=not progress, mininterval=2)
    t0 = time.perf_counter()

    async def one(p: str | list[dict], own: dict[str, Any]) -> Result:
        async with gate:
            result = await _stream_one(client, server.served_model, p, t0, max_tokens, temperature, {**extra, **own})
        bar.update()
        return result

    try:
        return await asyncio.gather(*(one(p, own) for p, own in zip(prompts, per_request, strict=True)))
    finally:
        bar.close()
        await client.close()


def run_load(server: Endpoint, prompts: Sequence[str | list[dict]], *, concurrency: int = 1,
             max_tokens: int = 64, temperature: float = 0.0, progress: bool = True,
             per_request: Sequence[dict[str, Any]] | None = None, **extra: Any) -> pd.DataFrame:
    """Send every prompt, at most `concurrency` in flight; one row per request.

    Extra keyword arguments go to the API (e.g. `n=4`, `extra_body={"ignore_eos": True}`);
    `per_request`, one dict per prompt, adds (and overrides) keyword arguments for that prompt alone
    (e.g. a `cache_salt` of its own in `extra_body`). Works in a plain script and inside Jupyter's
    running event loop.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if per_request is not None and len(per_request) != len(prompts):
        raise ValueError(f"per_request needs one dict per prompt: {len(per_request)} for {len(prompts)} prompts")
    own = list(per_request) if per_request is not None else [{} for _ in prompts]
    coro = _run(server, prompts, concurrency, max_tokens, temperature, extra, progress, own)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        results = asyncio.run(coro)
    else:  # inside Jupyter: run the load on a private loop in a worker thread
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            results = pool.submit(asyncio.run, coro).result()
    frame = pd.DataFrame([asdict(r) | {"decode_tokens_per_s": r.decode_tokens_per_s} for r in results])
    return frame
