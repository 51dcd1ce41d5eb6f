"""Prompts of an exact token count, found through the server's tokenizer (faked here)."""

from __future__ import annotations

import pytest

from servelab.measure import parallel_sampling as ps


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
