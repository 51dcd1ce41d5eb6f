"""Chapter 04's workloads: chat requests whose prompts share prefixes in the shapes real programs produce.

Five seeded generators of OpenAI-style chat requests (``messages`` lists), each request knowing the
request it continues (``parent_id``) where there is one:

``multi_turn``  conversations where each turn re-sends the whole conversation so far plus a new user
                message: request k starts with request k-1's messages.
``few_shot``    one long system prompt with worked examples, shared by every request, then a question.
``agent_tree``  an agent's tree of calls, shaped like SGLang's frontend ``fork``
                (``sglang/lang/interpreter.py``, ``StreamExecutor.fork``: every branch copies the
                messages so far and continues them): one root conversation, several branches
                continuing it, then sub-branches continuing each branch.
``retrieval``   a pool of documents; each request quotes one to three of them, in retrieval order,
                then asks a question. Requests share a prefix only through the same leading document.
``no_sharing``  the control: every prompt is different from its first word on.

Text is word filler made from the seed (:func:`servelab.measure.workloads.filler`; about one token per
word), so lengths are in words. The defaults keep every prompt above 128 tokens (vLLM's CPU block
size) and below about 800 words, well under the cpu profile's 2048-token context with an answer.
Assistant turns inside a prompt are written in advance, not the model's own answers: what a later
turn can find cached is the earlier *prompt*, not the tokens the model generated for it.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.measure.workloads import filler

Message = dict[str, str]
# First words of the control's prompts: different first letters, so different first tokens.
_OPENERS = ("Alpha Bravo Charlie Delta Echo Foxtrot Golf Hotel India Juliett Kilo Lima Mike November Oscar Papa "
            "Quebec Romeo Sierra Tango Uniform Victor Whiskey Xray Yankee Zulu").split()


@dataclass(frozen=True)
class ChatRequest:
    """One chat request of a workload; ``parent_id`` names the request it continues, if any."""

    workload: str
    request_id: str
    messages: tuple[Message, ...]
    parent_id: str | None = None

    def to_json(self) -> str:
        return json.dumps({"workload": self.workload, "request_id": self.request_id,
                           "parent_id": self.parent_id, "messages": list(self.messages)})

    @staticmethod
    def from_json(line: str) -> ChatRequest:
        d = json.loads(line)
        return ChatRequest(d["workload"], d["request_id"], tuple(d["messages"]), d.get("parent_id"))


def _text(seed: int, tag: str, words: int) -> str:
    """Filler text determined by (seed, tag): equal tags give equal text, different tags different text."""
    digest = hashlib.sha256(f"{seed}:{tag}".encode()).digest()
    return filler(words, int.from_bytes(digest[:8], "big"))


def _msg(role: str, content: str) -> Message:
    return {"role": role, "content": content}


def multi_turn(seed: int = 0, conversations: int = 2, turns: int = 4, system_words: int = 80,
               user_words: int = 80, assistant_words: int = 60) -> list[ChatRequest]:
    """``conversations`` chats of ``turns`` requests each; request k re-sends request k-1 plus two messages."""
    out = []
    for c in range(conversations):
        # the seed first: two seeds' conversations share no more than the chat template's opening tokens
        messages = [_msg("system", f"Run {seed}, conversation {c}. " + _text(seed, f"mt-sys-{c}", system_words))]
        parent = None
        for t in range(turns):
            if t:
                messages.append(_msg("assistant", _text(seed, f"mt-a-{c}-{t}", assistant_words)))
            messages.append(_msg("user", _text(seed, f"mt-u-{c}-{t}", user_words)))
            rid = f"multi_turn-{c}-{t}"
            out.append(ChatRequest("multi_turn", rid, tuple(dict(m) for m in messages), parent))
            parent = rid
    return out


def few_shot(seed: int = 0, requests: int = 8, system_words: int = 300, examples: int = 4,
             example_words: int = 40, question_words: int = 30) -> list[ChatRequest]:
    """``requests`` questions after one long shared system prompt with ``examples`` worked examples."""
    shots = "\n\n".join(f"Example {i + 1}.\nQ: {_text(seed, f'fs-q-{i}', example_words)}\n"
                        f"A: {_text(seed, f'fs-a-{i}', example_words // 2)}" for i in range(examples))
    system = _text(seed, "fs-sys", system_words) + "\n\n" + shots
    return [ChatRequest("few_shot", f"few_shot-{r}",
                        (_msg("system", system), _msg("user", _text(seed, f"fs-user-{r}", question_words))))
            for r in range(requests)]


def agent_tree(seed: int = 0, branches: int = 3, sub_branches: int = 2, root_words: int = 200,
               step_words: int = 50) -> list[ChatRequest]:
    """An agent's fork tree: a root request, ``branches`` continuing it, ``sub_branches`` under each, parents first."""
    root_msgs = (_msg("system", _text(seed, "at-sys", root_words // 2)),
                 _msg("user", "Task. " + _text(seed, "at-task", root_words // 2)))
    out = [ChatRequest("agent_tree", "agent_tree-root", root_msgs)]
    for b in range(branches):
        branch_msgs = root_msgs + (_msg("assistant", _text(seed, "at-plan", step_words)),
                                   _msg("user", f"Branch {b}. " + _text(seed, f"at-b-{b}", step_words)))
        out.append(ChatRequest("agent_tree", f"agent_tree-{b}", branch_msgs, "agent_tree-root"))
        for s in range(sub_branches):
            sub_msgs = branch_msgs + (_msg("assistant", _text(seed, f"at-ba-{b}", step_words)),
                                      _msg("user", f"Step {s}. " + _text(seed, f"at-s-{b}-{s}", step_words)))
            out.append(ChatRequest("agent_tree", f"agent_tree-{b}-{s}", sub_msgs, f"agent_tree-{b}"))
    return out


def agent_fork_texts(seed: int = 0, branches: int = 2, sub_branches: int = 2, root_words: int = 200,
                     step_words: int = 50) -> dict[str, object]:
    """The texts of chapter 04's agent tree run with SGLang's frontend ``fork`` (``sgl_agent_tree.py``): a system
    prompt and a task (``root_words`` together), one prompt per branch and ``sub_branches`` per branch, each
    starting with its marker ("Branch 1.", "Sub-branch 1.0."), so that a request's text names its place. Both
    counts must be at least 2: SGLang's ``fork`` commits the text so far only when ``size > 1``
    (``StreamExecutor.fork`` in ``sglang/lang/interpreter.py``)."""
    if branches < 2 or sub_branches < 2:
        raise ValueError(f"branches and sub_branches must be >= 2 (a fork of one commits nothing), "
                         f"got {branches} and {sub_branches}")
    return {"system": _text(seed, "af-sys", root_words // 2),
            "task": "Task. " + _text(seed, "af-task", root_words // 2),
            "branches": [f"Branch {b}. " + _text(seed, f"af-b-{b}", step_words) for b in range(branches)],
            "sub_branches": [[f"Sub-branch {b}.{s}. " + _text(seed, f"af-s-{b}-{s}", step_words)
                              for s in range(sub_branches)] for b in range(branches)]}


def retrieval(seed: int = 0, requests: int = 10, documents: int = 6, doc_words: int = 150,
              question_words: int = 20, system_words: int = 30) -> list[ChatRequest]:
    """Each request quotes 1-3 documents of a shared pool, in retrieval order, then asks a question."""
    if documents < 3:
        raise ValueError(f"documents must be >= 3 (a request quotes up to 3), got {documents}")
    rng = random.Random(seed)
    docs = [f"Document {d}:\n{_text(seed, f'rag-doc-{d}', doc_words)}" for d in range(documents)]
    system = _msg("system", "Answer from the documents. " + _text(seed, "rag-sys", system_words))
    out = []
    for r in range(requests):
        chosen = rng.sample(range(documents), rng.randint(1, 3))
        quoted = "\n\n".join(docs[d] for d in chosen)
        question = _text(seed, f"rag-q-{r}", question_words)
        user = _msg("user", f"{quoted}\n\nQuestion: {question}")
        out.append(ChatRequest("retrieval", f"retrieval-{r}", (system, user)))
    return out


def no_sharing(seed: int = 0, requests: int = 8, words: int = 200) -> list[ChatRequest]:
    """The control: one user message per request, each starting with a different letter; no system prompt.

    Whatever the chat template puts before the first user message (a default system prompt, role
    markers) is still shared: that is the most any cache can find here.
    """
    if requests > len(_OPENERS):
        raise ValueError(f"requests must be <= {len(_OPENERS)} (one distinct first letter each), got {requests}")
    firsts = random.Random(seed).sample(_OPENERS, requests)
    return [ChatRequest("no_sharing", f"no_sharing-{r}",
                        (_msg("user", f"{first} {_text(seed, f'ctl-{r}', words)}"),))
            for r, first in enumerate(firsts)]


GENERATORS: dict[str, Callable[..., list[ChatRequest]]] = {
    "multi_turn": multi_turn, "few_shot": few_shot, "agent_tree": agent_tree, "retrieval": retrieval,
    "no_sharing": no_sharing,
}


def make(name: str, seed: int = 0, **options: int) -> list[ChatRequest]:
    """The workload ``name`` for ``seed``; ``options`` go to its generator."""
    if name not in GENERATORS:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(GENERATORS)}")
    return GENERATORS[name](seed, **options)


def save_jsonl(requests: Iterable[ChatRequest], path: Path | str) -> Path:
    """One request per line: workload, request_id, parent_id, messages."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.to_json() + "\n" for r in requests))
    return path


def load_jsonl(path: Path | str) -> list[ChatRequest]:
    return [ChatRequest.from_json(line) for line in Path(path).read_text().splitlines() if line.strip()]


def token_sequences(requests: Sequence[ChatRequest],
                    tokenize: Callable[[Sequence[Message]], Sequence[int]]) -> list[list[int]]:
    """Each request's prompt as token ids, through ``tokenize(messages)`` (e.g. an engine's chat template)."""
    return [list(tokenize(r.messages)) for r in requests]


def word_count(request: ChatRequest) -> int:
    """Words in all of a request's messages: about its prompt tokens, without the chat template."""
    return sum(len(m["content"].split()) for m in request.messages)
