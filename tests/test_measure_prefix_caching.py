"""The referees: our radix tree against SGLang's own RadixCache, our block cache against vLLM's KVCacheManager.

The fast tests show the streams are worth refereeing: they exercise splits, locks and evictions (radix
tree) and hits, refusals and evictions (block cache), and caches with a different policy (no refresh
on match, no cascade, most recently used first; no last-token cap, head-first freeing, freed blocks
queued the other way round) disagree with ours on them. The engine_venv tests replay the same streams
in the engines' venvs.
"""

from __future__ import annotations

import heapq

import pytest

from servelab.measure.prefix_caching import (
    agreement,
    block_agreement,
    block_ops,
    compare_with_sglang,
    compare_with_vllm,
    radix_ops,
    replay_block_cache,
    replay_radix_tree,
)
from servelab.sim.prefix_cache import BlockHashCache, RadixTree

SEEDS = list(range(24))
AGREE = ["match lengths agree", "insert prefixes agree", "evictions agree", "lock deltas agree",
         "token counts agree", "cached sequences agree"]


class _NoRefreshOnMatch(RadixTree):
    def match_prefix(self, tokens):
        stamps = {id(n): n.last_access for n, _ in self.nodes()}
        result = super().match_prefix(tokens)
        for node, _ in self.nodes():
            node.last_access = stamps.get(id(node), node.last_access)
        return result


class _MostRecentFirst(RadixTree):
    def evictable_leaves(self):
        return sorted(super().evictable_leaves(), key=lambda n: -n.last_access)

    def evict(self, num_tokens):
        freed = 0
        while freed < num_tokens and (leaves := self.evictable_leaves()):
            leaf = leaves[0]
            del leaf.parent.children[leaf.tokens[0]]
            leaf.evicted = True
            self._evictable -= len(leaf)
            freed += len(leaf)
        return freed


class _NoCascade(RadixTree):
    def evict(self, num_tokens):
        heap = [(n.last_access, n.node_id, n) for n in self.evictable_leaves()]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            del leaf.parent.children[leaf.tokens[0]]
            leaf.evicted = True
            self._evictable -= len(leaf)
            freed += len(leaf)
        return freed


def _all_agree(row: dict) -> bool:
    return all(row[k] for k in AGREE)


def test_ops_are_deterministic_and_exercise_every_operation():
    assert radix_ops(3) == radix_ops(3) and radix_ops(3) != radix_ops(4)
    kinds = {op["op"] for seed in SEEDS for op in radix_ops(seed)}
    assert kinds == {"insert", "match", "lock", "unlock", "evict"}
    ops = radix_ops(0)
    result = replay_radix_tree(ops)["results"]
    evictions = [r["evicted"] for op, r in zip(ops, result, strict=True) if op["op"] == "evict"]
    partial = [r["length"] for op, r in zip(ops, result, strict=True)
               if op["op"] == "match" and 0 < r["length"] < len(op["tokens"])]
    assert sum(evictions[:-1]) > 0 and partial  # evictions under pressure, and matches that end mid-way
    assert any(r["protected"] > 0 for r in result)
    assert result[-1]["total"] == 0  # every lock released, everything evicted at the end


@pytest.mark.parametrize("variant", [_NoRefreshOnMatch, _MostRecentFirst, _NoCascade], ids=lambda v: v.__name__)
def test_the_streams_tell_a_different_policy_apart(variant):
    rows = []
    for seed in SEEDS:
        ops = radix_ops(seed)
        rows.append(agreement(ops, replay_radix_tree(ops), replay_radix_tree(ops, variant())))
    assert not all(_all_agree(r) for r in rows)


def test_agreement_of_a_tree_with_itself():
    ops = radix_ops(1)
    row = agreement(ops, replay_radix_tree(ops), replay_radix_tree(ops))
    assert _all_agree(row) and row["ops"] == len(ops)


