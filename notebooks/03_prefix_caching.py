# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Prefix caching: SGLang's radix tree and vLLM's hashed blocks
#
# A chat turn re-sends the whole conversation. An agent's branches repeat the task that spawned
# them. A few-shot prompt puts the same examples before every question. Most of each prompt has
# been prefilled before, and because attention is causal, the keys and values of a token depend
# only on the tokens before it: the same prefix always yields the same KV cache. *Prefix caching*
# keeps the KV cache of earlier requests and hands it to a later request that starts with the same
# tokens, which then prefills only the rest.
#
# The source articles file the two engines under two names: "vLLM = PagedAttention, SGLang =
# RadixAttention". Today both engines page their KV cache and both cache prefixes by default. They
# differ in how. SGLang keeps a radix tree over token ids (Zheng et al., "SGLang: Efficient
# Execution of Structured Language Model Programs", NeurIPS 2024, §3): a hit can end on any
# token. vLLM caches full KV blocks, each found by a hash of its tokens chained over everything
# before it (`vllm/v1/core/kv_cache_utils.py`): a hit is a whole number of blocks. This chapter
# builds both caches from scratch, checks them against the engines' own code, and then sends the
# same token ids to both engines to measure what difference remains: in hits, in time to first
# token, under eviction and in scheduling.

# %% tags=["parameters"]
profile = "auto"
seed = 0
referee_seeds = 24            # seeded operation streams each referee replays
kv_tokens = None              # KV budget of every server, in tokens; None: one full-length sequence and an eighth
workload_sizes = {            # options of each workload generator (servelab/measure/prefix_workloads.py)
    "multi_turn": {"conversations": 1, "turns": 4},
    "few_shot": {"requests": 4, "system_words": 560},
    "agent_tree": {"branches": 2, "sub_branches": 2},
    "retrieval": {"requests": 6},
    "no_sharing": {"requests": 4},
}
short_prompt_words = 40       # a prompt shorter than one vLLM block on the CPU build, sent twice
cycle_documents = 3           # eviction: documents read in turn, two rounds...
cycle_doc_share = 0.36        # ... each this share of the KV budget, so that together they do not fit
burst_newcomers = 3           # scheduling: fresh prompts that arrive first ...
burst_reusers = 4             # ... then requests that reuse a cached prefix
burst_shared_share = 0.26     # the cached prefix, as a share of the KV budget
burst_newcomer_share = 0.3    # each fresh prompt, as a share of the KV budget (together with the prefix: > 1)
off_requests = 3              # few-shot requests sent to the servers without a prefix cache

# %%
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.book.diagrams_radix import draw_radix_tree, tree_frame
from servelab.sim.prefix_cache import BlockHashCache, RadixTree

prof = banner.start(profile)

# %% [markdown]
# Starting an engine takes tens of seconds on a CPU, so the chapter starts as few servers as it
# can: one vLLM, one SGLang, and one more SGLang with the cache-aware scheduling policy `lpm`,
# because the policy is a flag fixed at start. All three get the same small KV budget.
# `cache_options` asks both engines to report the cached prompt tokens of every request (vLLM's
# `--enable-prompt-tokens-details`, SGLang's `--enable-cache-report`) and to let us empty their
# prefix caches between experiments. Where every server's memory is bounded (the cpu profile) the
# three start now, side by side in the background, while we build the two caches; on a GPU, where
# each server claims most of the memory, each starts when it is needed and the others stop
# (`servelab/measure/lineup.py`).

# %%
from servelab.engines.server import Server
from servelab.measure.lineup import Lineup
from servelab.measure.prefix_cache_live import cache_options

kv_tokens = kv_tokens or prof.max_model_len * 9 // 8  # vLLM needs one full-length sequence plus its null block
lineup = Lineup({
    "vllm": Server("vllm", prof, kv_cache_tokens=kv_tokens, **cache_options("vllm")),
    "sglang": Server("sglang", prof, kv_cache_tokens=kv_tokens, **cache_options("sglang")),
    "sglang lpm": Server("sglang", prof, kv_cache_tokens=kv_tokens, schedule_policy="lpm", **cache_options("sglang")),
}, together=prof.kv_cache_tokens is not None, background=True)

# %% [markdown]
# ## Two prefix caches from scratch
#
# ### The radix tree
#
# A radix tree stores token sequences by their shared prefixes: every edge carries a run of
# tokens, and the path from the root to a node spells a sequence whose KV cache is held. A new
# prompt walks down the tree as far as its tokens agree; that walk is the cache hit. If the walk
# ends inside an edge, the edge is split in two so that the shared part becomes its own node.
# When the request has been prefilled, its tokens are inserted: what was not there yet hangs
# below as a new leaf. The tree in `servelab/sim/prefix_cache/radix_tree.py` mirrors SGLang's
# `RadixCache` (`sglang/srt/mem_cache/radix_cache.py`) at one token per page.
#
# Four toy requests, with one word per token, show the moves. Like the engines, a request looks up
# all but its last token: the last one must be computed anyway, because its logits give the first
# output token.

# %%
toy_prompts = [
    "SYS be brief . USER capital of France ?",
    "SYS be brief . USER capital of Spain ?",
    "SYS be brief . USER capital of France ? BOT Paris . USER and Italy ?",
    "SYS be brief . USER translate hello",
]
vocab: dict[str, int] = {}
toy = [[vocab.setdefault(word, len(vocab)) for word in p.split()] for p in toy_prompts]
words = {i: w for w, i in vocab.items()}


def as_text(ids):
    return " ".join(words[i] for i in ids)


tree, states, radix_hits = RadixTree(), [], []
for tokens in toy:
    match = tree.match_prefix(tokens[:-1])  # the hit
    tree.inc_lock_ref(match.node)           # the request runs: its cached path must stay
    tree.insert(tokens)                     # prefilled: its prompt joins the tree
    tree.dec_lock_ref(match.node)           # finished
    radix_hits.append(match.length)
    states.append(tree_frame(tree))
