"""The referees: our radix tree against SGLang's own RadixCache, our block cache against vLLM's KVCacheManager.

The fast tests show the streams are worth refereeing: they exercise splits, locks and evictions (radix
tree) and hits, refusals and evictions (block cache), and caches with a different policy (no refresh
on match, no cascade, most recently used first; no last-token cap, head-first freeing, freed blocks
queued the other way round) disagree with ours on them. The engine_venv tests replay the same streams
in the engines' venvs.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pandas as pd
import pytest

from servelab.engines.server import Server, running
from servelab.measure.kv_memory.capacity import engine_capacity
from servelab.measure.prefix_cache.burst import (
    common_prefix,
    finish_groups,
    one_step_prefill,
    pause,
    reuser_ceiling,
    run_burst,
)
from servelab.measure.prefix_cache.live import (
    cache_options,
    counters,
    flush,
    measured_hits,
    on_off_pairs,
    predict_hits,
    run_workloads,
    set_apart,
    sglang_schedule_facts,
)
from servelab.measure.prefix_cache.referees import (
    agreement,
    block_agreement,
    block_ops,
    compare_with_sglang,
    compare_with_vllm,
    radix_ops,
    replay_block_cache,
    replay_radix_tree,
)
from servelab.measure.prefix_cache.scenarios import burst_requests, cycle_requests, repeat_requests
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
    assert kinds == {"insert", "match", "lock", "unlock", "evict", "snapshot"}
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


def test_snapshots_compare_the_cached_sequences_before_the_final_cleanup():
    ops = radix_ops(2)
    ours = replay_radix_tree(ops)
    assert ours["sequences"] == []  # after the cleanup the tree is empty: comparing it alone proves nothing
    row = agreement(ops, ours, ours)
    assert row["snapshot sequences"] > 0 and row["cached sequences agree"]
    last = max(i for i, op in enumerate(ops) if op["op"] == "snapshot")
    theirs = {**ours, "results": [dict(r) for r in ours["results"]]}
    theirs["results"][last]["sequences"] = theirs["results"][last]["sequences"][1:]  # one leaf missing
    assert not agreement(ops, ours, theirs)["cached sequences agree"]
    cleanup = ours["results"][-1]["evicted"]
    assert cleanup > 0 and row["evicted tokens"] == sum(
        r["evicted"] for op, r in zip(ops, ours["results"], strict=True) if op["op"] == "evict") - cleanup


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


# ---- the live experiments' parts that need no engine -----------------------------------------------


def _fake_server_class():
    """A stand-in engine: streaming completions that report cached tokens, counters on /metrics, a flush."""

    class Handler(BaseHTTPRequestHandler):
        state = {"queries": 0, "hits": 0, "flushes": 0, "cache": set(), "engine": "vllm", "go": threading.Event(),
                 "pauses": [], "batches": []}
        state["go"].set()

        def _reply(self, code: int, body: str = "", kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body.encode())

        def do_GET(self):  # noqa: N802 - the http.server API
            s = self.state
            if s["engine"] == "vllm":
                text = (f"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total {s['queries']}\n"
                        f"# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total {s['hits']}\n")
            else:  # SGLang shows a counter only once it has counted something
                text = "" if not s["queries"] else (
                    f"# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total {s['queries']}\n"
                    f"# TYPE sglang:cached_tokens counter\nsglang:cached_tokens_total {s['hits']}\n")
            self._reply(200, text)

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path in ("/reset_prefix_cache", "/flush_cache"):
                vllm = self.state["engine"] == "vllm"
                if self.state.get("refusals"):  # blocks still held: what each engine answers then
                    self.state["refusals"] -= 1
                    return self._reply(200, '{"success": false}', "application/json") if vllm else \
                        self._reply(400, "Flush cache failed.")
                self.state["flushes"] += 1
                self.state["cache"].clear()
                return self._reply(200, '{"success": true}', "application/json") if vllm else \
                    self._reply(200, "Cache flushed.")
            if self.path.split("?")[0] in ("/pause", "/pause_generation", "/resume", "/continue_generation"):
                self.state["pauses"].append(self.path)
                resume = self.path in ("/resume", "/continue_generation")
                self.state["go"].set() if resume else self.state["go"].clear()
                return self._reply(200)
            self.state["go"].wait(10)  # a paused engine holds a request in its queue
            if self.path == "/generate":  # SGLang's native API: here a batch of token-id prompts
                self.state["batches"].append(len(body["input_ids"]))
                hits = [self._prefill(prompt) for prompt in body["input_ids"]]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i in reversed(range(len(hits))):  # answered in any order; "index" says whose
                    meta = {"prompt_tokens": len(body["input_ids"][i]), "cached_tokens": hits[i],
                            "finish_reason": {"type": "length"}}
                    self.wfile.write(f"data: {json.dumps({'index': i, 'text': 'x', 'meta_info': meta})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                return None
            prompt = body["prompt"]
            hit = self._prefill(prompt)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            chunks = [{"choices": [{"index": 0, "text": "x", "finish_reason": "length"}], "usage": None},
                      {"choices": [], "usage": {"prompt_tokens": len(prompt), "completion_tokens": 1,
                                                "total_tokens": len(prompt) + 1,
                                                "prompt_tokens_details": {"cached_tokens": hit}}}]
            for chunk in chunks:
                chunk.update(id="x", object="text_completion", created=0, model=body["model"])
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def _prefill(self, prompt):
            hit = max((n for n in range(len(prompt)) if tuple(prompt[:n]) in self.state["cache"]), default=0)
            self.state["cache"].update(tuple(prompt[:n]) for n in range(1, len(prompt) + 1))
            self.state["queries"] += len(prompt)
            self.state["hits"] += hit
            time.sleep(0.01 * (len(prompt) - hit))  # prefill time grows with the uncached tokens
            return hit

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def engine_stand_in():
    handler = _fake_server_class()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield SimpleNamespace(engine="vllm", url=url, api_url=f"{url}/v1", served_model="fake"), handler.state
    httpd.shutdown()
    httpd.server_close()


def test_run_workloads_flushes_before_each_workload_and_reads_cached_tokens_and_counters(engine_stand_in):
    server, state = engine_stand_in
    workloads = {"a": [[1, 2, 3, 4], [1, 2, 3, 9, 9]], "b": [[1, 2, 3, 4]]}
    requests, totals = run_workloads(server, workloads, {"a": ["a0", "a1"], "b": ["b0"]})
    assert state["flushes"] == 2
    assert requests.cached_tokens.tolist() == [0, 3, 0]  # "b" starts cold although "a" cached its prompt
    assert requests.request.tolist() == ["a0", "a1", "b0"] and requests.workload.tolist() == ["a", "a", "b"]
    assert totals.set_index("workload").hits.to_dict() == {"a": 3, "b": 0}
    assert totals.set_index("workload").queries.to_dict() == {"a": 9, "b": 4}
    assert (requests.ttft_s <= requests.latency_s).all() and (requests.ttft_s > 0).all()


def test_counters_read_a_missing_sglang_counter_as_zero(engine_stand_in):
    server, state = engine_stand_in
    state["engine"] = "sglang"
    sglang = SimpleNamespace(**{**vars(server), "engine": "sglang"})
    assert counters(sglang) == {"queries": 0.0, "hits": 0.0}
    state.update(queries=7, hits=3)
    assert counters(sglang) == {"queries": 7.0, "hits": 3.0}


def test_run_burst_queues_the_burst_in_order_while_paused_then_resumes(engine_stand_in):
    server, state = engine_stand_in
    shared = list(range(100, 140))
    burst = [[7] * 30, [8] * 30, shared + [1], shared + [2]]
    frame = run_burst(server, shared + [0], burst, ["new-0", "new-1", "reuse-0", "reuse-1"], stagger_s=0.05,
                      settle_s=0.1)
    assert state["flushes"] == 1 and state["pauses"] == ["/pause?mode=keep&clear_cache=false", "/resume"]
    assert frame.sent_rank.tolist() == [1, 2, 3, 4] and (frame.start_s < 0).all()  # all sent while paused
    assert (frame.end_s > 0).all()  # none finished before the resume
    assert frame.set_index("request").cached_tokens.to_dict() == {"new-0": 0, "new-1": 0, "reuse-0": 40, "reuse-1": 40}
    assert sorted(frame.finished) == [1, 2, 3, 4] and frame.finish_group.min() == 1


def test_run_burst_sends_sglang_the_burst_as_one_batched_request(engine_stand_in):
    server, state = engine_stand_in
    sglang = SimpleNamespace(**{**vars(server), "engine": "sglang"})
    shared = list(range(100, 140))
    burst = [[7] * 30, shared + [1], shared + [2]]
    frame = run_burst(sglang, shared + [0], burst, ["new-0", "reuse-0", "reuse-1"], settle_s=0.1)
    assert state["batches"] == [3] and state["pauses"] == ["/pause_generation", "/continue_generation"]
    assert frame.request.tolist() == ["new-0", "reuse-0", "reuse-1"] and frame.sent_rank.tolist() == [1, 2, 3]
    assert (frame.start_s < 0).all() and (frame.end_s > 0).all()
    assert frame.set_index("request").cached_tokens.to_dict() == {"new-0": 0, "reuse-0": 40, "reuse-1": 40}
    assert frame.prompt_tokens.tolist() == [30, 41, 41] and sorted(frame.finished) == [1, 2, 3]


def test_pause_speaks_each_engines_endpoint(engine_stand_in):
    server, state = engine_stand_in
    sglang = SimpleNamespace(**{**vars(server), "engine": "sglang"})
    pause(sglang)
    pause(sglang, resume=True)
    assert state["pauses"] == ["/pause_generation", "/continue_generation"]
    with pytest.raises(ValueError, match="unknown engine 'trt'.*vllm, sglang"):
        pause(SimpleNamespace(engine="trt", url=server.url))


def test_requests_that_end_within_the_tolerance_share_a_finish_group():
    import pandas as pd

    ends = pd.Series([2.50, 1.00, 1.03, 2.52, 1.20], index=[10, 11, 12, 13, 14])  # index need not be positional
    assert finish_groups(ends) == [3, 1, 1, 3, 2]
    assert finish_groups(ends, tolerance_s=0.0) == [4, 1, 2, 5, 3] and finish_groups([]) == []
    with pytest.raises(ValueError, match="tolerance_s must be >= 0, got -1"):
        finish_groups(ends, tolerance_s=-1)


def test_one_step_prefill_raises_both_step_budgets_to_the_kv_budget_in_whole_pages():
    from servelab.engines import launch
    from servelab.machine import models, profiles

    assert one_step_prefill(2304) == {"chunked_prefill_size": 2304, "max_prefill_tokens": 2304}
    assert one_step_prefill(18432)["chunked_prefill_size"] == 18432
    assert one_step_prefill(18433) == {"chunked_prefill_size": 18688, "max_prefill_tokens": 18688}  # next 256
    hub = models.ModelRef("Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-14B-Instruct", local=False)
    argv = launch.command("sglang", profiles.load("gpu-80g"), hub, 8000,
                          {"kv_cache_tokens": 18432, **one_step_prefill(18432)}).argv
    assert argv[argv.index("--chunked-prefill-size") + 1] == argv[argv.index("--max-prefill-tokens") + 1] == "18432"
    for bad in (0, -5, 2.5, True, "2304"):
        with pytest.raises(ValueError, match=r"kv_tokens must be an integer >= 1 \(tokens of KV cache\), got"):
            one_step_prefill(bad)


def test_reuser_ceiling_is_whole_blocks_of_all_but_the_last_token():
    assert reuser_ceiling(607, 623, 128) == 512 and reuser_ceiling(607, 623, 1) == 607
    assert reuser_ceiling(607, 607, 1) == 606 and reuser_ceiling(607, 623, 16) == 592
    with pytest.raises(ValueError, match="block_size >= 1"):
        reuser_ceiling(10, 20, 0)
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2 and common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0


def test_on_off_pairs_send_a_cold_request_and_a_cached_one_after_every_flush(engine_stand_in):
    server, state = engine_stand_in
    shared = list(range(100, 140))
    frame = on_off_pairs(server, [shared + [1], shared + [2], shared + [3]], ["c0", "c1", "c2"], pairs=2, rounds=2)
    assert state["flushes"] == 4
    assert frame.request.tolist() == ["c0", "c1", "c1", "c2"] * 2
    assert frame.cache.tolist() == ["off", "on"] * 4 and frame["round"].tolist() == [0] * 4 + [1] * 4
    assert frame.cached_tokens.tolist() == [0, 40] * 4
    with pytest.raises(ValueError, match="3 pairs need 4 prompts with a name each, got 3 prompts and 3 names"):
        on_off_pairs(server, [shared] * 3, ["a", "b", "c"], pairs=3, rounds=1)
    assert run_workloads(server, {"warm": [shared + [1], shared + [2]]})[0].cached_tokens.tolist() == [0, 40]


def test_predicted_hits_block_cache_in_whole_blocks_and_radix_tree_to_the_token():
    a = list(range(300))
    prompts = [a, a, a[:200] + [-1] * 50]
    assert predict_hits("block", prompts, block_size=128, capacity=4096) == [0, 256, 128]
    assert predict_hits("radix", prompts, capacity=4096) == [0, 299, 200]
    assert predict_hits("block", [a[:100], a[:100]], block_size=128, capacity=4096) == [0, 0]


def test_predicted_hits_under_a_loop_that_overflows_the_cache():
    docs = [[0] + [d + 1] * 100 for d in range(3)]  # one shared first token, then distinct documents
    loop = docs + docs
    assert predict_hits("radix", loop, capacity=1000)[3:] == [100, 100, 100]  # fits: all but the last token
    assert predict_hits("radix", loop, capacity=250)[3:] == [1, 1, 1]  # least recently used goes first
    # vLLM frees a request's blocks tail first: the second round still finds each document's first block
    assert predict_hits("block", loop, block_size=16, capacity=16 * 14)[3:] == [16, 16, 16]
    assert predict_hits("block", loop, block_size=16, capacity=16 * 30)[3:] == [96, 96, 96]


def test_predict_hits_names_bad_input():
    with pytest.raises(ValueError, match="unknown cache 'lru'; accepted: block, radix"):
        predict_hits("lru", [[1]], capacity=10)
    with pytest.raises(ValueError, match="prompt 0 \\(40 tokens\\) does not fit 2 blocks"):
        predict_hits("block", [[1] * 40], block_size=16, capacity=32)


def test_scenario_requests_share_exactly_what_they_should():
    loop = cycle_requests(0, documents=3, rounds=2, doc_words=50)
    assert [r.request_id for r in loop] == [f"cycle-{r}-{d}" for r in range(2) for d in range(3)]
    doc = [r.messages[0]["content"].split("\n\nQuestion:")[0] for r in loop]
    assert doc[:3] == doc[3:] and len(set(doc[:3])) == 3
    warm, burst = burst_requests(0, shared_words=60, reusers=2, newcomers=3, newcomer_words=40)
    assert [r.request_id for r in burst] == ["new-0", "new-1", "new-2", "reuse-0", "reuse-1"]
    assert all(r.messages[0] == warm.messages[0] for r in burst[3:])
    assert all(r.messages[0] != warm.messages[0] for r in burst[:3])
    twice = repeat_requests(0, words=20, times=2)
    assert twice[0].messages == twice[1].messages and twice[0].request_id != twice[1].request_id
    assert cycle_requests(1, 3, 2, 50) != loop


@pytest.mark.engine_venv
def test_cache_options_ask_for_cache_reports_and_turn_the_cache_off(require_engine, cpu):
    require_engine("vllm")
    require_engine("sglang")
    vllm_on = Server("vllm", cpu, **cache_options("vllm"))
    vllm_off = Server("vllm", cpu, **cache_options("vllm", caching=False))
    assert vllm_on.extra_env == vllm_off.extra_env == {"VLLM_SERVER_DEV_MODE": "1"}
    assert "--enable-prompt-tokens-details" in vllm_on.spec.argv
    assert "--no-enable-prefix-caching" not in vllm_on.spec.argv
    assert "--no-enable-prefix-caching" in vllm_off.spec.argv
    sglang_on = Server("sglang", cpu, schedule_policy="lpm", **cache_options("sglang"))
    sglang_off = Server("sglang", cpu, **cache_options("sglang", caching=False))
    assert "--enable-cache-report" in sglang_on.spec.argv and "--disable-radix-cache" not in sglang_on.spec.argv
    assert sglang_on.spec.argv[sglang_on.spec.argv.index("--schedule-policy") + 1] == "lpm"
    assert "--disable-radix-cache" in sglang_off.spec.argv and "--enable-cache-report" in sglang_off.spec.argv


def test_cache_options_name_an_unknown_engine():
    with pytest.raises(ValueError, match="unknown engine 'tgi'; accepted: vllm, sglang"):
        cache_options("tgi")


@pytest.mark.engine_venv
def test_sglang_schedule_facts_come_from_its_installed_source(require_engine, cpu):
    require_engine("sglang")
    facts = sglang_schedule_facts(cpu)
    assert "lpm" in facts["CacheAwarePolicy"] and "fcfs" in facts["CacheAgnosticPolicy"]
    assert isinstance(facts["WAITING_QUEUE_PREFIX_MATCH_MAX"], int) and facts["WAITING_QUEUE_PREFIX_MATCH_MAX"] > 0
    assert facts["IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD"] == 32  # int(os.environ.get(..., "32")): the default
    assert facts["IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD"] == 32
    assert isinstance(facts["WAITING_PREFIX_REFRESH_INTERVAL"], int) and facts["WAITING_PREFIX_REFRESH_INTERVAL"] > 0


# ---- both engines live: one server each, a few short requests ---------------------------------------


@pytest.fixture(scope="module")
def live_hits(live, cpu) -> dict[str, dict]:
    """The same short chats on vLLM and SGLang (the session's shared servers answered them last) and on vLLM at
    block size 32, started here; what each engine reports and what our cache of its kind predicts."""
    out = {e: {"requests": live[e]["hits"][0], "totals": live[e]["hits"][1],
               "block_size": live[e]["capacity"]["block_size"]} for e in ("vllm", "sglang")}
    # another block size: the CPU attention backend takes multiples of 32
    budget = cpu.max_model_len * 9 // 8
    with running("vllm", cpu, kv_cache_tokens=budget, block_size=32, **cache_options("vllm")) as server:
        requests, totals = measured_hits(server, live["hit_tokens"])
        out["vllm-32"] = {"requests": requests, "totals": totals, "block_size": engine_capacity(server)["block_size"]}
    return out


@pytest.mark.server
@pytest.mark.parametrize("engine", ["vllm", "vllm-32", "sglang"])
def test_our_caches_predict_every_hit_the_engines_report(live_hits, engine):
    requests = live_hits[engine]["requests"]
    assert requests.cached_tokens.sum() > 0
    assert (requests.cached_tokens == requests.predicted).all(), requests.to_dict("records")
    assert (requests.cached_tokens % live_hits[engine]["block_size"] == 0).all()


@pytest.mark.server
@pytest.mark.parametrize("engine", ["vllm", "vllm-32", "sglang"])
def test_per_request_cached_tokens_add_up_to_the_engines_counters(live_hits, engine):
    requests, totals = live_hits[engine]["requests"], live_hits[engine]["totals"].set_index("workload")
    sums = requests.groupby("workload").agg(hits=("cached_tokens", "sum"), queries=("prompt_tokens", "sum"))
    assert (sums.hits == totals.loc[sums.index, "hits"]).all()
    assert (sums.queries == totals.loc[sums.index, "queries"]).all()


def test_set_apart_takes_one_workload_out_of_both_tables():
    requests = pd.DataFrame({"workload": ["a", "cycle", "a", "cycle"], "request": [0, 1, 2, 3]})
    totals = pd.DataFrame({"workload": ["a", "cycle"], "hits": [5, 7]})
    apart, rest, rest_totals = set_apart("cycle", requests, totals)
    assert apart.request.tolist() == [1, 3] and rest.request.tolist() == [0, 2]
    assert rest_totals.workload.tolist() == ["a"] and list(apart.index) == [0, 1]


@pytest.mark.server
def test_smaller_vllm_blocks_find_more_and_token_granularity_the_most(live_hits):
    found = {engine: live_hits[engine]["requests"].cached_tokens.sum() for engine in ("vllm", "vllm-32", "sglang")}
    assert live_hits["vllm-32"]["block_size"] == 32 < live_hits["vllm"]["block_size"]
    assert found["vllm"] < found["vllm-32"] <= found["sglang"], found


def test_predicted_radix_hits_come_in_whole_pages_of_the_servers_page_size():
    a = list(range(300))
    prompts = [a[:200], a[:250], a[:250]]
    assert predict_hits("radix", prompts, capacity=4096) == [0, 200, 249]
    assert predict_hits("radix", prompts, capacity=4096, page_size=64) == [0, 192, 192]  # 200 inserted as 192
    with pytest.raises(ValueError, match="page_size must be a positive"):
        predict_hits("radix", prompts, capacity=4096, page_size=0)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_flush_retries_a_refusal_and_raises_when_the_cache_is_never_emptied(engine_stand_in, engine):
    server, state = engine_stand_in
    state["engine"], state["refusals"] = engine, 2
    server.engine = engine
    flush(server, wait_s=0)
    assert state["flushes"] == 1 and state["refusals"] == 0
    state["refusals"] = 5
    with pytest.raises(RuntimeError, match=f"{engine} did not empty its prefix cache .* in 3 tries"):
        flush(server, tries=3, wait_s=0)
    assert state["flushes"] == 1
