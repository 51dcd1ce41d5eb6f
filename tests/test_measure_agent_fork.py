"""Chapter 04's agent tree through SGLang's fork: labels, the prefix each branch must find, vLLM's ranges."""

from __future__ import annotations

import pytest

from servelab.measure.prefix_cache import agent_fork as af
from servelab.measure.prefix_cache.workloads import agent_fork_texts


def test_labels_name_the_place_in_the_tree_from_the_markers() -> None:
    texts = agent_fork_texts(0, branches=2, sub_branches=2)
    root = texts["system"] + texts["task"]
    branch = root + " plan " + texts["branches"][1]
    sub = branch + " step " + texts["sub_branches"][1][0]
    assert af.label(root, False, 2, 2) == "root: generate"
    assert af.label(root + " plan", True, 2, 2) == "root: fork (commit)"
    assert af.label(branch, False, 2, 2) == "branch 1: generate"
    assert af.label(sub, False, 2, 2) == "branch 1.0: generate"


def test_each_branch_must_find_the_commit_of_its_fork_in_whole_pages() -> None:
    labels = ["root: generate", "root: fork (commit)", "branch 0: generate", "branch 0: fork (commit)",
              "branch 0.0: generate", "branch 1: generate"]
    prompts = [[1, 2], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9],
               [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1, 2, 3, 4, 5, 0]]
    assert af.parent_prefixes(labels, prompts, 1) == [0, 0, 5, 0, 9, 5]
    assert af.parent_prefixes(labels, prompts, 4) == [0, 0, 4, 0, 8, 4]


def test_vllm_ranges_cache_answered_prompts_and_maybe_those_in_flight() -> None:
    trunk = list(range(10))
    prompts = [trunk, trunk + [10, 11, 12, 13, 14], trunk + [10, 11, 20, 21, 22], trunk + [10, 11, 12, 13, 30]]
    timing = [([], []), ([0], []), ([0], [1]), ([0, 2], [1])]
    table = af.block_ranges(prompts, timing, block_size=4, capacity=64)
    assert table["low"].tolist() == [0, 8, 8, 12] and table["high"].tolist() == [0, 8, 12, 12]
    with pytest.raises(ValueError, match="does not fit 2 blocks"):
        af.block_ranges(prompts, timing, block_size=4, capacity=8)
    with pytest.raises(ValueError, match="one timing entry per prompt"):
        af.block_ranges(prompts, timing[:2], block_size=4, capacity=64)


def test_a_later_sent_sibling_scheduled_first_can_give_its_blocks_to_the_earlier_one() -> None:
    from servelab.measure.prefix_cache.frontend_cache import Request, timing

    trunk = list(range(10))
    prompts = [trunk + [20, 21, 22], trunk + [20, 21, 23]]  # share 12 tokens: three blocks of 4
    earlier = Request(0, prompts[0], [], 12, 0, "length", 0.0, 2.0)
    later = Request(0, prompts[1], [], 12, 0, "length", 0.1, 1.0)  # sent after, scheduled first
    table = af.block_ranges(prompts, timing([earlier, later]), block_size=4, capacity=64)
    assert table["low"].tolist() == [0, 0] and table["high"].tolist() == [12, 12]


def test_a_fork_of_one_branch_is_refused_before_anything_is_sent() -> None:
    from types import SimpleNamespace

    texts = agent_fork_texts(0, branches=2, sub_branches=2)
    texts["sub_branches"][1] = texts["sub_branches"][1][:1]
    with pytest.raises(ValueError, match=r"every fork needs >= 2 branches .*got branch counts \[2, 2, 1\]"):
        af.run_on_sglang(SimpleNamespace(engine="sglang"), texts, max_tokens=4)


def test_a_run_is_saved_one_request_a_line(tmp_path) -> None:
    import json

    from servelab.measure.prefix_cache.frontend_cache import Request

    run = af.ForkRun({}, ["root", "root plan"], [False, True],
                     [Request(0, [1, 2], [3], 1, 0, "length", 0.0, 1.0), Request(1, [1, 2, 3], [], 2, 2, "length",
                                                                                 1.5, 2.0)], {})
    lines = af.save_jsonl(run, tmp_path / "fork.jsonl").read_text().splitlines()
    assert [json.loads(line)["commit"] for line in lines] == [False, True]
    assert json.loads(lines[1])["prompt"] == [1, 2, 3] and json.loads(lines[0])["answered_s"] == 1.0
