"""Chapter 04's workloads: deterministic, the sharing structure each one promises, sizes that fit.

Token-level checks use a stand-in chat template (ChatML, like SmolLM2's, with a default system
prompt when a request has none) and a word-level tokenizer; the engines' own tokenizers come later.
"""

from __future__ import annotations

import pytest

from servelab.measure.prefix_cache import workloads as pw

DEFAULT_SYSTEM = "You are a helpful assistant."


class WordTokenizer:
    """ChatML rendering, then one id per distinct whitespace-separated word."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def render(self, messages) -> str:
        if messages[0]["role"] != "system":
            messages = [{"role": "system", "content": DEFAULT_SYSTEM}, *messages]
        body = "".join(f"<|im_start|> {m['role']} \n {m['content']} <|im_end|> \n " for m in messages)
        return body + "<|im_start|> assistant \n"

    def __call__(self, messages) -> list[int]:
        return [self.ids.setdefault(w, len(self.ids)) for w in self.render(list(messages)).split()]

    def header_len(self) -> int:
        """Tokens every request without a system message starts with: default system prompt, user marker."""
        # An empty user message renders as header + "<|im_end|>" + the generation prompt (2 words).
        return len(self([{"role": "user", "content": ""}])) - 3


def _lcp(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("name", list(pw.GENERATORS))
def test_deterministic_for_a_seed_and_different_for_another(name):
    assert pw.make(name, 7) == pw.make(name, 7)
    assert pw.make(name, 7) != pw.make(name, 8)


@pytest.mark.parametrize("name", list(pw.GENERATORS))
def test_prompts_exceed_a_cpu_block_and_fit_the_cpu_context(name):
    tok = WordTokenizer()
    for seed in range(3):
        requests = pw.make(name, seed)
        assert requests and {r.workload for r in requests} == {name}
        assert len({r.request_id for r in requests}) == len(requests)
        # > 128 tokens (vLLM's CPU block), < 2048 with room for an answer; words are about tokens.
        assert all(pw.word_count(r) > 128 and len(tok(r.messages)) < 1024 for r in requests)


def test_multi_turn_resends_the_conversation():
    requests = pw.multi_turn(0, conversations=2, turns=4)
    by_id = {r.request_id: r for r in requests}
    tok = WordTokenizer()
    children = [r for r in requests if r.parent_id]
    assert len(children) == 2 * 3
    for r in children:
        parent = by_id[r.parent_id]
        assert r.messages[:len(parent.messages)] == parent.messages and len(r.messages) == len(parent.messages) + 2
        assert [m["role"] for m in r.messages[-2:]] == ["assistant", "user"]
        p_ids, ids = tok(parent.messages), tok(r.messages)
        assert _lcp(p_ids, ids) == len(p_ids)  # the parent's whole prompt, generation prompt included
    first = [r for r in requests if not r.parent_id]
    assert _lcp(tok(first[0].messages), tok(first[1].messages)) <= tok.header_len() + 3


def test_few_shot_shares_one_long_system_prompt():
    requests = pw.few_shot(0, requests=6, system_words=300, examples=4)
    assert len({r.messages[0]["content"] for r in requests}) == 1
    assert len({r.messages[1]["content"] for r in requests}) == 6
    tok = WordTokenizer()
    system_tokens = len(tok(requests[0].messages[:1])) - 1  # minus the generation prompt's marker
    ids = [tok(r.messages) for r in requests]
    assert all(_lcp(ids[0], x) >= system_tokens > 300 for x in ids[1:])
    assert requests[0].messages[0]["content"].count("Example ") == 4


def test_agent_tree_has_the_shape_of_fork():
    requests = pw.agent_tree(0, branches=3, sub_branches=2)
    by_id = {r.request_id: r for r in requests}
    assert len(requests) == 1 + 3 + 3 * 2
    roots = [r for r in requests if r.parent_id is None]
    assert len(roots) == 1
    kids = {rid: [r for r in requests if r.parent_id == rid] for rid in by_id}
    assert len(kids[roots[0].request_id]) == 3 and all(len(kids[b.request_id]) == 2 for b in kids[roots[0].request_id])
    order = [r.request_id for r in requests]
    for r in requests[1:]:
        parent = by_id[r.parent_id]
        assert order.index(parent.request_id) < order.index(r.request_id)  # a parent is sent before its branches
        assert r.messages[:len(parent.messages)] == parent.messages
    siblings = kids[roots[0].request_id]
    tok = WordTokenizer()
    shared = _lcp(tok(siblings[0].messages), tok(siblings[1].messages))
    assert shared > len(tok(roots[0].messages)) - 1  # branches share the root and the plan, then part


def test_retrieval_quotes_one_to_three_shared_documents():
    requests = pw.retrieval(0, requests=30, documents=6)
    tok = WordTokenizer()
    docs_of = []
    for r in requests:
        user = r.messages[1]["content"]
        quoted = [int(part.split(":")[0]) for part in user.split("Document ")[1:]]
        assert 1 <= len(quoted) <= 3 and len(set(quoted)) == len(quoted) and all(0 <= d < 6 for d in quoted)
        assert "Question:" in user.split("\n\n")[-1]
        docs_of.append(quoted)
    assert len({r.messages[0]["content"] for r in requests}) == 1
    same_first = [(a, b) for a in range(30) for b in range(a) if docs_of[a][0] == docs_of[b][0]]
    other_first = [(a, b) for a in range(30) for b in range(a) if docs_of[a][0] != docs_of[b][0]]
    assert same_first and other_first
    lcp = {(a, b): _lcp(tok(requests[a].messages), tok(requests[b].messages)) for a, b in same_first + other_first}
    assert min(lcp[p] for p in same_first) > 150 > max(lcp[p] for p in other_first)  # a document is 150 words


def test_the_control_shares_nothing_beyond_the_chat_template_header():
    requests = pw.no_sharing(0, requests=20)
    tok = WordTokenizer()
    ids = [tok(r.messages) for r in requests]
    header = tok.header_len()
    assert max(_lcp(a, b) for i, a in enumerate(ids) for b in ids[:i]) == header
    assert all(len(r.messages) == 1 and r.parent_id is None for r in requests)


def test_jsonl_round_trip(tmp_path):
    requests = [r for name in pw.GENERATORS for r in pw.make(name, 3)]
    path = pw.save_jsonl(requests, tmp_path / "sub" / "workloads.jsonl")
    assert len(path.read_text().splitlines()) == len(requests)
    assert pw.load_jsonl(path) == requests
    assert any(r.parent_id for r in pw.load_jsonl(path))


def test_token_sequences_use_the_given_tokenizer():
    requests = pw.multi_turn(0, conversations=1, turns=2)
    tok = WordTokenizer()
    seqs = pw.token_sequences(requests, tok)
    assert seqs == [tok(r.messages) for r in requests] and seqs[1][:len(seqs[0])] == seqs[0]


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown workload 'chat'; known: multi_turn"):
        pw.make("chat")
    with pytest.raises(ValueError, match="documents must be >= 3"):
        pw.retrieval(0, documents=2)
    with pytest.raises(ValueError, match="requests must be <= 26"):
        pw.no_sharing(0, requests=27)


def test_agent_fork_texts_carry_their_markers_and_depend_on_the_seed():
    texts = pw.agent_fork_texts(0, branches=3, sub_branches=2)
    assert [t.split(". ")[0] for t in texts["branches"]] == ["Branch 0", "Branch 1", "Branch 2"]
    assert [[t.split(". ")[0] for t in subs] for subs in texts["sub_branches"]][2] == ["Sub-branch 2.0",
                                                                                      "Sub-branch 2.1"]
    assert texts["task"].startswith("Task. ") and texts != pw.agent_fork_texts(1, branches=3, sub_branches=2)
    with pytest.raises(ValueError, match="branches and sub_branches must be >= 2"):
        pw.agent_fork_texts(0, branches=0)
    with pytest.raises(ValueError, match=r"must be >= 2 \(a fork of one commits nothing\), got 2 and 1"):
        pw.agent_fork_texts(0, branches=2, sub_branches=1)
