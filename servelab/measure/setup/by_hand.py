"""What chapter 00 shows once before its helpers hide it: the command that started a server, and one chat request
sent as plain HTTP, JSON in and JSON out, as a learner would send it to their own server."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from servelab.machine.paths import REPO, cache_home


class Started(Protocol):
    url: str
    served_model: str
    spec: Any  # servelab.engines.launch.LaunchSpec: argv and env


def comparable_argv(argv: Sequence[str]) -> list[str]:
    """A launch command as runs on two machines can compare it: without the binary's path, the port as PORT and
    this machine's servelab home as $SERVELAB_HOME."""
    home = str(cache_home())
    out = [a.replace(home, "$SERVELAB_HOME") for a in argv[1:]]
    if "--port" in out:
        out[out.index("--port") + 1] = "PORT"
    return out


HOME_WORD = "${SERVELAB_HOME:-$HOME/.cache/servelab}"  # servelab's home as a shell expands it, set or not
PORT = "8000"  # a port a reader can type; servelab itself picks a free one


def command_line(server: Started) -> str:
    """The shell command that started `server`, as a reader can type it from the repository's root with the venv's
    `bin` on PATH: the environment the engine needs (SGLang's CPU engine and its stand-in), the engine's own CLI
    (`vllm serve ...`, `sglang serve ...`), servelab's home spelled so the shell finds it, and port 8000."""
    program = server.spec.argv[0].rsplit("/", 1)[-1]
    words = comparable_argv(server.spec.argv)
    if "--port" in words:
        words[words.index("--port") + 1] = PORT
    env = [f"{k}={_readable(v)}" for k, v in sorted(server.spec.env.items())]
    return " ".join([*env, program, *(_readable(w) for w in words)])


def _readable(word: str) -> str:
    """One shell word: servelab's home as HOME_WORD (left for the shell to expand), a path inside the repository
    relative to its root, anything else quoted."""
    word = word.replace(str(cache_home()), "$SERVELAB_HOME").replace(str(REPO) + "/", "")
    if word.startswith("$SERVELAB_HOME"):
        return '"' + HOME_WORD + word.removeprefix("$SERVELAB_HOME") + '"'
    return shlex.quote(word) if word else "''"


def chat_request(server: Started, question: str, max_tokens: int = 16) -> dict[str, Any]:
    """The JSON body of an OpenAI-compatible chat completion: greedy, at most `max_tokens` tokens."""
    if not question.strip():
        raise ValueError("the question is empty; give the words to send")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a whole number >= 1, got {max_tokens!r}")
    return {"model": server.served_model, "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0}


def send(server: Started, body: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    """POST `body` to the server's /v1/chat/completions and return the JSON answer (an HTTP error raises,
    naming the status and the start of the engine's reply)."""
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=timeout)
    if reply.status_code != 200:
        raise RuntimeError(f"{server.url}/v1/chat/completions answered {reply.status_code}: {reply.text[:200]}")
    return reply.json()