fig, panels = plt.subplots(2, 2, figsize=(14, 8))
for i, (state, ax) in enumerate(zip(states, panels.flat, strict=True)):
    draw_radix_tree(state, title=f"{plots.label('after request')} {i + 1}", text=as_text, ax=ax, legend=i == 1)
plt.tight_layout()
plt.show()

# %% [markdown]
# Request 2 matches the first seven tokens: the first request's single edge splits after "of".
# Request 3 matches all of request 1 and adds a leaf below "France ?". Request 4 shares only
# "SYS be brief . USER", so the top edge splits again. Each box reads: the node's first tokens,
# its length, its lock count and the logical time it was last touched.
#
# When memory runs short the tree evicts *leaves*, least recently used first; a parent that
# becomes a leaf can go next. A running request locks its path (lock count above zero), and a
# locked node is never evicted. Below, a request that continues request 3 is running, and the
# engine needs room for three tokens.

# %%
running = tree.match_prefix(toy[2] + [vocab["?"]]).node
tree.inc_lock_ref(running)
fig, (before, after) = plt.subplots(1, 2, figsize=(14, 4))
draw_radix_tree(tree, title="a request holds the France branch", text=as_text, ax=before, legend=False)
freed = tree.evict(3)
draw_radix_tree(tree, title=f"{plots.label('after evicting 3 tokens')} ({freed} {plots.label('freed')})",
                text=as_text, ax=after)
tree.dec_lock_ref(running)
plt.tight_layout()
plt.show()

# %% [markdown]
# The least recently used unlocked leaf, "Spain ?", held two tokens; eviction frees whole leaves,
# so it takes the next oldest too and frees more than it was asked for. The locked branch stayed.
#
# ### The hashed block cache
#
# vLLM stores KV in fixed-size blocks (the previous chapter) and caches a block once it is full.
# A block's key is a hash of its parent block's key and its own token ids, so equal keys mean
# equal *prefixes*, not only equal blocks. A new prompt hashes its full blocks in order and looks
# them up until the first miss. A partly filled last block is never cached, and the hit stops one
# token short of the prompt, rounded down to whole blocks: a prompt that is entirely cached still
# recomputes its last block (`get_computed_blocks` in `vllm/v1/core/kv_cache_manager.py`).
# `servelab/sim/prefix_cache/block_hash_cache.py` mirrors it, free queue and eviction order
# included. The same four requests, with blocks of four tokens:

# %%
blocks = BlockHashCache(num_blocks=16, block_size=4)
block_hits = []
for i, tokens in enumerate(toy):
    block_hits.append(blocks.allocate(f"toy-{i}", tokens).hit_tokens)
    blocks.free(f"toy-{i}")
pd.DataFrame({"prompt tokens": [len(t) for t in toy], "radix tree hit": radix_hits,
              "block cache hit (blocks of 4)": block_hits}, index=[f"request {i + 1}" for i in range(len(toy))])

# %% [markdown]
# The block cache finds whole blocks only: request 2 shares seven tokens but gets four, and
# request 3, whose first nine tokens were all prompt 1, gets eight.
#
# ## The referees: the engines' own code on the same operations
#
# Both caches are only worth measuring with if they behave exactly like the engines. Each referee
# replays seeded streams of operations, with shared prefixes, branches, locks, refused admissions
# and evictions under a small pool, on our cache and on the engine's own code, in the engine's
# Python environment, without a model or a server:
#
# - SGLang's `RadixCache.create_simulated` (`sglang/srt/mem_cache/radix_cache.py`), driven by
#   `servelab/engines/engine_side/sgl_radix_referee.py`: match lengths, insertions, lock deltas,
#   evictions and the final tree.
# - vLLM's `KVCacheManager` (`vllm/v1/core/kv_cache_manager.py`, with its `BlockPool` and block
#   hasher), driven by `servelab/engines/engine_side/vllm_prefix_referee.py` in the order vLLM's
#   scheduler calls it: hits, block tables, the free queue after every operation, and the
#   prefix-cache counters.
#
# One caveat on SGLang: the referee checks the classic `RadixCache`, the one `create_simulated`
# builds. The SGLang 0.5.23 *server* builds a `UnifiedRadixCache` (`mem_cache/registry.py`),
# whose tree core is written in Rust by default (`mem_cache/unified_cache/tree_core_registry.py`).
# The live measurements below check our tree against that server too.

# %%
from servelab.measure.prefix_caching import compare_with_sglang, compare_with_vllm

seeds = list(range(referee_seeds))
with ThreadPoolExecutor(2) as pool:
    radix_job = pool.submit(compare_with_sglang, prof, seeds)
    block_job = pool.submit(compare_with_vllm, prof, seeds)
    radix_referee, block_referee = radix_job.result(), block_job.result()
results.save("prefix_referee_sglang", radix_referee, prof, sglang=radix_referee.attrs["sglang"])
results.save("prefix_referee_vllm", block_referee, prof, vllm=block_referee.attrs["vllm"])
radix_agree = [c for c in radix_referee if c.endswith("agree")]
block_agree = [c for c in block_referee if c.endswith("agree")]
pd.DataFrame({
    "engine code": [f"SGLang {radix_referee.attrs['sglang']} RadixCache",
                    f"vLLM {block_referee.attrs['vllm']} KVCacheManager"],
    "seeds": [len(radix_referee), len(block_referee)],
    "operations": [radix_referee.ops.sum(), block_referee.ops.sum()],
    "hit tokens": [radix_referee["matched tokens"].sum(), block_referee["hit tokens"].sum()],
    "evicted": [f"{radix_referee['evicted tokens'].sum()} tokens", f"{block_referee['evicted blocks'].sum()} blocks"],
    "refused admissions": ["-", block_referee.refused.sum()],
    "seeds where everything agrees": [radix_referee[radix_agree].all(axis=1).sum(),
                                      block_referee[block_agree].all(axis=1).sum()],
})

# %%
# NBVAL_CHECK_OUTPUT
print(radix_referee[radix_agree].all().all(), block_referee[block_agree].all().all())

