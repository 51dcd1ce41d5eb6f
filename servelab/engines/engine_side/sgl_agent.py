"""The source articles' SGLang frontend program, run against a live SGLang server.

Runs inside the SGLang venv (the frontend language needs the sglang package) and imports nothing
from servelab. Prints one JSON object with each generated variable and, under "requests", every
/generate request the frontend sent: its JSON body, the server's answer, and when it was sent and
answered (seconds on this process's clock), in the order sent.

Usage: python sgl_agent.py SERVER_URL
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time

import sglang as sgl
import sglang.lang.backend.runtime_endpoint as runtime_endpoint

REQUESTS: list[dict] = []
_ORDER = itertools.count()
_LOCK = threading.Lock()


def _recorded(http_request):
    """runtime_endpoint's http_request, recording every /generate call (the fork's branches run in threads)."""

    def call(url, json=None, **kwargs):
        with _LOCK:
            order, sent = next(_ORDER), time.perf_counter()
        response = http_request(url, json=json, **kwargs)
        if url.endswith("/generate") and json is not None:
            with _LOCK:
                REQUESTS.append({"order": order, "sent_s": sent, "answered_s": time.perf_counter(),
                                 "body": json, "answer": response.json()})
        return response

    return call


runtime_endpoint.http_request = _recorded(runtime_endpoint.http_request)

# --- programs (notebook 00 prints this part) ---


@sgl.function
def multi_turn_agent(s, system_prompt, user_query):
    # As in the source articles, with a shorter answer and greedy decoding so the output is stable.
    s += sgl.system(system_prompt)
    s += sgl.user(user_query)
    s += sgl.assistant(sgl.gen("response", max_tokens=48, temperature=0))


@sgl.function
def follow_ups(s, system_prompt, user_query, questions):
    """One conversation, then `fork`: each branch continues from the same prefix, which the radix
    cache holds once, so the branches only prefill their own new tokens."""
    s += sgl.system(system_prompt)
    s += sgl.user(user_query)
    s += sgl.assistant(sgl.gen("response", max_tokens=48, temperature=0))
    branches = s.fork(len(questions))
    for branch, question in zip(branches, questions, strict=True):
        branch += sgl.user(question)
        branch += sgl.assistant(sgl.gen("answer", max_tokens=32, temperature=0))
    s["answers"] = [branch["answer"] for branch in branches]


@sgl.function
def pick_one(s, question, choices):
    """`select`: the model scores each choice and the most likely one is taken."""
    s += sgl.user(question)
    s += sgl.assistant(sgl.select("choice", choices=choices))


# --- end of programs ---


def main(url: str) -> dict:
    sgl.set_default_backend(sgl.RuntimeEndpoint(url, chat_template_name="chatml"))
    system = "You are a concise assistant."
    agent = multi_turn_agent.run(system_prompt=system, user_query="What is the capital of France?")
    forked = follow_ups.run(system_prompt=system, user_query="What is the capital of France?",
                            questions=["Name one famous landmark there.", "What language is spoken there?"])
    picked = pick_one.run(question="Is Paris in France? Answer yes or no.", choices=["yes", "no"])
    return {"multi_turn_agent": agent["response"], "fork": forked["answers"], "select": picked["choice"],
            "requests": sorted(REQUESTS, key=lambda r: r["order"])}


if __name__ == "__main__":
    json.dump(main(sys.argv[1]), sys.stdout)
