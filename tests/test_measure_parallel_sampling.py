"""Prompts of an exact token count, found through the server's tokenizer (faked here)."""

from __future__ import annotations

import pytest

from servelab.measure.paging import parallel_sampling as ps


class _Tokenizer:
    """Counts like a chat template of 30 tokens plus one token per word, two for words of 7+ letters."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, server: object, prompt: str) -> int:
        self.calls += 1
        return 30 + sum(2 if len(w) >= 7 else 1 for w in prompt.split())


@pytest.mark.parametrize("tokens", [40, 300, 993])
def test_prompt_with_tokens_hits_the_count_exactly(monkeypatch: pytest.MonkeyPatch, tokens: int) -> None:
    fake = _Tokenizer()
    monkeypatch.setattr(ps, "count_tokens", fake)
    prompt = ps.prompt_with_tokens(object(), tokens, seed=3)
    assert fake(None, prompt) == tokens
    assert fake.calls < 80


def test_an_unreachable_count_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ps, "count_tokens", lambda server, prompt: 2 * len(prompt.split()) + 30)  # always even
    with pytest.raises(ValueError, match="no prompt of exactly 41 tokens"):
        ps.prompt_with_tokens(object(), 41)


def test_a_peak_the_gauge_missed_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request of 609 tokens holds blocks while it runs: a sampled peak of 0 is the gauge not published, and
    the measurement is repeated with a fresh prompt; three misses are an error, not a row of zeros."""
    import pandas as pd

    peaks = iter([0.0, 0.5])

    class Sampler:
        def __init__(self, *args, **kwargs) -> None:
            self.peak = next(peaks)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            return None

        def frame(self) -> pd.DataFrame:
            return pd.DataFrame({"vllm:kv_cache_usage_perc": [0.0, self.peak]})

    class Usage:
        prompt_tokens, prompt_tokens_details = 609, None

    class Response:
        usage = Usage()

    prompts = []
    monkeypatch.setattr(ps, "Sampler", Sampler)
    monkeypatch.setattr(ps, "prompt_with_tokens", lambda server, tokens, seed: prompts.append(seed) or "p")
    monkeypatch.setattr(ps, "chat_response", lambda *a, **k: Response())
    class Server:
        url = "http://127.0.0.1:1"

    frame = ps.measure_parallel_sampling(Server(), [1], num_blocks=11, block_size=128, prompt_tokens=609,
                                         output_tokens=8)
    assert frame["measured blocks"].tolist() == [5] and len(set(prompts)) == 2
    peaks = iter([0.0, 0.0, 0.0])
    with pytest.raises(RuntimeError, match="stayed 0 while 1 samples ran, three times"):
        ps.measure_parallel_sampling(Server(), [1], num_blocks=11, block_size=128, prompt_tokens=609,
                                     output_tokens=8)
