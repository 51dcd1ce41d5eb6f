"""Chapter 00's prediction of SGLang's cached tokens from the frontend programs' recorded requests."""

from __future__ import annotations

from typing import Any

import pytest

from servelab.measure.prefix_cache import frontend_cache as fc


def _req(group: int, prompt: list[int], output: list[int] = (), limit: int | None = None,
         reported: int = 0, finish: str = "stop") -> fc.Request:
    return fc.Request(group, list(prompt), list(output), len(prompt) - 1 if limit is None else limit, reported,
                      finish)


def test_a_repeated_prompt_finds_all_but_its_last_token_and_earlier_answers_count() -> None:
    first = _req(0, [1, 2, 3, 4], output=[5, 6, 7])
    again = _req(1, [1, 2, 3, 4])  # same prompt: at most 3 of its 4 tokens
    follow = _req(2, [1, 2, 3, 4, 5, 6, 9, 9])  # continues the first answer; its last token (7) was never stored
    table = fc.predict([first, again, follow], overlap=False)
    assert table["low"].tolist() == table["high"].tolist() == [0, 3, 6]
    follow_last = _req(2, [1, 2, 3, 4, 5, 6, 7, 9])  # with overlap scheduling the last answer token is kept too
    assert fc.predict([first, again, follow_last], overlap=True)["high"].tolist() == [0, 3, 7]
    assert fc.predict([first, again, follow_last], overlap=False)["high"].tolist() == [0, 3, 6]


def test_under_overlap_a_request_finished_by_length_never_fed_its_last_token() -> None:
    by_length = _req(0, [1, 2, 3, 4], output=[5, 6, 7], finish="length")  # max_new_tokens reached
    follow = _req(1, [1, 2, 3, 4, 5, 6, 7, 9])
    assert fc.predict([by_length, follow], overlap=True)["high"].tolist() == [0, 6]  # skipped its last decode step
    assert fc.fed(by_length, overlap=True) == [5, 6] and fc.fed(by_length, overlap=False) == [5, 6]
    by_eos = _req(0, [1, 2, 3, 4], output=[5, 6, 7], finish="stop")
    assert fc.fed(by_eos, overlap=True) == [5, 6, 7]
    assert fc.predict([by_eos, follow], overlap=True)["high"].tolist() == [0, 7]


def test_logprob_start_len_and_pages_limit_a_match() -> None:
    base = _req(0, list(range(10)), output=[])
    scored = _req(1, list(range(10)) + [42], limit=7)  # a select choice with logprob_start_len=7
    assert fc.predict([base, scored], overlap=False)["high"].tolist() == [0, 7]
    assert fc.predict([base, scored], page_size=4, overlap=False)["high"].tolist() == [0, 4]  # whole pages of 4 only
    with pytest.raises(ValueError, match="page_size must be >= 1"):
        fc.predict([base], page_size=0, overlap=False)


def test_requests_in_flight_together_give_a_range() -> None:
    trunk = _req(0, [1, 2, 3, 4, 5], output=[])  # the fork's commit of the shared prefix
    branch_a = _req(1, [1, 2, 3, 4, 5, 7, 8, 10])
    branch_b = _req(1, [1, 2, 3, 4, 5, 7, 8, 11])  # shares two more tokens with branch a, not with the trunk
    table = fc.predict([trunk, branch_a, branch_b], overlap=False)
    assert table["low"].tolist() == [0, 5, 5] and table["high"].tolist() == [0, 5, 7]


def test_a_replay_larger_than_the_cache_is_refused() -> None:
    with pytest.raises(ValueError, match="SGLang would evict"):
        fc.predict([_req(0, list(range(50)))], overlap=True, capacity=10)