# %% [markdown]
# ## The workloads, saved
#
# Five workloads are seeded chat requests (`servelab/measure/prefix_workloads.py`), in the shapes
# real programs produce:
#
# - **multi_turn**: a conversation; each turn re-sends the previous turn plus two messages.
# - **few_shot**: one long system prompt with worked examples before every question.
# - **agent_tree**: an agent that forks. SGLang's frontend `fork` (`sglang/lang/interpreter.py`,
#   `StreamExecutor.fork`) first sends the shared prefix, then each branch continues it; here
#   the root request comes first, then two branches, then two steps under each branch.
# - **retrieval**: each request quotes one to three documents from a shared pool, then asks.
# - **no_sharing**: the control, every prompt different from its first word.
#
# Two more test granularity and eviction: **short_repeat** sends one prompt shorter than a CPU
# block twice, and **cycle** reads `cycle_documents` long documents in turn, twice, so that
# together they do not fit the KV budget. The requests are saved as JSONL beside the results, with
# two more sets used further below: a longer loop for a simulation, and a burst for scheduling.

# %%
from servelab.measure.prefix_scenarios import burst_requests, cycle_requests, repeat_requests
from servelab.measure.prefix_workloads import make, save_jsonl

workloads = {name: make(name, seed, **options) for name, options in workload_sizes.items()}
workloads["short_repeat"] = repeat_requests(seed, short_prompt_words, times=2)
workloads["cycle"] = cycle_requests(seed, cycle_documents, rounds=2, doc_words=int(cycle_doc_share * kv_tokens))
loop = cycle_requests(seed, 2 * cycle_documents, rounds=2, doc_words=int(cycle_doc_share * kv_tokens))  # simulated
warm, burst = burst_requests(seed, shared_words=int(burst_shared_share * kv_tokens), reusers=burst_reusers,
                             newcomers=burst_newcomers, newcomer_words=int(burst_newcomer_share * kv_tokens))
summary = pd.DataFrame([{"workload": name, "requests": len(reqs), "words": sum(w for w in
                         (sum(len(m["content"].split()) for m in r.messages) for r in reqs))}
                        for name, reqs in workloads.items()])
saved = results.save("prefix_workloads", summary, prof, seed=seed)
save_jsonl([r for reqs in workloads.values() for r in reqs] + loop + [warm, *burst], saved.with_suffix(".jsonl"))
print("saved", saved.with_suffix(".jsonl").name)

# %% [markdown]
# Both engines must see exactly the same token ids, or a difference in hits could come from a
# difference in tokenization. So vLLM turns each request into token ids once, with the model's
# chat template (`/tokenize` with `messages` and `add_generation_prompt`), and both engines then
# receive those ids as completion prompts. Each request asks for one output token: its time to
# first token is its prefill, and only its prompt is cached.

# %%
from servelab.measure.kv_capacity import engine_capacity, server_info
from servelab.measure.prefix_cache_live import chat_token_ids

vllm = lineup.take("vllm")
tokens = {name: [chat_token_ids(vllm, r.messages) for r in reqs] for name, reqs in workloads.items()}
ids = {name: [r.request_id for r in reqs] for name, reqs in workloads.items()}
loop_tokens = [chat_token_ids(vllm, r.messages) for r in loop]
warm_tokens = chat_token_ids(vllm, warm.messages)
burst_tokens = [chat_token_ids(vllm, r.messages) for r in burst]
burst_names = [r.request_id for r in burst]
results.save("prefix_workload_tokens", {**tokens, "loop": loop_tokens, "burst": [warm_tokens, *burst_tokens]}, prof,
             tokenizer=f"vLLM {vllm.version()} /tokenize")
pd.DataFrame({name: pd.Series([len(t) for t in seqs]).describe()[["count", "min", "max"]]
              for name, seqs in tokens.items()}).T.astype(int).rename(columns={"count": "requests"})

# %% [markdown]
# ## Hits on the real engines
#
# Each workload starts from an empty prefix cache and sends its requests one after another. For
# every request we read the engine's own report of its cached prompt tokens, and beside it what
# our cache predicts for the same token ids with the engine's block size and capacity. The engines'
# counters add up the hits of each workload: vLLM's `vllm:prefix_cache_queries` and
# `vllm:prefix_cache_hits`, SGLang's `sglang:prompt_tokens` and `sglang:cached_tokens` (its
# `sglang:cache_hit_rate` is a gauge of the latest batch only, so it is not used here). Both count
# tokens, so their ratio is the workload's hit rate.
#
# Each server runs the **cycle** workload in the same go (it is read in the section on eviction),
# and then the first `off_requests` few-shot requests once more, each after emptying the cache:
# every one of them prefills its whole prompt, as with the cache turned off (the section on
# caching on and off).
#
# ### vLLM

# %%
from servelab.engines.metrics import scrape
from servelab.measure.prefix_cache_live import predict_hits, run_cold, run_workloads

hit_workloads = [name for name in tokens if name != "cycle"]
vllm_built = engine_capacity(vllm)
vllm_config = scrape(vllm.url).labels("vllm:cache_config_info")
print(f"vLLM {vllm.version()}: {vllm_built['blocks']} blocks of {vllm_built['block_size']} tokens "
      f"({vllm_built['usable']} usable), enable_prefix_caching={vllm_config['enable_prefix_caching']}")
vllm_hits, vllm_rates = run_workloads(vllm, {n: tokens[n] for n in [*hit_workloads, "cycle"]}, ids)
vllm_hits["predicted"] = np.concatenate([
    predict_hits("block", tokens[n], block_size=vllm_built["block_size"], capacity=vllm_built["usable"])
    for n in [*hit_workloads, "cycle"]])