@pytest.mark.engine_venv
def test_our_radix_tree_agrees_with_sglangs(require_engine, cpu):
    require_engine("sglang")
    frame = compare_with_sglang(cpu, SEEDS)
    assert len(frame) == len(SEEDS) and frame["evicted tokens"].sum() > 0 and frame["matched tokens"].sum() > 0
    disagree = frame[~frame[AGREE].all(axis=1)]
    assert disagree.empty, f"SGLang {frame.attrs['sglang']} disagrees on seeds {disagree['seed'].tolist()}"


# ---- the block cache against vLLM -----------------------------------------------------------------

BLOCK_AGREE = ["hits agree", "block tables agree", "free queues agree", "counters agree"]
B, N = 4, 12


class _NoLastTokenCap(BlockHashCache):
    def _hit_blocks(self, tokens):
        return super()._hit_blocks(list(tokens) + [-1])  # one more token: a fully cached prompt hits whole


class _HeadFirstFree(BlockHashCache):
    def free(self, request_id):
        req = self._requests[request_id]
        req.blocks.reverse()
        super().free(request_id)


class _UncachedToBack(BlockHashCache):
    def free(self, request_id):
        blocks = [b for b in self._requests[request_id].blocks]
        super().free(request_id)
        for b in blocks:
            if b.ref_cnt == 0 and b.block_hash is None:
                self._free.move_to_end(b.block_id)


def _block_rows(variant=None):
    rows = []
    for seed in SEEDS:
        ops = block_ops(seed, block_size=B, num_blocks=N)
        theirs = replay_block_cache(ops, B, N, variant(N, B) if variant else None)
        rows.append(block_agreement(replay_block_cache(ops, B, N), theirs))
    return rows


def test_block_ops_are_deterministic_and_exercise_hits_refusals_and_evictions():
    assert block_ops(3) == block_ops(3) and block_ops(3) != block_ops(4)
    assert {op["op"] for op in block_ops(0)} == {"admit", "append", "free"}
    runs = [replay_block_cache(block_ops(seed, block_size=B, num_blocks=N), B, N) for seed in SEEDS]
    assert all(r["counters"]["hits"] > 0 for r in runs)
    assert sum(r["evicted"] for r in runs) > 0
    assert any(res.get("hit", 0) is None for r in runs for res in r["results"])  # some admissions refused
    for seed, run in zip(SEEDS, runs, strict=True):  # every request freed: every block back in the queue
        assert sorted(run["results"][-1]["free_queue"]) == list(range(N)), seed


def test_appends_never_run_out_of_blocks():
    for seed in SEEDS:  # BlockHashCache.append raises OutOfBlocks if the stream got this wrong
        replay_block_cache(block_ops(seed, block_size=B, num_blocks=N, append_p=0.9), B, N)


@pytest.mark.parametrize("variant", [_NoLastTokenCap, _HeadFirstFree, _UncachedToBack], ids=lambda v: v.__name__)
def test_the_block_streams_tell_a_different_policy_apart(variant):
    assert not all(all(r[k] for k in BLOCK_AGREE) for r in _block_rows(variant))


def test_block_agreement_of_a_cache_with_itself():
    assert all(all(r[k] for k in BLOCK_AGREE) for r in _block_rows())


def test_unknown_block_op_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown op 'evict'.*admit, append, free"):
        replay_block_cache([{"op": "evict", "id": "r0"}], B, N)


@pytest.mark.engine_venv
def test_our_block_cache_agrees_with_vllms_kv_cache_manager(require_engine, cpu):
    require_engine("vllm")
    frame = compare_with_vllm(cpu, SEEDS, block_size=B, num_blocks=N)
    assert len(frame) == len(SEEDS) and frame["hit tokens"].sum() > 0 and frame["refused"].sum() > 0
    assert frame["evicted blocks"].sum() > 0
    disagree = frame[~frame[BLOCK_AGREE].all(axis=1)]
    assert disagree.empty, f"vLLM {frame.attrs['vllm']} disagrees on seeds {disagree['seed'].tolist()}"