def test_recorded_calls_become_requests_grouped_by_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fc, "token_ids", lambda server, text: [ord(c) for c in text])

    def call(sent: float, answered: float, body: dict[str, Any], answer: Any) -> dict[str, Any]:
        return {"sent_s": sent, "answered_s": answered, "body": body, "answer": answer}

    def meta(prompt: str, cached: int, out: list[int], finish: str = "stop") -> dict[str, Any]:
        return {"meta_info": {"prompt_tokens": len(prompt), "cached_tokens": cached,
                              "finish_reason": {"type": finish}}, "output_ids": out}

    recorded = [
        call(0.0, 1.0, {"text": "abc"}, meta("abc", 0, [1, 2], "length")),
        call(1.5, 3.0, {"text": "abd"}, meta("abd", 2, [3])),
        call(2.0, 2.5, {"text": "abe"}, meta("abe", 2, [])),  # sent while the one before was in flight
        call(4.0, 5.0, {"text": ["xy", "xz"], "return_logprob": True, "logprob_start_len": 0},
             [meta("xy", 0, []), meta("xz", 0, [])]),
    ]
    reqs = fc.to_requests(object(), recorded)
    assert [r.group for r in reqs] == [0, 1, 1, 2, 2]
    assert [r.limit for r in reqs] == [2, 2, 2, 0, 0] and reqs[0].output == [1, 2] and reqs[1].reported_cached == 2
    assert [r.finish for r in reqs] == ["length", "stop", "stop", "stop", "stop"]
    recorded[0]["answer"]["meta_info"]["prompt_tokens"] = 4
    with pytest.raises(ValueError, match="/tokenize made 3 tokens of a prompt SGLang counted as 4"):
        fc.to_requests(object(), recorded)


def _timed(prompt: list[int], sent: float, answered: float, output: list[int] = (), reported: int = 0,
           finish: str = "length") -> fc.Request:
    return fc.Request(0, list(prompt), list(output), len(prompt) - 1, reported, finish, sent, answered)


def test_timing_splits_answered_from_in_flight() -> None:
    reqs = [_timed([1], 0.0, 1.0), _timed([2], 1.5, 4.0), _timed([3], 2.0, 3.0), _timed([4], 3.5, 5.0)]
    assert fc.timing(reqs) == [([], []), ([0], [2, 3]), ([0], [1]), ([0, 2], [1])]


def test_a_sibling_sent_later_but_scheduled_first_counts_as_in_flight() -> None:
    earlier = _timed([1, 2, 3, 4, 5, 6, 7, 8, 9], 0.0, 2.0)   # sent first, answered last
    later = _timed([1, 2, 3, 4, 5, 6, 7, 8, 10], 0.1, 1.0)   # sent after it, scheduled and answered first
    assert fc.timing([earlier, later]) == [([], [1]), ([], [0])]
    table = fc.predict_timed([earlier, later], overlap=True)
    assert table["low"].tolist() == [0, 0] and table["high"].tolist() == [8, 8]  # either may give the other 8
    sequential = _timed([1, 2, 3, 4, 5, 6, 7, 8, 11], 2.5, 3.0)  # sent once both were answered: none flies
    assert fc.timing([earlier, later, sequential])[2] == ([0, 1], [])


def test_a_request_sent_after_its_branch_answered_finds_the_branch_output_though_another_flies() -> None:
    branch_a = _timed([1, 2, 3, 4], 0.0, 2.0, output=[5, 6, 7])
    branch_b = _timed([1, 2, 3, 9], 0.0, 4.0, output=[8, 8])
    commit_a = _timed([1, 2, 3, 4, 5, 6, 7, 0], 2.5, 3.0)  # continues branch a, sent while branch b still runs
    table = fc.predict_timed([branch_a, branch_b, commit_a], overlap=True)
    # branch a finished by length, so its last token was never fed; branch b may or may not be cached: its own
    # tokens share only the first three with the commit; the two branches, sent together, may give each other three
    assert table["low"].tolist() == [0, 0, 6] and table["high"].tolist() == [3, 3, 6]
    grouped = fc.predict([fc.Request(0, r.prompt, r.output, r.limit, 0, r.finish) for r in (branch_a, branch_b)]
                         + [fc.Request(0, commit_a.prompt, [], commit_a.limit, 0)], overlap=True)
    assert grouped["high"].tolist()[2] == 4  # the group model misses the branch's generated tokens
    assert fc.predict_timed([branch_a, branch_b, commit_a], page_size=4, overlap=True)["low"].tolist() == [0, 0, 4]
    with pytest.raises(ValueError, match="SGLang would evict"):
        fc.predict_timed([branch_a, commit_a], overlap=True, capacity=5)