vllm_cold = run_cold(vllm, tokens["few_shot"][:off_requests], ids["few_shot"][:off_requests])
vllm_cycle = vllm_hits[vllm_hits.workload == "cycle"].reset_index(drop=True)
vllm_hits = vllm_hits[vllm_hits.workload != "cycle"].reset_index(drop=True)
vllm_rates = vllm_rates[vllm_rates.workload != "cycle"].reset_index(drop=True)
results.save("prefix_hits_vllm", vllm_hits, prof, kv_tokens=kv_tokens, block_size=vllm_built["block_size"])
results.save("prefix_hit_rates_vllm", vllm_rates, prof, kv_tokens=kv_tokens)
vllm_hits[["workload", "request", "prompt_tokens", "cached_tokens", "predicted", "ttft_s"]]

# %%
# NBVAL_CHECK_OUTPUT
per_workload = vllm_hits.groupby("workload", sort=False).cached_tokens.sum()
print((vllm_hits.cached_tokens == vllm_hits.predicted).all(),
      (vllm_hits.cached_tokens % vllm_built["block_size"] == 0).all(),
      (per_workload.values == vllm_rates.set_index("workload").loc[per_workload.index, "hits"].values).all())

# %% [markdown]
# Every hit is a whole number of blocks, and our block cache predicts every one of them. The
# per-request reports add up to the counters.
#
# ### SGLang

# %%
sglang = lineup.take("sglang")
sglang_built = engine_capacity(sglang)
info = server_info(sglang)
print(f"SGLang {sglang.version()}: {sglang_built['tokens']} KV tokens, page_size={sglang_built['block_size']}, "
      f"disable_radix_cache={info['disable_radix_cache']}, schedule_policy={info['schedule_policy']}")
sglang_hits, sglang_rates = run_workloads(sglang, {n: tokens[n] for n in [*hit_workloads, "cycle"]}, ids)
sglang_hits["predicted"] = np.concatenate([
    predict_hits("radix", tokens[n], capacity=sglang_built["usable"]) for n in [*hit_workloads, "cycle"]])
sglang_cold = run_cold(sglang, tokens["few_shot"][:off_requests], ids["few_shot"][:off_requests])
sglang_cycle = sglang_hits[sglang_hits.workload == "cycle"].reset_index(drop=True)
sglang_hits = sglang_hits[sglang_hits.workload != "cycle"].reset_index(drop=True)
sglang_rates = sglang_rates[sglang_rates.workload != "cycle"].reset_index(drop=True)
results.save("prefix_hits_sglang", sglang_hits, prof, kv_tokens=kv_tokens)
results.save("prefix_hit_rates_sglang", sglang_rates, prof, kv_tokens=kv_tokens)
sglang_hits[["workload", "request", "prompt_tokens", "cached_tokens", "predicted", "ttft_s"]]

# %%
# NBVAL_CHECK_OUTPUT
per_workload = sglang_hits.groupby("workload", sort=False).cached_tokens.sum()
print((sglang_hits.cached_tokens == sglang_hits.predicted).all(),
      (per_workload.values == sglang_rates.set_index("workload").loc[per_workload.index, "hits"].values).all())

# %% [markdown]
# Our radix tree predicts every hit of the SGLang server too, although the server runs a
# different implementation of the tree than the one the referee checked.
#
# ### Side by side

# %%
rates = pd.DataFrame({"vLLM": vllm_rates.set_index("workload").hit_rate,
                      "SGLang": sglang_rates.set_index("workload").hit_rate})
ax = (100 * rates).plot.bar(figsize=(8, 4), rot=0)
plots.axes("Prefix cache hit rate from each engine's counters", "workload", "cached / prompt tokens (%)", ax=ax)
ax.legend([plots.label("vLLM"), plots.label("SGLang")])
plt.show()
(100 * rates).round(1)

# %% [markdown]
# The two engines differ in granularity, and the table shows where that matters. The few-shot
# prompts share a long system prompt: both engines reuse it, vLLM up to its last full block. In
# the multi-turn chat each turn can reuse the whole previous prompt; SGLang does, vLLM stops at
# the previous prompt's last full block. In the control, every prompt still starts with the same
# chat-template tokens: SGLang finds them, vLLM only the whole blocks among them. The requests of
# three workloads, one by one:

# %%
both = vllm_hits[["workload", "request", "prompt_tokens"]].assign(
    vllm=vllm_hits.cached_tokens.values, sglang=sglang_hits.cached_tokens.values)
both["difference"] = both.sglang - both.vllm
both[both.workload.isin(["multi_turn", "short_repeat", "no_sharing"])]

# %%
# NBVAL_CHECK_OUTPUT
repeat = both[both.workload == "short_repeat"].iloc[-1]
print((both.sglang >= both.vllm).all(), repeat.sglang == repeat.prompt_tokens - 1,
      repeat.vllm == (repeat.prompt_tokens - 1) // vllm_built["block_size"] * vllm_built["block_size"])

# %% [markdown]
# Without eviction, SGLang's hit is never shorter than vLLM's, and the difference is less than one
# of vLLM's blocks per request. A prompt sent twice is the extreme case: SGLang reuses all but its
# last token, vLLM rounds that down to whole blocks, which for a prompt shorter than a block is
# nothing.
#
# ### What the block size does
#
# The block size is vLLM's knob for this granularity (`--block-size`). Our block cache, refereed
# above against vLLM's own code and checked on every request of this run, predicts the hit rate of
# the same token ids at other block sizes; SGLang's one-token pages are the limit on the left.

# %%
sizes = sorted({1, 16, 32, 64, 128, vllm_built["block_size"]})
sweep = pd.DataFrame([
    {"workload": name, "block size": size,
     "hit rate": sum(predict_hits("radix" if size == 1 else "block", tokens[name], block_size=size,
                                  capacity=10 * kv_tokens)) / sum(len(t) for t in tokens[name])}
    for name in hit_workloads for size in sizes])
results.save("prefix_block_size_sweep", sweep, prof)
ax = plots.axes("Hit rate against block size (simulated on the engines' token ids)",
                "block size (tokens; 1 = SGLang's radix tree)", "cached / prompt tokens (%)")
for name, rows in sweep.groupby("workload", sort=False):
    ax.plot(rows["block size"], 100 * rows["hit rate"], marker="o", label=name)
ax.set_xscale("log", base=2)
ax.set_xticks(sizes, [str(size) for size in sizes])
ax.axvline(vllm_built["block_size"], color="grey", linestyle=":", label=plots.label("this vLLM's block size"))
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
plt.show()

# %% [markdown]
# The longer the shared prefix compared with a block, the less the block size matters: few-shot
# loses at most one block of a long prompt, the control and the short repeat lose everything. The
# CPU attention backend takes block sizes in multiples of 32 (the previous chapter); the live tests
# of `tests/test_measure_prefix_caching.py` start vLLM with 32-token blocks and check these
# predictions request by request.
#
# ## Eviction under a small cache
#
# Every server in this chapter has the same small KV budget. The **cycle** workload reads
# `cycle_documents` documents in turn, twice; together they need more KV than the budget holds, so
# each new document must evict something. Both engines evict the least recently used entry, but
# not the same unit: SGLang frees whole leaves of its tree (a leaf here is an entire document),
# vLLM frees blocks, and a finished request puts its blocks in the free queue tail first, so the
# end of a document goes before its beginning (`free` in `vllm/v1/core/single_type_kv_cache_manager.py`).
# Both servers ran the loop above, after the other workloads, from an empty cache.

# %%
cycles = pd.concat([vllm_cycle.assign(engine="vLLM"), sglang_cycle.assign(engine="SGLang")], ignore_index=True)
cycles["round"] = cycles.request.str.split("-").str[1].astype(int) + 1
results.save("prefix_eviction_cycle", cycles, prof, kv_tokens=kv_tokens, documents=cycle_documents)
cycles[["engine", "request", "round", "prompt_tokens", "cached_tokens", "predicted", "ttft_s"]]

# %%
fig, ax = plt.subplots(figsize=(8, 4))
width = 0.4
for k, (engine, rows) in enumerate(cycles.groupby("engine", sort=False)):
    x = np.arange(len(rows)) + (k - 0.5) * width
    ax.bar(x, rows.ttft_s, width, label=f"{engine}: {plots.label('time to first token')}")
    for xi, (hit, total) in zip(x, zip(rows.cached_tokens, rows.prompt_tokens, strict=True), strict=True):
        ax.text(xi, 0.02, f"{hit}/{total}", rotation=90, ha="center", va="bottom", fontsize=7, color="white")
ax.set_xticks(np.arange(len(tokens["cycle"])), ids["cycle"], rotation=30, fontsize=8)
plots.axes("Two rounds over documents that overflow the cache", "request (round-document); in the bars: "
           "cached / prompt tokens", "time to first token (s)", ax=ax)
ax.legend(fontsize=8)
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print((cycles.cached_tokens == cycles.predicted).all())

# %% [markdown]
# Least recently used is the worst order for a loop that does not fit: each document is evicted
# just before it is needed again. SGLang loses the whole document and finds only the shared
# chat-template tokens in the second round. vLLM, having evicted the ends first, still finds the
# beginning of each document. How much survives depends on how far the loop overflows the cache,
# which the simulators show for a growing number of documents of the same size:

# %%
most = 2 * cycle_documents
overflow = []
for n_docs in range(1, most + 1):
    prompts = loop_tokens[:n_docs] + loop_tokens[most:most + n_docs]  # documents 0..n-1, twice
    for cache, capacity, size in (("block", vllm_built["usable"], vllm_built["block_size"]),
                                  ("radix", sglang_built["usable"], 1)):
        hits = predict_hits(cache, prompts, block_size=size, capacity=capacity)
        overflow.append({"documents": n_docs, "cache": "vLLM blocks" if cache == "block" else "SGLang radix tree",
                         "working set / capacity": sum(map(len, prompts[:n_docs])) / capacity,
                         "second-round hit rate": sum(hits[n_docs:]) / sum(map(len, prompts[n_docs:]))})
overflow = pd.DataFrame(overflow)
results.save("prefix_eviction_sweep", overflow, prof, kv_tokens=kv_tokens)
ax = plots.axes("Second round of a loop over documents (simulated)", "working set / cache capacity",
                "second-round hit rate (%)")
for cache, rows in overflow.groupby("cache", sort=False):
    ax.plot(rows["working set / capacity"], 100 * rows["second-round hit rate"], marker="o", label=cache)
ax.axvline(1.0, color="grey", linestyle=":")
ax.legend()
plt.show()

# %% [markdown]
# ## When order matters: SGLang's scheduling policies
#
# When several requests wait, the scheduler decides which to prefill first, and under a small cache
# that decides what stays cached. vLLM's scheduler knows two policies, `fcfs` (the default) and
# `priority` (`--scheduling-policy`, `vllm/config/scheduler.py`); neither looks at the cache. SGLang
# has cache-aware ones too (`--schedule-policy`); the list below is read from the installed
# `schedule_policy.py`, and the server above reports its default.

# %%
from servelab.measure.prefix_cache_live import run_burst, sglang_schedule_facts

facts = sglang_schedule_facts(prof)
print(f"cache-aware policies: {', '.join(facts['CacheAwarePolicy'])}")
print(f"cache-agnostic policies: {', '.join(facts['CacheAgnosticPolicy'])}")
print(f"this server's policy: {info['schedule_policy']}; lpm and hrrn fall back to FCFS above "
      f"{facts['WAITING_QUEUE_PREFIX_MATCH_MAX']} waiting requests")

# %% [markdown]
# `lpm` (longest prefix match) sorts the waiting queue so that requests with the longest cached
# prefix go first. It is not always on when chosen. In `SchedulePolicy` (`_validate_and_adjust_policy`
# and `_determine_active_policy`), a cache-aware policy becomes FCFS when the radix cache is
# disabled, and `lpm` and `hrrn` become FCFS for any scheduling round with more waiting requests
# than the limit printed above, because matching every waiting request against the tree costs
# time on every round.
#
# A workload where order matters: one request caches a shared prefix; then a burst arrives, first
# `burst_newcomers` fresh prompts, then `burst_reusers` requests that start with the cached prefix.
# Under FCFS the fresh prompts are prefilled first, their KV needs room, and the least recently
# used entry, the shared prefix, is evicted just before the requests that need it. The burst runs
# on the three servers: vLLM and SGLang, both first come, first served, and the SGLang server
# started with `--schedule-policy lpm`. These are the chapter's last live measurements; the
# servers stop after them.

# %%
bursts = {"vLLM, fcfs": run_burst(lineup.take("vllm"), warm_tokens, burst_tokens, burst_names),
          "SGLang, fcfs": run_burst(lineup.take("sglang"), warm_tokens, burst_tokens, burst_names)}
lpm = lineup.take("sglang lpm")
print(f"SGLang: schedule_policy={server_info(lpm)['schedule_policy']}")
bursts["SGLang, lpm"] = run_burst(lpm, warm_tokens, burst_tokens, burst_names)
print(f"shared prefix {len(warm_tokens)} tokens; burst prompts {[len(t) for t in burst_tokens]} tokens; "
      f"KV budget {kv_tokens} tokens")
lineup.stop()

# %%
burst_table = pd.concat([frame.assign(configuration=name) for name, frame in bursts.items()], ignore_index=True)
results.save("prefix_schedule_burst", burst_table, prof, kv_tokens=kv_tokens, shared_tokens=len(warm_tokens))
burst_table.pivot(index="request", columns="configuration", values=["cached_tokens", "finished"]).loc[burst_names]

# %%
fig, panels = plt.subplots(len(bursts), 1, figsize=(9, 1.1 + 1.3 * len(bursts)), sharex=True)
for ax, (name, frame) in zip(panels, bursts.items(), strict=True):
    rows = np.arange(len(frame))[::-1]
    colors = ["tab:green" if r.startswith("reuse") else "tab:grey" for r in frame.request]
    ax.barh(rows, frame.end_s - frame.start_s, left=frame.start_s, color=colors, height=0.7)
    for y, end, hit, total in zip(rows, frame.end_s, frame.cached_tokens, frame.prompt_tokens, strict=True):
        ax.text(end + 0.05, y, f"{hit}/{total}", va="center", fontsize=7)
    ax.set_yticks(rows, frame.request, fontsize=7)
    ax.set_title(name, fontsize=9, loc="left")
plots.axes("", "time since the burst began (s); bars: from sent to finished, labels: cached / prompt tokens",
           "", ax=panels[-1])
fig.suptitle(plots.label("The burst under a small cache (green: requests reusing the cached prefix)"))
plt.tight_layout()
plt.show()
reuse = burst_table[burst_table.request.str.startswith("reuse")]
reuse.groupby("configuration", sort=False).agg(cached_tokens=("cached_tokens", "sum"),
                                                 prompt_tokens=("prompt_tokens", "sum"),
                                                 last_finished_s=("end_s", "max"))

# %%
# NBVAL_CHECK_OUTPUT
cached = reuse.groupby("configuration").cached_tokens.sum()
print(cached["SGLang, lpm"] >= cached["SGLang, fcfs"])

# %% [markdown]
# Under `fcfs` both engines prefill the fresh prompts first, and their KV evicts the cached prefix,
# the least recently used entry, before the reusing requests are scheduled. Those then prefill the
# prefix again: all of them that are scheduled in the same step, because what a step computes is
# cached only once the step has run; the ones scheduled later find it again. With `lpm`, SGLang
# moves the requests whose prefix is cached to the front of the queue: they reuse it before the
# fresh prompts can evict it, and the burst ends sooner. This is the situation cache-aware
# scheduling is for: a small cache, a queue, and a cached prefix that other work would evict. With
# a cache large enough for both, or no queue to reorder, the two orders cost the same.

# %% [markdown]
# ## Caching on and off
#
# Each engine can turn its prefix cache off with a flag (vLLM `--no-enable-prefix-caching`,
# SGLang `--disable-radix-cache`), but a flag means one more server to start. For the prefill the
# same comparison needs none: the first `off_requests` few-shot requests ran a second time on each
# server, the cache emptied before each one, so each prefilled its whole prompt, as it would with
# the cache off; the engine's own report of zero cached tokens below confirms it. The cached run is
# the few-shot workload above: the same token ids, one request after another.

# %%
off_runs = {"vllm": vllm_cold, "sglang": sglang_cold}
on_runs = {"vllm": vllm_hits, "sglang": sglang_hits}
rows = []
for engine, label in (("vllm", "vLLM"), ("sglang", "SGLang")):
    on = on_runs[engine].query("workload == 'few_shot'").iloc[:off_requests]
    off_requests_run = off_runs[engine]
    rows.append({"engine": label,
                 "TTFT on (s, median of requests 2+)": on.ttft_s.iloc[1:].median(),
                 "TTFT off (s, median of requests 2+)": off_requests_run.ttft_s.iloc[1:].median(),
                 "tokens/s on": on.prompt_tokens.sum() / on.latency_s.sum(),
                 "tokens/s off": off_requests_run.prompt_tokens.sum() / off_requests_run.latency_s.sum(),
                 "cached tokens off": int(off_requests_run.cached_tokens.sum())})
on_off = pd.DataFrame(rows).set_index("engine")
on_off["TTFT ratio off/on"] = (on_off["TTFT off (s, median of requests 2+)"]
                               / on_off["TTFT on (s, median of requests 2+)"])
on_off["throughput ratio on/off"] = on_off["tokens/s on"] / on_off["tokens/s off"]
results.save("prefix_on_off", on_off.reset_index(), prof, workload="few_shot", requests=off_requests,
             kv_tokens=kv_tokens)
on_off.round(2).T

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
for ax, (engine, label) in zip(axes, (("vllm", "vLLM"), ("sglang", "SGLang")), strict=True):
    on = on_runs[engine].query("workload == 'few_shot'").iloc[:off_requests]
    x = np.arange(1, len(on) + 1)
    ax.plot(x, off_runs[engine].ttft_s, marker="s", linestyle="--", color="grey", label=plots.label("cache off"))
    ax.plot(x, on.ttft_s, marker="o", color="tab:green", label=plots.label("cache on"))
    ax.set_xticks(x)
    plots.axes("few-shot requests, one after another", "request", "time to first token (s)", ax=ax)
    ax.set_title(f"{label}: {ax.get_title()}")
    ax.legend(fontsize=8)
axes[0].set_ylim(bottom=0)  # after both panels are drawn, so the shared axis holds every series
axes[1].set_ylabel("")
plt.tight_layout()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print((on_off["TTFT ratio off/on"] > 1).all(), (on_off["throughput ratio on/off"] > 1).all(),
      (on_off["cached tokens off"] == 0).all())

# %% [markdown]
# With the cache emptied every request prefills its whole prompt; with it on, only the first does.
# (Throughput here is prompt tokens per second of request time, the requests sent one after
# another.) Both engines skip most of the prefill's tokens, but they do not save the same share of
# its time. vLLM's CPU attention backend hands only the new tokens' queries to its kernel
# (`v1/attention/backends/cpu_attn.py`). SGLang's `torch_native` backend, the one this profile
# uses on CPU, pads the new queries back to the full sequence and runs attention over all of it
# (`_run_sdpa_forward_extend` in `sglang/srt/layers/attention/torch_native_backend.py`), so a cached
# prefix still costs its share of attention; only the layers' matrix products shrink. SGLang's GPU
# backends do not pad: the Triton backend, for one, computes attention for the new tokens only
# (`forward_extend` in `triton_backend.py`). How much time a cached token saves is a property of
# the attention kernel, not of the cache.

# %% [markdown]
# ## The verdict on the articles' advice
#
# The source articles end with a selection guide. Its second line reads, in the Spanish version,
# "Agentes de IA y Salida JSON Estructurada: Elija SGLang por su alta tasa de reutilización de
# caché Radix" (AI agents and structured JSON output: choose SGLang for its high radix-cache reuse
# rate), and the long comparison adds that SGLang's RadixAttention saves much memory and
# computation when requests share a lot, such as a chat history. Structured output is a matter of
# constrained decoding, not of the cache, and is not measured here. For the cache, the
# measurements of this chapter answer the question, collected in one table:

# %%
def share(frame):
    return frame.cached_tokens.sum() / frame.prompt_tokens.sum()


second_round = {e: share(cycles[(cycles.engine == e) & (cycles["round"] == 2)]) for e in ("vLLM", "SGLang")}
reusers = {c: share(reuse[reuse.configuration == c]) for c in bursts}
verdict = pd.DataFrame({
    "vLLM": [f"{rates.loc[w, 'vLLM']:.0%}" for w in ("agent_tree", "multi_turn", "few_shot")]
    + [f"{second_round['vLLM']:.0%}", f"{reusers['vLLM, fcfs']:.0%}",
       f"{on_off.loc['vLLM', 'TTFT ratio off/on']:.1f}x"],
    "SGLang": [f"{rates.loc[w, 'SGLang']:.0%}" for w in ("agent_tree", "multi_turn", "few_shot")]
    + [f"{second_round['SGLang']:.0%}", f"{reusers['SGLang, fcfs']:.0%} (fcfs), {reusers['SGLang, lpm']:.0%} (lpm)",
       f"{on_off.loc['SGLang', 'TTFT ratio off/on']:.1f}x"],
}, index=["agent tree: hit rate", "multi-turn: hit rate", "few-shot: hit rate",
          "loop that overflows the cache: second-round hit rate", "burst, small cache: reusers' prompt tokens cached",
          "few-shot: time to first token, cache off / on"])
results.save("prefix_verdict", verdict.reset_index(names="measure"), prof)
verdict

# %% [markdown]
# Read the table row by row:
#
# - **Agents and multi-turn chat.** SGLang's tree finds more than vLLM's blocks, because vLLM
#   stops at the last full block of what was cached. The gap is less than one vLLM block per
#   request, so it matters when the new part of each request is short compared with a block:
#   with this CPU build's large blocks and prompts of a few hundred tokens it shows; with the
#   16-token blocks that are vLLM's default it nearly vanishes (the block-size plot, and exercise 1).
#   With a long shared prefix, as in few-shot prompting, both engines reuse almost all of it.
# - **Eviction.** When the working set does not fit, the unit of eviction decides what survives.
#   In the loop, vLLM's tail-first freeing kept the beginnings of documents that SGLang's
#   whole-leaf eviction dropped, so here the block cache found more.
# - **Scheduling.** Under a small cache and a queue, the order of prefills decided more than the
#   granularity: with the default first-come-first-served order both engines evicted the shared
#   prefix in the burst and prefilled it again for every reusing request scheduled in the same
#   step as the first (how many that is varies with the step, so vLLM's and SGLang's fcfs rows
#   differ); SGLang kept it with `lpm`, an option that is off by default and that falls back to
#   first come, first served when the queue is long.
# - **Time.** How much time a cached token saves depends on the attention kernel: on this CPU
#   profile a vLLM hit saved more time than an SGLang hit of the same size.
#
# So "choose SGLang for agents because of its radix cache" overstates the case today: both engines
# cache prefixes by default, and SGLang's extra hits are bounded by one vLLM block per request. The
# differences that can matter more, eviction unit and cache-aware scheduling, depend on whether
# the working set fits the cache, and a deployment can measure that on its own traffic with the
# tools of this chapter.
#
# ## What it means
#
# Prefix caching turns repeated prompt tokens into memory reads. Both engines do it, by default,
# and our two small caches, checked against the engines' own code, predicted every hit the live
# engines reported in this chapter. The numbers behind the paragraphs above:

# %%
gap = both.sglang - both.vllm
print(f"Largest per-request gap SGLang - vLLM: {gap.max()} tokens (vLLM block: {vllm_built['block_size']} tokens); "
      f"mean over the {len(both)} requests: {gap.mean():.0f} tokens.")
print(f"Hit rate, agent tree: vLLM {rates.loc['agent_tree', 'vLLM']:.0%}, "
      f"SGLang {rates.loc['agent_tree', 'SGLang']:.0%}; "
      f"control: vLLM {rates.loc['no_sharing', 'vLLM']:.0%}, SGLang {rates.loc['no_sharing', 'SGLang']:.0%}.")
print(f"Loop over {cycle_documents} documents that overflow a {kv_tokens}-token cache, second round: "
      f"vLLM found {second_round['vLLM']:.0%} of the prompt tokens, SGLang {second_round['SGLang']:.0%}.")
print(f"Burst: the reusing requests found {reusers['SGLang, fcfs']:.0%} of their prompt cached under SGLang's "
      f"fcfs and {reusers['SGLang, lpm']:.0%} under lpm (vLLM, fcfs: {reusers['vLLM, fcfs']:.0%}).")
print(f"Few-shot, time to first token with the cache off / on: vLLM {on_off.loc['vLLM', 'TTFT ratio off/on']:.1f}x, "
      f"SGLang {on_off.loc['SGLang', 'TTFT ratio off/on']:.1f}x; throughput on / off: "
      f"vLLM {on_off.loc['vLLM', 'throughput ratio on/off']:.1f}x, "
      f"SGLang {on_off.loc['SGLang', 'throughput ratio on/off']:.1f}x.")

# %% [markdown]
# ## Where to read the engines' code
#
# - vLLM: `v1/core/kv_cache_utils.py` (block hashes, `get_request_block_hasher`), `v1/core/block_pool.py`
#   (the hash-to-block map, the free queue, eviction when a cached block is reused),
#   `v1/core/kv_cache_manager.py` (`get_computed_blocks`: the lookup and its `num_tokens - 1` cap),
#   `v1/core/single_type_kv_cache_manager.py` (`free`, tail first), `v1/core/sched/scheduler.py`
#   (the counters are recorded when a request is admitted).
# - SGLang: `srt/mem_cache/radix_cache.py` (the classic tree), `srt/mem_cache/unified_radix_cache.py`
#   and `srt/mem_cache/registry.py` (what the server builds), `srt/managers/schedule_batch.py`
#   (`_compute_max_prefix_len`: the same last-token cap), `srt/managers/schedule_policy.py` (the
#   policies and their fallbacks).
#
# ## Exercises
#
# 1. vLLM's default block is 16 tokens (`CacheConfig.DEFAULT_BLOCK_SIZE` in `vllm/config/cache.py`);
#    the CPU platform raises it (`vllm/platforms/cpu.py`), and on a GPU it stays unless the attention
#    backend prefers another size (`update_block_size_for_backend` in `vllm/platforms/interface.py`).
#    Using the token ids of this run and our block cache, how much of the hit-rate gap to SGLang
#    remains on each workload with 16-token blocks?
# 2. What is the smallest KV budget at which the second round of the cycle workload finds as much
#    as it would with an unlimited cache, for each engine's cache?
# 3. In the multi-turn conversation, how many tokens does each turn prefill beyond its own new
#    messages, with SGLang's tree and with vLLM blocks of 16 and of this run's size?
#
# The solutions are in the hidden cells below.

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1: the simulated hit rate at block 16 next to SGLang's measured one (no eviction in these workloads).
gpu = pd.Series({n: sum(predict_hits("block", tokens[n], block_size=16, capacity=10 * kv_tokens))
                 / sum(map(len, tokens[n])) for n in hit_workloads})
gaps = pd.DataFrame({f"gap at block {vllm_built['block_size']} (points)": 100 * (rates.SGLang - rates.vLLM),
                     "gap at block 16 (points)": 100 * (rates.SGLang - gpu)}).round(1)
print(gaps)
print(f"With 16-token blocks the largest gap is {gaps.iloc[:, 1].max():.1f} percentage points "
      f"({gaps.iloc[:, 1].idxmax()}), against {gaps.iloc[:, 0].max():.1f} "
      f"with {vllm_built['block_size']}-token blocks.")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2: grow the budget until the second round finds what an unlimited cache finds.
def smallest_budget(cache, size):
    best = sum(predict_hits(cache, tokens["cycle"], block_size=size, capacity=10 * kv_tokens)[cycle_documents:])
    for capacity in range(size, 10 * kv_tokens, size):
        try:
            got = predict_hits(cache, tokens["cycle"], block_size=size, capacity=capacity)
        except ValueError:  # a prompt does not fit at all
            continue
        if sum(got[cycle_documents:]) == best:
            return capacity
    return None


need = {"vLLM": smallest_budget("block", vllm_built["block_size"]), "SGLang": smallest_budget("radix", 1)}
print(f"The documents hold {sum(map(len, tokens['cycle'][:cycle_documents]))} prompt tokens; the second round "
      f"finds everything it can from {need['vLLM']} tokens of KV with vLLM's blocks and from {need['SGLang']} "
      f"with SGLang's tree (this run's budget: {kv_tokens}).")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3: prefilled tokens minus the tokens the turn adds to the previous prompt.
turns = tokens["multi_turn"]
new = [len(turns[0])] + [len(b) - len(a) for a, b in zip(turns, turns[1:], strict=False)]
extra = pd.DataFrame({
    label: [len(t) - h - n for t, h, n in zip(turns, predict_hits(cache, turns, block_size=size,
                                                                  capacity=10 * kv_tokens), new, strict=True)]
    for label, cache, size in (("SGLang", "radix", 1), ("vLLM, block 16", "block", 16),
                               (f"vLLM, block {vllm_built['block_size']}", "block", vllm_built["block_size"]))},
    index=[f"turn {i + 1}" for i in range(len(turns))])
print(extra)
print(f"After the first turn SGLang prefills {extra.iloc[1:, 0].mean():.0f} extra token(s) per turn on average "
      f"(each turn starts with the whole previous prompt, which is cached; the one-token cap applies to the "
      f"prompt looked up, not to what it reuses), vLLM {extra.iloc[1:, 1].mean():.0f} with 16-token blocks "
      f"(the previous prompt's partial last block) and {extra.iloc[1:, 2].mean():.0f} with "
      f"{vllm_built['block_size']}-token blocks.")
