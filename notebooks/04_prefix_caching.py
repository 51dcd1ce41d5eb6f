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
# A chat turn re-sends the whole conversation; an agent's branches repeat their task; a few-shot
# prompt repeats its examples. Most of each prompt was *prefilled* before: run through the model,
# which keeps every token's attention keys and values, the *KV cache*, so as not to compute them
# again. Attention is causal: a token's keys and values depend only on the tokens before it, so the
# same prefix yields the same KV cache. *Prefix caching* hands it to a later request that starts
# with the same tokens, which then prefills only the rest.
#
# Both engines do it by default, differently. SGLang keeps a radix tree over token ids: a hit can
# end on any token. vLLM caches full KV blocks, found by hashes chained over everything before them:
# a hit is whole blocks.
#
# :::{dropdown} How we know: where the two designs are described
# The source articles file the two engines under two names: "vLLM = PagedAttention, SGLang =
# RadixAttention". Today both engines page their KV cache and both cache prefixes by default. They
# differ in how. SGLang keeps a radix tree over token ids (Zheng et al., "SGLang: Efficient
# Execution of Structured Language Model Programs", NeurIPS 2024, §3): a hit can end on any
# token. vLLM caches full KV blocks, each found by a hash of its tokens chained over everything
# before it (`vllm/v1/core/kv_cache_utils.py`): a hit is a whole number of blocks. This chapter
# builds both caches from scratch, checks them against the engines' own code, and then sends the
# same token ids to both engines to measure what difference remains: in hits, in time to first
# token, under eviction and in scheduling.
# :::

# %% tags=["parameters"]
profile = "auto"
seed = 0
referee_seeds = 8             # seeded operation streams each referee replays (the tests replay 24)
kv_tokens = None              # KV budget of every server, in tokens; None: one full-length sequence and an eighth
workload_sizes = {            # options of each workload generator (servelab/measure/prefix_cache/workloads.py)
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
burst_stagger_s = 0.2         # vLLM: the burst's requests are queued this far apart while the engine is paused
few_shot_pairs = 3            # caching on and off: few-shot pairs (cache emptied, one cold request, one cached)...
rounds = 3                    # ... and the rounds they (and the salted bursts) run in, interleaved
salted_requests = None        # caching on and off under load: few-shot requests sent at once, without and with a
                              # salt; None: prefix_salt.burst_size (2 on the cpu profile, up to 16 on a GPU)
salted_output_tokens = 4      # ... each generating exactly this many tokens
fork_tree = {"branches": 2, "sub_branches": 2}  # the agent tree run with SGLang's frontend fork
fork_max_tokens = 8           # tokens each of its generations produces at most (greedy)

# %%
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.book.diagrams_radix import draw_radix_tree, tree_frame
from servelab.book.i18n import N_
from servelab.sim.prefix_cache import BlockHashCache, RadixTree

prof = banner.start(profile)

# %% [markdown]
# ## Two prefix caches from scratch
#
# ### The radix tree
#
# A radix tree stores token sequences by shared prefix: each edge carries a run of tokens, each path
# from the root spells a cached sequence. A new prompt walks down as far as its tokens agree: that
# walk is the hit. A walk ending inside an edge splits it, so the shared part becomes its own node;
# once prefilled, the prompt's new tokens hang below as a leaf.
#
# :::{dropdown} How we know: what our tree mirrors, and what it leaves out
# The tree in `servelab/sim/prefix_cache/radix_tree.py` mirrors SGLang's `RadixCache`
# (`sglang/srt/mem_cache/radix_cache.py`) at one token per page.
#
# What the tree leaves out: pages larger than one token (SGLang's `page_size`; the predictions
# below cut hits and insertions to whole pages when a server uses larger ones), eviction policies
# other than least recently used, and wall-clock time (a counter orders the accesses, as
# `time.monotonic()` does in SGLang). It holds token ids, not the KV values themselves.
# :::
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
fig, panels = plt.subplots(2, 2, figsize=(11, 11))
for i, (state, ax) in enumerate(zip(states, panels.flat, strict=True)):
    draw_radix_tree(state, title=f"{plots.label('after request')} {i + 1}", text=as_text, ax=ax, legend=i == 1)
plt.tight_layout()
plt.show()

# %% [markdown]
# Request 2 matches seven tokens: the first edge splits after "of". Request 3 extends request 1 with
# a leaf below "France ?". Request 4 shares only "SYS be brief . USER": the top edge splits again.
# Each box shows a node's tokens, length, lock count and logical time last touched.
#
# When memory runs short the tree evicts *leaves*, least recently used first; a parent left a leaf
# can go next. A running request locks its path (lock count above zero), and a locked node is never
# evicted. Below, a request continuing request 3 runs, and the engine needs room for three tokens.

# %%
running = tree.match_prefix(toy[2] + [vocab["?"]]).node
tree.inc_lock_ref(running)
fig, (before, after) = plt.subplots(1, 2, figsize=(11, 5))
draw_radix_tree(tree, title="a request holds the France branch", text=as_text, ax=before, legend=False)
freed = tree.evict(3)
draw_radix_tree(tree, title=f"{plots.label('after evicting 3 tokens')} ({freed} {plots.label('freed')})",
                text=as_text, ax=after)
tree.dec_lock_ref(running)
plt.tight_layout()
plt.show()

# %% [markdown]
# The least recently used unlocked leaf, "Spain ?", held two tokens; eviction frees whole leaves, so
# it takes the next oldest too, freeing more than asked. The locked branch stayed.

# %% [markdown]
# The chapter starts three servers, all with the same small *KV budget*: how many tokens of KV their
# cache can hold.
#
# :::{dropdown} How we know: how the servers are started
# Starting an engine takes tens of seconds on a CPU, so the chapter starts as few servers as it
# can: one vLLM, one SGLang, and one more SGLang with the cache-aware scheduling policy `lpm`,
# because the policy is a flag fixed at start. All three get the same small KV budget. The two
# SGLang servers also get prefill-step budgets at least as large as that KV budget
# (`chunked_prefill_size` and `max_prefill_tokens`, set by `one_step_prefill` in
# `servelab/measure/prefix_cache/burst.py`), so that one prefill step can take every set of
# requests that fits the cache at once; SGLang's
# default `chunked_prefill_size` grows with the device's memory (`handle_gpu_memory_settings` in
# `srt/arg_groups/memory_hook.py`), and the section on scheduling needs the same step on every
# machine. Both engines report the cached prompt tokens of every request: servelab always starts
# vLLM with `--enable-prompt-tokens-details`, and `cache_options` adds SGLang's
# `--enable-cache-report`. It also turns on vLLM's development endpoints (`VLLM_SERVER_DEV_MODE`),
# which let us empty its prefix cache between experiments and pause its scheduler; SGLang serves
# both without a flag. Where every server's memory is bounded (the cpu profile) the three start
# now, side by side in the background, while we build the block cache; on a GPU, where each server
# claims most of the memory, each starts when it is needed and the others stop
# (`servelab/measure/lineup.py`). A script that runs SGLang's scheduling code without a server, in
# the section on scheduling, starts now too: importing SGLang takes seconds, and it waits for its
# input once it has.
# :::

# %%
from servelab.measure.chapter_servers import c04
from servelab.measure.kv_events import Recorder
from servelab.measure.lineup import Lineup, side_by_side
from servelab.measure.prefix_cache.policies import start_policy_orders

# every server this chapter starts (`python -m servelab plan` lists them): the budget is the parameter, else one
# full-length sequence and an eighth (vLLM needs one full-length sequence plus its null block); vLLM's server
# has an endpoint that empties its cache, SGLang's report cached tokens and prefill a burst in one step
servers = c04.servers(prof, kv_tokens=kv_tokens)
kv_tokens = servers["vllm"].options["kv_cache_tokens"]
# vLLM and SGLang publish their KV-cache events to a recorder of ours, on 127.0.0.1, started before them
recorders = {name: Recorder(name, prof).start() for name in ("vllm", "sglang")}
lineup = Lineup({name: launch.server(prof, **(recorders[name].options() if name in recorders else {}))
                 for name, launch in servers.items()}, together=side_by_side(prof), background=True)
policy_script = start_policy_orders(prof)

# %% [markdown]
# ### The hashed block cache
#
# vLLM stores KV in fixed-size blocks (the previous chapter) and caches a block once it is full. A
# block's key hashes its parent's key with its own token ids, so equal keys mean equal *prefixes*. A
# prompt looks up its full blocks in order until a miss; the hit stops one token short of the
# prompt, rounded down to whole blocks.
#
# :::{dropdown} How we know: the lookup in vLLM, and what our block cache leaves out
# A prompt that is entirely cached still recomputes its last block: the lookup and its cap are
# `get_computed_blocks` in `vllm/v1/core/kv_cache_manager.py`.
# `servelab/sim/prefix_cache/block_hash_cache.py` mirrors it, free queue and eviction order
# included. What it leaves out: a request's prompt is admitted whole in one step (no chunked
# prefill), a request that does not fit is refused instead of waiting in the queue, and nothing is
# preempted.
# :::
#
# The same four requests, with blocks of four tokens:

# %%
blocks = BlockHashCache(num_blocks=16, block_size=4)
block_hits = []
for i, tokens in enumerate(toy):
    block_hits.append(blocks.allocate(f"toy-{i}", tokens).hit_tokens)
    blocks.free(f"toy-{i}")
pd.DataFrame({"prompt tokens": [len(t) for t in toy], "radix tree hit": radix_hits,
              "block cache hit (blocks of 4)": block_hits}, index=[f"request {i + 1}" for i in range(len(toy))])

# %% [markdown]
# The block cache finds whole blocks only: request 2 shares seven tokens but gets four, and request
# 3, whose first nine tokens were all prompt 1, gets eight.
#
# ## The referees: the engines' own code
#
# A *referee* replays seeded streams of lookups, insertions, locks and evictions on our cache and on
# the engine's own code, and compares every result.
#
# :::{dropdown} How we know: the engine code each referee drives
# Both caches are only worth measuring with if they behave exactly like the engines. Each referee
# replays seeded streams of operations, with shared prefixes, branches, locks, refused admissions
# and evictions under a small pool, on our cache and on the engine's own code, in the engine's
# Python environment, without a model or a server:
#
# - SGLang's `RadixCache.create_simulated` (`sglang/srt/mem_cache/radix_cache.py`), driven by
#   `servelab/engines/engine_side/sgl_radix_referee.py`: match lengths, insertions, lock deltas,
#   evictions, and the cached sequences (every leaf's path) after each eviction and before the
#   final cleanup that empties the tree.
# - vLLM's `KVCacheManager` (`vllm/v1/core/kv_cache_manager.py`, with its `BlockPool` and block
#   hasher), driven by `servelab/engines/engine_side/vllm_prefix_referee.py` in the order vLLM's
#   scheduler calls it: hits, block tables, the free queue after every operation, and the
#   prefix-cache counters.
#
# One caveat on SGLang: the referee checks the classic `RadixCache`, the one `create_simulated`
# builds. The SGLang 0.5.23 *server* builds a `UnifiedRadixCache` (`mem_cache/registry.py`),
# whose tree core is chosen by `SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND`, `"rust"` by default, with
# fallbacks to a Python core (`mem_cache/unified_cache/tree_core_registry.py`). Whichever core the
# server runs, the live measurements below check our tree against it too.
# :::

# %%
from servelab.measure.prefix_cache.referees import compare_with_sglang, compare_with_vllm

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
    "hit tokens (ours, compared)": [radix_referee["matched tokens"].sum(), block_referee["hit tokens"].sum()],
    "evicted under pressure (ours)": [f"{radix_referee['evicted tokens'].sum()} tokens",
                                      f"{block_referee['evicted blocks'].sum()} blocks"],
    "cached sequences compared": [radix_referee["snapshot sequences"].sum(), "-"],
    "refused admissions": ["-", block_referee.refused.sum()],
    "seeds where everything agrees": [radix_referee[radix_agree].all(axis=1).sum(),
                                      block_referee[block_agree].all(axis=1).sum()],
})

# %%
# NBVAL_CHECK_OUTPUT
print(radix_referee[radix_agree].all().all(), block_referee[block_agree].all().all(),
      radix_referee["snapshot sequences"].sum() > 0, radix_referee["evicted tokens"].sum() > 0)

# %% [markdown]
# On every seed, our caches and the engines' code agreed.
#
# :::{dropdown} How we know: what the referee check compares
# The hits are compared one by one (vLLM's through its counters too); the evictions are counted on
# our side, and SGLang's agree with them op by op (the `evictions agree` column), while vLLM's are
# checked through the free queue and the block tables after every operation. The evicted tokens
# leave out the final cleanup, and the cached sequences compared are those the snapshots held: the
# check above fails if the snapshots compared nothing.
# :::
#
# ## The workloads, saved
#
# Seeded chat workloads, shaped like real programs: a conversation (**multi_turn**), a long few-shot
# system prompt (**few_shot**), an agent's task and branches (**agent_tree**), documents from a
# shared pool (**retrieval**), a control sharing only the *chat template*, the fixed tokens around
# every message (**no_sharing**), a short prompt sent twice (**short_repeat**), and long documents
# read in turn, twice, overflowing the KV budget (**cycle**).
#
# :::{dropdown} How we know: the workloads in detail
# Five workloads are seeded chat requests (`servelab/measure/prefix_cache/workloads.py`), in the shapes
# real programs produce:
#
# - **multi_turn**: a conversation; each turn re-sends the previous turn plus two messages.
# - **few_shot**: one long system prompt with worked examples before every question.
# - **agent_tree**: an agent that forks, in the shape SGLang's frontend `fork` gives it
#   (`StreamExecutor.fork` in `sglang/lang/interpreter.py`): the shared prefix is sent first
#   (committed), then the branches continue it. Here the requests are sent one after another (the
#   root, two branches, two steps under each), so that every hit can be predicted exactly, request
#   by request: this is the predictable version. The frontend itself runs the branches in
#   parallel; the section on the agent tree through `fork`, after the hit tables, runs a tree of
#   the same shape through SGLang's real frontend and replays it on vLLM.
# - **retrieval**: each request quotes one to three documents from a shared pool, then asks.
# - **no_sharing**: the control, every prompt different from its first word.
#
# Two more test granularity and eviction: **short_repeat** sends one short prompt
# (`short_prompt_words` words) twice, and **cycle** reads `cycle_documents` long documents in
# turn, twice, so that together they do not fit the KV budget. The requests are saved as JSONL beside the results, with
# two more sets used further below: a longer loop for a simulation, and a burst for scheduling.
# :::

# %%
from servelab.measure.prefix_cache.scenarios import burst_requests, cycle_requests, repeat_requests
from servelab.measure.prefix_cache.workloads import make, save_jsonl

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
# :::{dropdown} How we know: why one tokenizer, and how
# Both engines must see exactly the same token ids, or a difference in hits could come from a
# difference in tokenization. So vLLM turns each request into token ids once, with the model's
# chat template (`/tokenize` with `messages` and `add_generation_prompt`), and both engines then
# receive those ids as completion prompts. Each request asks for one output token: its time to
# first token is its prefill, and only its prompt is cached.
# :::

# %%
from servelab.measure.kv_memory.capacity import engine_capacity, server_info
from servelab.measure.prefix_cache.live import chat_token_ids

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
# Both engines get the same token ids, made once by vLLM with the chat template. Each workload
# starts from an empty cache and sends its requests one by one, each asking for one output token, so
# its time to first token is its prefill. Beside the engine's report of each request's cached tokens
# stands our prediction; a workload's *hit rate* is cached over prompt tokens.
#
# :::{dropdown} How we know: the counters, the replay, and what else each server runs
# Each workload starts from an empty prefix cache and sends its requests one after another. For
# every request we read the engine's own report of its cached prompt tokens, and beside it what
# our cache predicts for the same token ids with the engine's block size and capacity. The engines'
# counters add up the hits of each workload: vLLM's `vllm:prefix_cache_queries` and
# `vllm:prefix_cache_hits`, SGLang's `sglang:prompt_tokens` and `sglang:cached_tokens` (its
# `sglang:cache_hit_rate` is a gauge of the latest batch only, so it is not used here). Both count
# tokens, so their ratio is the workload's hit rate.
#
# The predictions replay each workload one request at a time, each finished before the next, as
# the requests are sent here; the whole prompt is cached, and no output token (every request asks
# for one). The chat workloads' assistant turns are written in advance, so caching what a model
# generated is not exercised in this chapter.
#
# Each server runs the **cycle** workload in the same go (it is read in the section on eviction),
# and then `rounds` rounds of `few_shot_pairs` few-shot pairs: the cache emptied, one request that
# prefills its whole prompt, as with the cache turned off, and the next, which finds the shared
# prefix cached. Last come `rounds` rounds of a burst of `salted_requests` few-shot requests sent
# at once: as they are, and with a cache salt of their own each (both are explained in the section
# on caching on and off).
# :::
#
# ### vLLM
#
# vLLM's blocks hold 16 tokens by default on GPUs and 128 on its CPU build (this server's size is
# printed below). vLLM keeps one block of its pool back (its *null block*, a
# placeholder), so requests can use one block fewer than it built: the "usable" tokens.

# %%
from servelab.engines.metrics import scrape
from servelab.measure.kv_events import record_eviction
from servelab.measure.prefix_cache import salt as prefix_salt
from servelab.measure.prefix_cache.live import measured_hits, on_off_pairs, set_apart

hit_workloads = [name for name in tokens if name != "cycle"]
vllm_events, vllm_referee = record_eviction(vllm, recorders["vllm"])  # shown in the section on eviction
vllm_built = engine_capacity(vllm)
vllm_config = scrape(vllm.url).labels("vllm:cache_config_info")
print(f"vLLM {vllm.version()}: {vllm_built['blocks']} blocks of {vllm_built['block_size']} tokens "
      f"({vllm_built['usable']} usable), enable_prefix_caching={vllm_config['enable_prefix_caching']}")
vllm_hits, vllm_rates = measured_hits(vllm, {n: tokens[n] for n in [*hit_workloads, "cycle"]}, ids)
vllm_pairs = on_off_pairs(vllm, tokens["few_shot"], ids["few_shot"], pairs=few_shot_pairs, rounds=rounds)
salted_requests = salted_requests or prefix_salt.burst_size(
    prof, kv_tokens, max(map(len, tokens["few_shot"])) + salted_output_tokens)
salted = make("few_shot", seed, **{**workload_sizes["few_shot"], "requests": salted_requests + 1})
vllm_salted = prefix_salt.on_off(vllm, salted[0].messages, [r.messages for r in salted[1:]],
                                 output_tokens=salted_output_tokens, rounds=rounds)
vllm_cycle, vllm_hits, vllm_rates = set_apart("cycle", vllm_hits, vllm_rates)
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
# Every hit is whole blocks, and our block cache predicts each one.
#
# ### SGLang

# %%
sglang = lineup.take("sglang")
# shown in the section on eviction; the same token ids as vLLM's, sized in vLLM's blocks
sglang_events, sglang_referee = record_eviction(sglang, recorders["sglang"], block=vllm_built["block_size"])
sglang_built = engine_capacity(sglang)
info = server_info(sglang)
print(f"SGLang {sglang.version()}: {sglang_built['tokens']} KV tokens, page_size={sglang_built['block_size']}, "
      f"disable_radix_cache={info['disable_radix_cache']}, schedule_policy={info['schedule_policy']}, "
      f"attention_backend={info['attention_backend']}, chunked_prefill_size={info['chunked_prefill_size']}, "
      f"max_prefill_tokens={info['max_prefill_tokens']}")
sglang_hits, sglang_rates = measured_hits(sglang, {n: tokens[n] for n in [*hit_workloads, "cycle"]}, ids)
sglang_pairs = on_off_pairs(sglang, tokens["few_shot"], ids["few_shot"], pairs=few_shot_pairs, rounds=rounds)
sglang_salted = prefix_salt.on_off(sglang, salted[0].messages, [r.messages for r in salted[1:]],
                                   output_tokens=salted_output_tokens, rounds=rounds)
sglang_cycle, sglang_hits, sglang_rates = set_apart("cycle", sglang_hits, sglang_rates)
results.save("prefix_hits_sglang", sglang_hits, prof, kv_tokens=kv_tokens)
results.save("prefix_hit_rates_sglang", sglang_rates, prof, kv_tokens=kv_tokens)
sglang_hits[["workload", "request", "prompt_tokens", "cached_tokens", "predicted", "ttft_s"]]

# %%
# NBVAL_CHECK_OUTPUT
per_workload = sglang_hits.groupby("workload", sort=False).cached_tokens.sum()
print((sglang_hits.cached_tokens == sglang_hits.predicted).all(),
      (per_workload.values == sglang_rates.set_index("workload").loc[per_workload.index, "hits"].values).all())

# %% [markdown]
# Our radix tree predicts every hit of the SGLang server too. SGLang stores KV in *pages* (size
# printed above): a hit ends on any token with one-token pages, on a page boundary with larger ones.
#
# :::{dropdown} How we know: which tree the server runs, and its page size
# Our radix tree predicts every hit of the SGLang server too, although the server runs a
# different implementation of the tree than the one the referee checked. The prediction uses the
# server's page size, printed above: with pages of one token a hit ends on any token; a larger
# page size (some GPU attention backends choose one) cuts hits to whole pages.
# :::
#
# ### Side by side

# %%
rates = pd.DataFrame({"vLLM": vllm_rates.set_index("workload").hit_rate,
                      "SGLang": sglang_rates.set_index("workload").hit_rate})
ax = (100 * rates).plot.bar(figsize=(8, 4), rot=0)
plots.axes("Prefix cache hit rate from each engine's counters", "workload", "cached / prompt tokens (%)", ax=ax)
for bars in ax.containers:  # every bar's value, so that a zero shows too
    ax.bar_label(bars, fmt="%.0f", fontsize=7)
ax.legend([plots.label("vLLM"), plots.label("SGLang")])
plt.show()
(100 * rates).round(1)

# %% [markdown]
# Both engines reuse the few-shot system prompt, vLLM up to its last full block. In the multi-turn
# chat SGLang reuses each whole previous prompt, vLLM up to its last full block. In the control
# SGLang finds the chat-template tokens, vLLM only whole blocks of them (counted below). Request by
# request:

# %%
both = vllm_hits[["workload", "request", "prompt_tokens"]].assign(
    vllm=vllm_hits.cached_tokens.values, sglang=sglang_hits.cached_tokens.values)
both["difference"] = both.sglang - both.vllm
block = vllm_built["block_size"]
template = both[both.workload == "no_sharing"].sglang.max()
print(f"vLLM block: {block} tokens; the control shares {template} chat-template tokens "
      f"({'less than' if template < block else 'at least'} one block); the short prompt has "
      f"{both[both.workload == 'short_repeat'].prompt_tokens.iloc[0]} tokens.")
both[both.workload.isin(["multi_turn", "short_repeat", "no_sharing"])]

# %%
# NBVAL_CHECK_OUTPUT
repeat = both[both.workload == "short_repeat"].iloc[-1]
page = sglang_built["block_size"]
aligned = block % page == 0  # SGLang's pages tile vLLM's blocks (page size 1 on the cpu profile)
print(not aligned or (both.sglang >= both.vllm).all(), not aligned or (both.sglang - both.vllm < block).all(),
      repeat.sglang == (repeat.prompt_tokens - 1) // sglang_built["block_size"] * sglang_built["block_size"],
      repeat.vllm == (repeat.prompt_tokens - 1) // block * block)

# %% [markdown]
# Without eviction, and with vLLM's block a whole number of SGLang's pages, SGLang's hit is never
# shorter than vLLM's, and longer by under one vLLM block. The extreme: a prompt shorter than a block, sent
# twice; SGLang reuses all but its last token (in whole pages), vLLM nothing.
#
# :::{dropdown} How we know: what the granularity checks test
# Without eviction, and with SGLang's pages tiling vLLM's blocks, SGLang's hit is never shorter
# than vLLM's, and the difference is less than one of vLLM's blocks per request (the first two
# checks). A prompt sent twice is the extreme case: SGLang reuses all but its last token (in whole
# pages, one token each unless the server's page size is larger), vLLM rounds that down to whole
# blocks, which for a prompt shorter than a block is nothing.
# :::

# %% [markdown]
# ### An agent tree through SGLang's frontend `fork`
#
# :::{dropdown} How we know: how the tree runs through `fork` and is replayed on vLLM
# An aside you may skip: the same agent tree through SGLang's real frontend, `fork`, branches in
# parallel. The dropdowns say how it runs and what its table shows.
#
# The **agent_tree** workload above imitates the shape of `fork` and sends its requests one after
# another. Here a tree of the same shape runs through SGLang's real frontend language, in SGLang's
# Python environment, against the SGLang server above
# (`servelab/engines/engine_side/sgl_agent_tree.py`): a system prompt and a task, a generated plan,
# a `fork` into branches that each generate a step, and a `fork` of every branch into sub-branches
# that each generate a result (`fork_tree`), greedy, at most `fork_max_tokens` tokens per
# generation. The frontend runs every branch in a thread of its own, so the branches run in
# parallel, as a real agent's would. A fork commits only when it has more than one branch
# (`size > 1` in `StreamExecutor.fork`), so `fork_tree` asks for at least two of each. Before it
# forks a state that holds text, `fork` sends that text as a request that generates nothing, so that the
# branches find it cached (`StreamExecutor.fork` in `sglang/lang/interpreter.py`,
# `commit_lazy_operations` in `sglang/lang/backend/runtime_endpoint.py`); the table calls these
# requests the fork's commit. `fork` looks for text before it waits for the state's worker thread:
# if the thread has written any, the commit is queued behind the operations still pending and sends
# all of the state's text, but a fork of a state whose thread has written no text yet sends no
# commit. The program reads its plan before it forks, which waits for it.
#
# Every `/generate` request the frontend sends is recorded with its text, its answer, and when it
# was sent and answered (the recorder of chapter 00). Our radix tree replays them on SGLang's own
# token ids, as in chapter 00, but from each request's own times: a request finds at least what had
# been answered before it was sent (`low`), and at most that plus every request in flight with it,
# sent before or after it, generated tokens included (`high`); which of the requests in flight
# together reached the tree first is up to the scheduler, and a sibling sent later can be scheduled
# first (vLLM caches a request's full blocks when it schedules them). Then vLLM receives the same
# token ids in the same shape: each request waits until the requests that SGLang had answered
# before it was sent are answered, so requests in flight together on SGLang are in flight together
# on vLLM. Each asks for one token, so only prompts are cached, and our block cache predicts the
# same kind of range. The column `parent prefix` is what a branch shares with the commit of the
# fork it came from, in whole SGLang pages.
# :::

# %%
from servelab.measure.prefix_cache import agent_fork
from servelab.measure.prefix_cache.workloads import agent_fork_texts

fork_run = agent_fork.run_on_sglang(sglang, agent_fork_texts(seed, **fork_tree), max_tokens=fork_max_tokens)
fork_sglang = agent_fork.sglang_table(fork_run, page_size=sglang_built["block_size"], capacity=sglang_built["usable"],
                                      overlap=not info["disable_overlap_schedule"], **fork_tree)
fork_vllm, fork_vllm_counted = agent_fork.replay_on_vllm(lineup.take("vllm"), fork_run, capacity=vllm_built["usable"],
                                                         block_size=vllm_built["block_size"])
fork_table = fork_sglang[["request", "group", "prompt tokens", "generated", "finish", "parent prefix"]].assign(**{
    "SGLang cached": fork_sglang.reported, "SGLang low": fork_sglang.low, "SGLang high": fork_sglang.high,
    "vLLM cached": fork_vllm.cached_tokens, "vLLM low": fork_vllm.low, "vLLM high": fork_vllm.high,
    "vLLM same ids": fork_vllm["same ids"]})
fork_rates = {"SGLang": fork_run.counted["hits"] / fork_run.counted["queries"],
              "vLLM": fork_vllm_counted["hits"] / fork_vllm_counted["queries"]}
saved = results.save("prefix_agent_fork", fork_table, prof, sglang_counters=fork_run.counted,
                     vllm_counters=fork_vllm_counted, max_tokens=fork_max_tokens, **fork_tree)
agent_fork.save_jsonl(fork_run, saved.with_suffix(".jsonl"))
print(f"Hit rate from the counters over the tree: SGLang {fork_rates['SGLang']:.0%}, vLLM {fork_rates['vLLM']:.0%} "
      f"(vLLM block: {vllm_built['block_size']} tokens, SGLang page: {sglang_built['block_size']}); requests in "
      f"flight together share a group number. The plan, as generated: {fork_run.outputs['plan']!r}")
fork_table

# %%
# NBVAL_CHECK_OUTPUT
def within(engine):
    return ((fork_table[f"{engine} cached"] >= fork_table[f"{engine} low"])
            & (fork_table[f"{engine} cached"] <= fork_table[f"{engine} high"])).all()


branch_rows = fork_table[fork_table["parent prefix"] > 0]
print(within("SGLang"), within("vLLM"),
      fork_table.request.str.endswith("(commit)").sum() == 1 + fork_tree["branches"],
      len(branch_rows) == fork_tree["branches"] * (1 + fork_tree["sub_branches"]),
      (branch_rows["SGLang cached"] >= branch_rows["parent prefix"]).all(),
      fork_table.group.nunique() < len(fork_table))

# %% [markdown]
# :::{dropdown} How we know: what the fork checks test
# Every report falls inside our range, on both engines (the first two checks). The frontend sent
# a commit at each fork, the root's and every branch's (the third), and every branch and
# sub-branch found the whole prefix its fork had committed on SGLang, even while its siblings ran
# beside it (the fifth); the last check confirms that some requests were in flight together. A
# commit repeats the text of the state it forks, so it finds the prompt of the request before it and
# the tokens that request generated: all of them, or all but the last, which was returned but never
# fed back, depending on how the request finished (chapter 00 explains when; the `generated` column
# counts them, the `finish` column says how each request finished). vLLM, with one output token
# per request, caches prompts only, and in whole blocks: the hit rates printed above compare what
# the two caches found in the same tree. The replay simplifies here: a real vLLM agent would
# generate its plan and steps and cache the full blocks of those generated tokens too, so part of
# the gap between the two rates comes from the replay's one output token, not from the block size.
# :::

# %% [markdown]
# ### What the block size does
#
# The block size is vLLM's knob for this granularity (`--block-size`). Our block cache predicts the
# hit rate of the same token ids at other sizes; SGLang's one-token pages are the limit on the left.

# %%
from servelab.measure.prefix_cache.analysis import block_size_sweep, eviction_sweep, hit_rate, other_block_size

sizes = sorted({1, 16, 32, 64, 128, vllm_built["block_size"]})
sweep = block_size_sweep({name: tokens[name] for name in hit_workloads}, sizes, capacity=10 * kv_tokens)
results.save("prefix_block_size_sweep", sweep, prof)
ax = plots.axes("Hit rate against block size (simulated on the engines' token ids)",
                "block size (tokens; 1 = SGLang's radix tree)", "cached / prompt tokens (%)")
# points only: nothing was computed between two block sizes
for (name, rows), marker in zip(sweep.groupby("workload", sort=False), "osD^vP*X", strict=False):
    ax.plot(rows["block size"], 100 * rows["hit rate"], marker=marker, linestyle="none", label=name)
ax.set_xscale("log", base=2)
ax.set_xticks(sizes, [str(size) for size in sizes])
ax.axvline(vllm_built["block_size"], color="grey", linestyle=":", label=plots.label("this vLLM's block size"))
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
plt.show()

# %% [markdown]
# The longer the shared prefix compared with a block, the less the block size matters: few-shot
# loses at most one block, the control and the short repeat everything once a block outgrows what
# they share.
#
# :::{dropdown} How we know: how, and why, this curve is simulated
# The simulation replays each workload one request after another in a cache ten times this run's
# budget, so nothing is evicted.
#
# Why this curve is simulated and not measured: the block size is fixed when vLLM starts, and every
# further vLLM server costs this chapter tens of seconds of its time budget. The CPU attention
# backend also accepts only some block sizes (the previous chapter). The live test
# `test_smaller_vllm_blocks_find_more_and_token_granularity_the_most` in
# `tests/test_measure_prefix_caching.py` starts vLLM with 32-token blocks and checks, request by
# request, that our block cache predicts every hit it reports, and that it finds more than the
# default size and no more than SGLang; its results are not saved by this chapter.
# :::
#
# ## Eviction under a small cache
#
# A full cache evicts what was least recently used, in each engine's unit: SGLang whole leaves of
# its tree, vLLM blocks, which a finished request gives back tail first. Both
# engines can publish every block or page they store and evict. A recorder of ours listened while
# each served five requests: a document A, A with a question, A's blocks again, a document B that does
# not fit beside A, then A again. The events name blocks by hash, so the picture draws our caches
# replayed on the same tokens. Drag the slider: vLLM's pool left, SGLang's tree right (nodes named
# by request and token positions: r1 1024–1150 is request 1's tokens 1024 to 1150).
#
# :::{dropdown} How we know: the recording, and the referee behind the picture
# The servers were started with `--kv-events-config`, which makes each engine publish batches of
# `BlockStored`, `BlockRemoved` and `AllBlocksCleared` events over ZeroMQ to an address we give. The
# address is a port on 127.0.0.1 where our recorder listens (`servelab/engines/engine_side/kv_event_recorder.py`,
# run in each engine's own venv): with a concrete host each engine's publisher connects to it, so the
# servers bind nothing more. The recorder decodes every batch with the engine's own classes
# (`KVEventBatch` in `vllm/distributed/kv_events.py` and in `sglang/srt/disaggregation/kv_events.py`)
# and writes it with the time it arrived; the requests are marked with their send and finish times
# (`servelab/measure/kv_events/record.py`).
#
# What each engine publishes, read in the installed sources and seen in the traces: vLLM one stored
# block per block that becomes full (`cache_full_blocks` in `vllm/v1/core/block_pool.py`), and a removed
# one each time a cached block is taken for a new request (`_maybe_evict_cached_block`); a recomputed
# last block is stored again under the same hash. SGLang one hash per page (one token on the CPU build),
# runs of them merged into one event, when a request's prompt enters the tree and when a leaf is
# evicted (`sglang/srt/mem_cache/events.py`); its CPU server's tree core is compiled
# (`RustUnifiedTreeCore`), so the trace is what shows that it follows the Python trees' rules.
#
# The events name blocks by hash, not by position, and the two engines hash differently. So the picture
# draws our own caches (`servelab/sim/prefix_cache/`) replayed on the same token ids, with each
# engine's events beside them, and a referee (`servelab/measure/kv_events/replay.py`) compares, request
# by request, what the engine stored and removed with what our cache did, each unit named by its
# content. The check below prints True only when every request agrees and no event inside the window
# is missing, extra or out of place; the table under the figure lists each request, and what the referee cannot see.
# :::

# %%
from servelab.book.kv_event_recording import print_referees, save_and_draw

save_and_draw("kv_events", {"vllm": (vllm_events, vllm_referee), "sglang": (sglang_events, sglang_referee)}, prof,
              plots.label("The engines' own KV-cache events, one request at a time"), kv_tokens=kv_tokens)

# %% tags=["hide-output"]
print_referees(vllm_referee, sglang_referee)

# %%
# NBVAL_CHECK_OUTPUT
evicted = {r.engine: r.table.set_index("request").engine_removed for r in (vllm_referee, sglang_referee)}
kept = {r.engine: r.table.set_index("request").engine_hit for r in (vllm_referee, sglang_referee)}
print(vllm_referee.agree, sglang_referee.agree, evicted["vllm"]["3"] > 0, evicted["sglang"]["3"] > 0,
      kept["vllm"]["4"] > 0, kept["sglang"]["4"] > 0)

# %% [markdown]
# Document B evicted on both engines: vLLM A's last block and the copy request 2 recomputed,
# SGLang its least recently used leaves; both kept A's beginning, which request 1 had split off as
# a node of its own. In the **cycle** below, each document is one leaf, and goes whole.
#
# :::{dropdown} How we know: the eviction order in vLLM's code
# Every server in this chapter has the same small KV budget. The **cycle** workload reads
# `cycle_documents` documents in turn, twice; together they need more KV than the budget holds, so
# each new document must evict something. Both engines evict the least recently used entry, but
# not the same unit: SGLang frees whole leaves of its tree (a leaf here is an entire document),
# vLLM frees blocks, and a finished request puts its blocks in the free queue tail first, so the
# end of a document goes before its beginning (`free` in `vllm/v1/core/single_type_kv_cache_manager.py`).
# Both servers ran the loop above, after the other workloads, from an empty cache.
# :::

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
    for xi, height, hit, total in zip(x, rows.ttft_s, rows.cached_tokens, rows.prompt_tokens, strict=True):
        ax.annotate(f"{hit / total:.0%}", (xi, height), xytext=(0, 2), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8)
rounds_docs = [request.split("-")[1:] for request in ids["cycle"]]
ax.set_xticks(np.arange(len(tokens["cycle"])),
              [f"{plots.label('round')} {int(r) + 1}\n{plots.label('doc')} {int(d) + 1}" for r, d in rounds_docs])
plots.axes("Two rounds over documents that overflow the cache", "request; above the bars: share of the prompt "
           "found cached", "time to first token (s)", ax=ax)
ax.legend(fontsize=8, loc="upper center", ncols=2, bbox_to_anchor=(0.5, 1.0))
ax.margins(y=0.3)
plt.show()

# %%
cost = cycles.groupby(["engine", "round"], sort=False).agg(cached=("cached_tokens", "sum"),
                                                          prompt=("prompt_tokens", "sum")).unstack("round")
cost = pd.DataFrame({"second-round hit rate": cost["cached", 2] / cost["prompt", 2]})
results.save("prefix_eviction_cost", cost.reset_index(), prof, kv_tokens=kv_tokens)
for engine, row in cost.iterrows():
    print(f"{engine}: the second round found {row['second-round hit rate']:.0%} of its prompt tokens cached.")

# %%
# NBVAL_CHECK_OUTPUT
print((cycles.cached_tokens == cycles.predicted).all(),
      cost.loc["vLLM", "second-round hit rate"] > cost.loc["SGLang", "second-round hit rate"])

# %% [markdown]
# Least recently used is the worst order for a loop that does not fit: each document is evicted just
# before it is needed again. In round two SGLang finds only the chat-template tokens; vLLM still
# finds each document's beginning.
#
# :::{dropdown} How we know: what the eviction check tests, and what the bars are not
# Least recently used is the worst order for a loop that does not fit: each document is evicted
# just before it is needed again. SGLang loses the whole document and finds only the shared
# chat-template tokens in the second round. vLLM, having evicted the ends first, still finds the
# beginning of each document (the second check). That is what eviction costs here, in tokens. What
# a cached token saves in time is measured, with repeats, in the section on caching on and off; the
# bars above are one loop, shown for their shape, not read as a ratio.
# :::
#
# How much survives depends on the overflow, simulated for more and more documents of the same size:

# %%
overflow = eviction_sweep(loop_tokens, {"vLLM blocks": ("block", vllm_built["usable"], vllm_built["block_size"]),
                                        "SGLang radix tree": ("radix", sglang_built["usable"], 1)})
results.save("prefix_eviction_sweep", overflow, prof, kv_tokens=kv_tokens)
ax = plots.axes("Second round of a loop over documents (simulated)", "working set / cache capacity",
                "second-round hit rate (%)")
for (cache, rows), marker in zip(overflow.groupby("cache", sort=False), ("o", "s"), strict=True):
    # points only: between two loop lengths nothing was computed, and the rate can drop at once
    ax.plot(rows["working set / capacity"], 100 * rows["second-round hit rate"], marker=marker, linestyle="none",
            label=plots.label(cache))
ax.axvline(1.0, color="grey", linestyle=":")
ax.legend()
plt.show()

# %% [markdown]
# Below a working set (every prompt of the loop) of one cache capacity
# everything fits; just above, the blocks still find
# document beginnings that the tree lost whole; further out, both find almost nothing.
#
# :::{dropdown} How we know: how the overflow is simulated
# Each point is a loop over one more document, replayed one request at a time with each engine's
# block size and usable capacity, at page size 1 for the tree; the working set counts each prompt
# whole, so the chat template's tokens, shared by every document, count once per document. Below
# a ratio of one everything fits. Just above it, the blocks still find the beginnings of documents
# that the tree has lost whole; further out, both caches find almost nothing.
# :::
#
# ## When order matters: SGLang's scheduling policies
#
# When requests wait, the scheduler picks which to prefill first; under a small cache, that decides
# what stays cached. vLLM's policies, `fcfs` (first come, first served, the default) and `priority`,
# ignore the cache. SGLang also has cache-aware ones:
#
# :::{dropdown} How we know: the policy flags
# When several requests wait, the scheduler decides which to prefill first, and under a small cache
# that decides what stays cached. vLLM's scheduler knows two policies, `fcfs` (the default) and
# `priority` (`--scheduling-policy`, `vllm/config/scheduler.py`); neither looks at the cache. SGLang
# has cache-aware ones too (`--schedule-policy`); the list below is read from the installed
# `schedule_policy.py`, and the server above reports its default.
# :::

# %%
from servelab.measure.prefix_cache.burst import FINISH_TOLERANCE_S, common_prefix, reuser_ceiling, run_burst
from servelab.measure.prefix_cache.live import sglang_schedule_facts

facts = sglang_schedule_facts(prof)
print(f"cache-aware policies: {', '.join(facts['CacheAwarePolicy'])}")
print(f"cache-agnostic policies: {', '.join(facts['CacheAgnosticPolicy'])}")
print(f"this server's policy: {info['schedule_policy']}; lpm and hrrn fall back to FCFS above "
      f"{facts['WAITING_QUEUE_PREFIX_MATCH_MAX']} waiting requests")
print(f"in-batch prefix check: a request with at most {facts['IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD']} cached "
      f"tokens that shares at least {facts['IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD']} tokens with an "
      f"earlier waiting request that also found little cached and was not itself moved is sorted to the back of "
      f"the queue by lpm, hrrn and shortest-prefill-first")
print(f"cache-agnostic policies refresh the recency of the waiting requests' cached prefixes on one sort of the "
      f"queue in {facts['WAITING_PREFIX_REFRESH_INTERVAL']}, the first included (_touch_waiting_prefixes)")

# %% [markdown]
# `lpm` (longest prefix match) puts the requests with the longest cached prefix first; with the
# radix cache off, or more waiting requests than the limit printed above, it falls back to `fcfs`.
# `dfs-weight` walks the tree depth first, busiest branch first, so requests sharing a prefix go
# together; `shortest-prefill-first` takes the fewest uncached tokens first; `hrrn` (highest response
# ratio next) favours long waits for little prefill; `lof` (longest output first) ignores the cache.
#
# :::{dropdown} How we know: when the cache-aware policies give way
# `lpm` (longest prefix match) sorts the waiting queue so that requests with the longest cached
# prefix go first. It is not always on when chosen. In `SchedulePolicy._validate_and_adjust_policy`,
# with the radix cache disabled `lpm`, `dfs-weight` and `hrrn` become FCFS, while
# `shortest-prefill-first` refuses to start ("Experimental shortest-prefill-first requires prefix
# caching"; what a user sees instead is shown below). In `_determine_active_policy`, `lpm` and
# `hrrn` become FCFS for any scheduling round with more waiting requests than the limit printed
# above, because matching every waiting request against the tree costs time on every round.
#
# Cache-aware policies do one more thing (`_compute_prefix_matches`). A waiting request that finds
# little in the cache (the first threshold printed above) is matched against the waiting requests
# ahead of it that also found little cached and were not themselves moved (only those enter the
# `waiting_queue_radix_tree` it is matched against); if it shares a prefix (the second threshold)
# with one of them, it joins a set that `lpm`, `hrrn` and `shortest-prefill-first` sort to the back
# of the queue; `dfs-weight` ignores the set. Nothing else reads it: `PrefillAdder` still admits
# those requests in the same round when the step's budget and the free memory allow, and then they
# compute the shared prefix in the same step as the request ahead of them. Only a request that the
# budget leaves waiting finds that prefix cached in a later round. FCFS does not sort at all.
# :::
#
# The test: one request caches a prefix; then, the engine paused, `burst_newcomers` fresh prompts
# arrive, then `burst_reusers` requests reusing it. Fresh prompts and prefix do not fit the cache
# together. All three servers run it.
#
# :::{dropdown} How we know: how the burst is held and sent to each engine
# A workload where order matters: one request caches a shared prefix; then a burst arrives, first
# `burst_newcomers` fresh prompts, then `burst_reusers` requests that start with the cached prefix.
# The fresh prompts and the prefix do not fit the cache together. The engine is paused while the
# burst arrives (vLLM's `/pause` with `mode=keep`, SGLang's `/pause_generation` in place), so that
# none of it is scheduled before the last request has been sent; without the pause a fast machine
# would finish the first fresh prompt before the last request arrived. The two engines hold the
# paused requests in different places. vLLM's engine core puts them in its waiting queue and
# schedules nothing, so the requests are sent one after another, `burst_stagger_s` apart. SGLang's
# tokenizer manager holds each request before tokenizing it (`generate_request` waits on
# `is_pause_cond` in `tokenizer_manager.py`); on resume, separate requests would be sent to the
# scheduler one after another, and its first scheduling round could see only the first few of
# them. So SGLang gets the burst as one batched `/generate` request, the prompts in arrival order,
# which its tokenizer manager sends to the scheduler as one message (`_send_batch_request`): the
# first round sees all of it.
#
# The burst runs on the three servers: vLLM and SGLang, both first come, first served, and the
# SGLang server started with `--schedule-policy lpm`. Each other policy would need one more server.
# Instead, the next section runs SGLang's own ordering code for every policy on the same queue, in
# SGLang's Python environment and without a server, with the script started at the top of the
# chapter. These are the chapter's last live measurements; the servers stop after them.
# :::

# %%
bursts = {"vLLM, fcfs": run_burst(lineup.take("vllm"), warm_tokens, burst_tokens, burst_names,
                                  stagger_s=burst_stagger_s),
          "SGLang, fcfs": run_burst(lineup.take("sglang"), warm_tokens, burst_tokens, burst_names,
                                    stagger_s=burst_stagger_s)}
lpm = lineup.take("sglang lpm")
lpm_info = server_info(lpm)
print(f"SGLang: schedule_policy={lpm_info['schedule_policy']}, "
      f"chunked_prefill_size={lpm_info['chunked_prefill_size']}, max_prefill_tokens={lpm_info['max_prefill_tokens']}")
bursts["SGLang, lpm"] = run_burst(lpm, warm_tokens, burst_tokens, burst_names, stagger_s=burst_stagger_s)
fresh_total = sum(len(t) for n, t in zip(burst_names, burst_tokens, strict=True) if not n.startswith("reuse"))
print(f"warm-up prompt {len(warm_tokens)} tokens; burst prompts {[len(t) for t in burst_tokens]} tokens "
      f"(the fresh ones together: {fresh_total}); KV budget {kv_tokens} tokens")
lineup.stop()

# %%
burst_table = pd.concat([frame.assign(configuration=name) for name, frame in bursts.items()], ignore_index=True)
results.save("prefix_schedule_burst", burst_table, prof, kv_tokens=kv_tokens, shared_tokens=len(warm_tokens))
burst_table.pivot(index="request", columns="configuration", values=["cached_tokens", "finish_group"]).loc[burst_names]

# %%
fig, panels = plt.subplots(len(bursts), 1, figsize=(9, 1.1 + 1.3 * len(bursts)), sharex=True)
for ax, (name, frame) in zip(panels, bursts.items(), strict=True):
    rows = np.arange(len(frame))[::-1]
    colors = ["tab:green" if r.startswith("reuse") else "tab:grey" for r in frame.request]
    ax.barh(rows, frame.end_s, left=0, color=colors, height=0.7)
    for y, end, hit, total in zip(rows, frame.end_s, frame.cached_tokens, frame.prompt_tokens, strict=True):
        ax.text(end + 0.05, y, f"{hit}/{total}", va="center", fontsize=7)
    ax.set_yticks(rows, frame.request, fontsize=7)
    engine, policy = name.split(", ")
    ax.set_title(f"{engine}, {plots.label('policy')} {policy}", fontsize=9, loc="left")
plots.axes("", "time since the engine resumed (s); bars: until the request finished, labels: cached / prompt tokens",
           "", ax=panels[-1])
fig.suptitle(plots.label("The burst under a small cache (green: requests reusing the cached prefix)"))
plt.tight_layout()
plt.show()

# %%
unit = {"vLLM, fcfs": vllm_built["block_size"], "SGLang, fcfs": sglang_built["block_size"],
        "SGLang, lpm": sglang_built["block_size"]}
shared = {name: common_prefix(warm_tokens, t) for name, t in zip(burst_names, burst_tokens, strict=True)}
reuse = burst_table[burst_table.request.str.startswith("reuse")].copy()
reuse["ceiling"] = [reuser_ceiling(shared[r], n, unit[c])
                    for r, n, c in zip(reuse.request, reuse.prompt_tokens, reuse.configuration, strict=True)]
reuse["found the prefix"] = reuse.cached_tokens >= 0.9 * reuse.ceiling
print(f"The reusing requests share {min(shared[r] for r in reuse.request)} to {max(shared[r] for r in reuse.request)} "
      f"tokens with the warm-up request; vLLM's block is {vllm_built['block_size']} tokens, SGLang's page "
      f"{sglang_built['block_size']}.")
for name, rows in reuse.groupby("configuration", sort=False):
    print(f"{name}: {rows['found the prefix'].sum()} of {len(rows)} reusing requests found the cached prefix "
          f"(at least 90% of the {rows.ceiling.iloc[0]} tokens their cache can give); the first of them finished "
          f"in group {rows.finish_group.min()} of {bursts[name].finish_group.max()} (a group: requests that ended "
          f"within {1000 * FINISH_TOLERANCE_S:.0f} ms of each other).")
reuse.groupby("configuration", sort=False).agg(cached_tokens=("cached_tokens", "sum"),
                                                 most_they_can_find=("ceiling", "sum"),
                                                 prompt_tokens=("prompt_tokens", "sum"),
                                                 last_finished_s=("end_s", "max"))

# %%
# NBVAL_CHECK_OUTPUT
cached = reuse.groupby("configuration").cached_tokens.sum()
in_order = (bursts["vLLM, fcfs"].sent_rank.values == np.arange(1, len(burst_names) + 1)).all()  # SGLang: one batch
queued = in_order and all((f.start_s < 0).all() and (f.end_s > 0).all() for f in bursts.values())
found = reuse.groupby("configuration")["found the prefix"].sum()
sglang_fcfs = bursts["SGLang, fcfs"]
fresh_together = sglang_fcfs[~sglang_fcfs.request.str.startswith("reuse")].finish_group.nunique() == 1
print(queued, fresh_together, cached["SGLang, lpm"] > cached["SGLang, fcfs"], found["SGLang, lpm"] == burst_reusers,
      found["SGLang, fcfs"] < burst_reusers)

# %% [markdown]
# Under SGLang's `fcfs` the fresh prompts went first and evicted the prefix, and the reusing
# requests scheduled in one step all prefilled it again; `lpm` put them first, and each reused it.
# With room for both in the cache, or no queue, the order would cost nothing.
#
# :::{dropdown} How we know: what the burst checks confirm, and why each engine kept what it kept
# The first two checks confirm the setup. On every server the burst was sent while the engine was
# paused, and no request finished before it resumed. vLLM received it one request after another,
# and the check confirms they were sent in order; SGLang's order is that of the batch by
# construction: the tokenizer manager sends the batch to the scheduler as one message
# (`_send_batch_request`), and the scheduler queues its requests in list order
# (`handle_batch_generate_request` in `scheduler.py`). Under SGLang's `fcfs` the fresh prompts all
# ended in one finish group (the second check), as they do when one prefill step takes them all,
# which the step budgets printed above allow; a run where they did not would be a failed setup, not
# a different conclusion. Their KV needs room, and the tree evicts its least recently used unlocked
# leaf. Under a cache-agnostic policy such as `fcfs`, SGLang refreshes the recency of the waiting
# requests' cached prefixes from time to time, the front of the queue last
# (`SchedulePolicy._touch_waiting_prefixes`, on unless `SGLANG_ENABLE_WAITING_PREFIX_REFRESH` turns
# it off; how often is printed with the policies above), so the reusing requests' prefix can be
# more recent than other cached entries. Here that does not matter: the fresh prompts lock the few
# chat-template tokens they share with the prefix, and with all of them prefilled in one step the
# rest of the prefix is the only unlocked leaf, so it is evicted whatever its recency. Had the
# fresh prompts been spread over several steps, the ones already finished would be unlocked leaves
# too, and the refresh could decide which went first. The reusing requests then prefill the prefix
# again: all of them that are scheduled in the same step, because SGLang inserts what a step
# computed into the tree only after the step; the ones scheduled later find it again. With `lpm`,
# SGLang moves the requests whose prefix is cached to the front of the queue: every one of them
# reuses it before the fresh prompts can evict it.
#
# vLLM has no cache-aware policy, so the printed lines above are what its default order and its
# block pool give. Which cached blocks a fresh prompt takes is decided by the free queue: blocks
# never used come first, then cached blocks, least recently freed first and each request's tail
# first (`BlockPool.get_new_blocks` and `FreeKVCacheBlockQueue` in `vllm/v1/core/block_pool.py`).
# And vLLM registers a request's full blocks in its prefix cache when it schedules them, so a
# request scheduled later in the same step can already hit them (`cache_blocks` in
# `KVCacheManager.allocate_slots`): where SGLang's reusing requests scheduled together all
# recompute an evicted prefix, vLLM's recompute it once. This is the situation cache-aware scheduling is for: a small
# cache, a queue, and a cached prefix that other work would evict. With a cache large enough for
# both, or no queue to reorder, the order costs nothing.
# :::

# %% [markdown]
# ### Every policy on the same queue, in-process
#
# SGLang's ordering code needs no model, so a script lets every policy sort the same queue once.
#
# :::{dropdown} How we know: what the in-process run builds and leaves out
# The order itself is SGLang code that needs no model: `SchedulePolicy.calc_priority` in
# `schedule_policy.py` sorts the waiting queue in place, once per scheduling round.
# `servelab/engines/engine_side/sgl_schedule_policies.py` runs it in SGLang's venv. It builds the
# prefix cache the server builds for this model, a `UnifiedRadixCache` (see the referees above), at
# the server's page size, and inserts the warm-up prompt, as the live cache holds it when the burst
# arrives. It queues one SGLang `Req` per burst request, in arrival order, each asking for one token
# like the live ones, and lets every policy sort its own copy of the queue once: the first round,
# with the whole burst waiting. Two policies are left out: `random` shuffles the queue anew every
# round (`random.shuffle`, unseeded), and `routing-key` sorts by the routing keys of the running
# batch, of which there is none here.
#
# `hrrn` runs twice. Its ratio is the number of prefill tokens processed since a request arrived,
# divided by the tokens it still has to prefill (`_sort_by_hrrn`). The burst arrived while the
# engine was paused, so no request has waited for any, every ratio is zero, and the tie goes to the
# request id, which the server draws at random (`uuid.uuid4().hex` in `io_struct.py`; seeded here).
# The row `hrrn, waited` sorts the same queue as if as many tokens as the warm-up prompt had been
# prefilled since it arrived.
#
# These are orders, not a served burst. What the scheduler does with the order is left out.
# `PrefillAdder` (`schedule_policy.py`) walks the sorted queue and stops when one of the step's two
# token budgets runs out, the new input tokens (`rem_input_tokens`, from `max_prefill_tokens`) or
# the chunk (`rem_chunk_tokens`, from `chunked_prefill_size`), or the free KV memory does
# (`budget_state`), so the sizes decide how many of the first requests share a step (this chapter's
# SGLang servers were started with both budgets at least the KV budget, printed in the SGLang cell
# above, so memory decides first). What a step computed enters the tree only after the step
# (`release_kv_cache` and `checkpoint_kv_cache` in `mem_cache/common.py`). The tree is evicted only
# when an allocation needs room (`evict_from_tree_cache`, called from `alloc_token_slots` in
# `mem_cache/allocation.py`). Every later round sorts whoever still waits again.
# :::

# %%
from itertools import combinations

from servelab.measure.prefix_cache.policies import order_table, policy_summary, sglang_policy_orders

policy_orders = sglang_policy_orders(prof, warm_tokens, burst_tokens, burst_names, page_size=sglang_built["block_size"],
                                     seed=seed, started=policy_script)
results.save("prefix_schedule_policies", policy_orders, prof, sglang=policy_orders.attrs["sglang"],
             tree=policy_orders.attrs["tree"], page_size=sglang_built["block_size"], seed=seed)
reuser_names = [n for n in burst_names if n.startswith("reuse")]
fresh_tokens = [t for n, t in zip(burst_names, burst_tokens, strict=True) if n not in reuser_names]
policy_check = policy_summary(policy_orders, reuser_names, "every reuser first")
print(f"SGLang {policy_orders.attrs['sglang']}, {policy_orders.attrs['tree']}, page size "
      f"{sglang_built['block_size']}; not run: {', '.join(policy_orders.attrs['skipped'])}")
print("cached prefix of each request when the burst arrives (tokens): "
      + ", ".join(f"{n} {m}" for n, m in policy_orders.attrs["matched"].items()))
print(f"the fresh prompts share at most {max(common_prefix(a, b) for a, b in combinations(fresh_tokens, 2))} tokens "
      f"with each other; under lpm, hrrn and shortest-prefill-first the in-batch check moves to the back a "
      f"request that found little cached and shares at least "
      f"{policy_orders.attrs['constants']['IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD']} tokens with an "
      f"earlier waiting request that also found little cached and was not itself moved")
order_table(policy_orders, "burst").drop(columns="refused").join(
    policy_check.loc["burst", ["every reuser first", "moved to the back"]])

# %% [markdown]
# :::{dropdown} How we know: the two fallback cases
# The same code under the two conditions in which SGLang gives up a cache-aware order: a queue
# longer than `WAITING_QUEUE_PREFIX_MATCH_MAX` (the burst followed by short unrelated requests, one
# more than the limit in all; the order of the burst's own requests is compared), and the radix
# cache disabled (`--disable-radix-cache`):
# :::

# %%
policy_check.loc[["padded", "radix off"]]

# %% [markdown]
# :::{dropdown} How we know: the live `lpm` server against the in-process order
# The live `lpm` server above measured what SGLang's `lpm` did with the burst. If it sorted the
# queue as the in-process run did, before anything was evicted, each reusing request found the
# prefix the in-process tree matched for it:
# :::

# %%
lpm_position = policy_orders[(policy_orders.case == "burst") & (policy_orders.policy == "lpm")]
agreement = (bursts["SGLang, lpm"].set_index("request")[["cached_tokens", "finish_group"]]
             .rename(columns={"cached_tokens": "cached, live lpm", "finish_group": "finish group, live lpm"})
             .join(lpm_position.set_index("request")[["matched", "position"]]
                   .rename(columns={"matched": "matched, in-process", "position": "position, in-process lpm"})))
agreement.loc[burst_names]

# %%
# NBVAL_CHECK_OUTPUT
burst_check, fallback = policy_check.loc["burst"], policy_check.loc[["padded", "radix off"]]
to_fcfs = [("padded", "lpm"), ("padded", "hrrn"), ("radix off", "lpm"), ("radix off", "dfs-weight"),
           ("radix off", "hrrn")]
spf_off = policy_orders[(policy_orders.case == "radix off") & (policy_orders.policy == "shortest-prefill-first")]
print(all(burst_check.loc[p, "every reuser first"] for p in ("lpm", "dfs-weight", "shortest-prefill-first",
                                                               "hrrn, waited")),
      burst_check.loc["fcfs", "arrival order kept"] and burst_check.loc["lof", "arrival order kept"],
      all(fallback.loc[c, "sorted by"] == "fcfs" and fallback.loc[c, "arrival order kept"] for c in to_fcfs),
      len(spf_off) == 1 and spf_off.position.isna().all() and "requires prefix caching" in spf_off.cause.iloc[0],
      (agreement.loc[reuser_names, "cached, live lpm"] == agreement.loc[reuser_names, "matched, in-process"]).all())

# %% [markdown]
# The cache-aware `lpm`, `dfs-weight` and `shortest-prefill-first` put every reusing request first;
# `fcfs` and `lof` keep the arrival order; `hrrn`, on a burst that has not waited, orders at random.
# The live `lpm` server agrees: each reusing request found the prefix that `lpm`'s code matched.
#
# :::{dropdown} How we know: each policy's reasons, the predictions and the fallbacks
# On this burst the three policies that sort by the cache put every reusing request ahead of the
# fresh prompts, each for its own reason: `lpm` by the longest cached prefix; `dfs-weight` by
# walking the tree depth first, the branch with the most waiting requests first, and taking a
# request only after every request whose match ends below it (`_dfs_weight_order` in
# `mem_cache/base_prefix_cache.py`), and the fresh prompts' matches end near the root, above the
# reusing requests'; `shortest-prefill-first` by the fewest tokens left to prefill. `fcfs` and
# `lof` keep the arrival order: every request asks for one token, so `lof` has nothing to sort by,
# and Python's sort is stable. As the burst arrives, `hrrn` orders by request id, so its order is
# random; once the queue has waited, it too puts the reusing requests first, because their few
# uncached tokens give them the highest ratio. The in-batch check (the table's last column) can
# move only fresh prompts to the back here, since the reusing requests find far more than its
# threshold cached, and only under the three policies that read its set; a fresh prompt joins the
# set when it shares at least the threshold with an earlier fresh prompt that was not itself moved,
# and the line printed above the table gives the most any two fresh prompts share. Moved to the
# back, it can still be prefilled in the same step.
#
# The live `lpm` server agrees with the in-process run: each reusing request's cached tokens are
# the prefix SGLang's `lpm` code matched for it. The finish groups need not follow the in-process
# positions one by one: requests prefilled in the same step end together, so they share a group
# (requests that ended within 50 ms of each other, `FINISH_TOLERANCE_S` in
# `servelab/measure/prefix_cache/burst.py`), whatever their positions within the step.
#
# From the orders follow predictions, not measurements. `dfs-weight` and `shortest-prefill-first`
# chose, for the first round, an order that puts every reusing request first, as `lpm` did, so we
# predict what the live `lpm` server measured: every reusing request finds the prefix. They could
# still differ from `lpm` in later rounds and in how many requests join a step. `lof` keeps the
# arrival order, so we predict what `fcfs` measured. On a burst that arrives while the engine is
# paused, `hrrn` would put the reusing requests first only by chance (in this run the table's `hrrn`
# row shows whether it did), so we predict that how many of them find the prefix changes from run
# to run, between what `fcfs` and `lpm` measured.
#
# The fallbacks run the same code. With more waiting requests than the limit, `lpm` and `hrrn`
# kept the arrival order, as FCFS does (`_determine_active_policy`), while `dfs-weight` and
# `shortest-prefill-first`, which that rule does not name, still put the reusing requests first.
# With the radix cache disabled, `lpm`, `dfs-weight` and `hrrn` became FCFS
# (`_validate_and_adjust_policy`), and `shortest-prefill-first` was refused. The refusal's own
# message is not the one a user sees: it is raised inside a `try` whose `except ValueError` then
# tries the name as a cache-agnostic policy, so the error that reaches the user is "Unknown
# schedule_policy", with the reason only in the exception chain, as the table shows.
# :::

# %% [markdown]
# ## Caching on and off
#
# Turning the cache off takes a flag and another server; for the prefill a *pair* suffices: empty
# the cache, send a few-shot request, which prefills its whole prompt, then another, which finds the
# system prompt cached.
#
# :::{dropdown} How we know: the pairs, the rounds, and what the flush leaves behind
# "Faster with the cache on" must hold in all `rounds` rounds.
#
# Each engine can turn its prefix cache off with a flag (vLLM `--no-enable-prefix-caching`,
# SGLang `--disable-radix-cache`), but a flag means one more server to start. For the prefill the
# same comparison needs none. Each *pair* empties the cache, sends one few-shot request, which
# prefills its whole prompt as it would with the cache off, and at once the next few-shot request,
# which finds the shared system prompt cached. The engine's own report of zero cached tokens for
# the first of each pair confirms it (below).
#
# One pair is one measurement; the host's speed drifts from second to second on a shared machine.
# So the pairs run in `rounds` rounds, and each round gives its own ratio (the median cold time
# over the median cached time of its pairs). The cold and the cached request of a pair run back
# to back, so a slow moment lands on both. The chapter states the median round and the lowest and
# highest; "faster with the cache on" holds only if every round says so
# (`on_off_ttft` in `servelab/measure/prefix_cache/analysis.py`). The cold request always comes first,
# right after the flush, so it also pays whatever the flush leaves behind: on a GPU, SGLang's
# `flush_cache` (`Scheduler.flush_cache` in `sglang/srt/managers/scheduler.py`) also empties the
# device allocator's cache, so its cold request can include allocating memory again. That leans
# the ratio towards the cache, by an amount this chapter does not measure.
#
# This is time to first token of one request at a time. Throughput under load is measured further
# below, with the cache turned off for requests that run together.
# :::

# %%
from servelab.measure.prefix_cache.analysis import on_off_ttft
from servelab.measure.rounds import chance_of_agreement

pair_runs = {"vLLM": vllm_pairs, "SGLang": sglang_pairs}
on_off = pd.DataFrame({engine: on_off_ttft(pairs) for engine, pairs in pair_runs.items()}).T
results.save("prefix_on_off", pd.concat(pair_runs, names=["engine", "row"]).reset_index(level=0), prof,
             workload="few_shot", pairs=few_shot_pairs, rounds=rounds, kv_tokens=kv_tokens)
on_off.T

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
for ax, (engine, pairs) in zip(axes, pair_runs.items(), strict=True):
    for cache, name, marker, color in (("off", N_("cache off"), "s", "grey"), ("on", N_("cache on"), "o", "tab:green")):
        rows = pairs[pairs.cache == cache]
        ax.plot(np.arange(1, len(rows) + 1), rows.ttft_s, marker=marker, linestyle="--" if cache == "off" else "-",
                color=color, label=plots.label(name))
    for boundary in range(few_shot_pairs, few_shot_pairs * rounds, few_shot_pairs):
        ax.axvline(boundary + 0.5, color="lightgrey", linewidth=0.8)
    plots.axes("few-shot pairs, round after round", "pair", "time to first token (s)", ax=ax)
    ax.set_title(f"{engine}: {ax.get_title()}")
    ax.legend(fontsize=8)
axes[0].set_ylim(bottom=0)  # after both panels are drawn, so the shared axis holds every series
axes[1].set_ylabel("")
plt.tight_layout()
plt.show()
for engine, row in on_off.iterrows():
    print(f"{engine}: the cached request of a pair found {row['cached tokens on (median)']:.0f} of "
          f"{row['prompt tokens (median)']:.0f} tokens cached (median), so it prefilled "
          f"{row['share of tokens prefilled']:.0%} of the tokens and took {row['share of time left']:.0%} of the "
          f"time of the cold one: {row['TTFT ratio off/on']:.1f} times shorter "
          f"(rounds: {row['lowest round']:.1f} to {row['highest round']:.1f}).")
print(f"A difference that is not there would put all {rounds} rounds on one side by chance "
      f"{chance_of_agreement(rounds):.0%} of the time; the lowest round of either engine here: "
      f"{on_off['lowest round'].min():.1f} times shorter.")

# %%
# NBVAL_CHECK_OUTPUT
print(on_off["on ahead in every round"].all(), (on_off["cached tokens off (sum)"] == 0).all(),
      (on_off["cached tokens on (median)"] > 0).all())

# %% [markdown]
# With the cache on, a request prefills only its question; the lines above show whether the time
# shrinks as much as the tokens.
#
# :::{dropdown} How we know: why the time may shrink less than the tokens
# With the cache emptied a request prefills its whole prompt; with it on, only its own question.
# Both engines skip most of the prefill's tokens. Whether the time shrinks as much as the tokens,
# and by the same amount in both engines, the lines printed above show for this run: the share of
# the tokens prefilled beside the share of the time left. Where the time shrinks less than the tokens, a likely
# reason, read from the sources and not measured here, is the attention kernel. vLLM's CPU attention backend
# hands only the new tokens' queries to its kernel (`v1/attention/backends/cpu_attn.py`). SGLang's
# `torch_native` backend, the one the SGLang cell above prints on the cpu profile, pads the new
# queries back to the full sequence and runs attention over all of it (`_run_sdpa_forward_extend` in
# `sglang/srt/layers/attention/torch_native_backend.py`), so a cached prefix would still cost its
# share of attention there; only the layers' matrix products shrink. SGLang's GPU backends do not
# pad: the Triton backend, for one, computes attention for the new tokens only (`forward_extend` in
# `triton_backend.py`). A measurement of time to first token at a fixed number of new tokens behind
# a growing cached prefix, per engine, would test this; this chapter does not make it.
# :::

# %% [markdown]
# ### Throughput, with cache salts
#
# Requests that run together can share what one of them computed, even in an emptied cache. A *cache
# salt*, a per-request value both engines mix into their cache keys, prevents that. A burst of
# `salted_requests` few-shot requests ran at once, cache on and salted, in `rounds` rounds.
#
# :::{dropdown} How we know: where each engine mixes in the salt, and how the bursts are run
# Before each burst one unsalted request with the same system prompt ran alone, untimed: "cache on"
# is a cache that already holds the shared prefix, as on a server that has served it before, and a
# salted request cannot use it.
#
# Emptying the cache cannot turn it off for requests that run together: they can still share what
# one of them computed. A per-request *cache salt* can. Both engines accept one. vLLM mixes
# `cache_salt` into the hash of a request's first block, and so into every block hash chained after
# it (`vllm/v1/core/kv_cache_utils.py`); SGLang puts it into every key of its radix tree
# (`RadixKey` in `sglang/srt/mem_cache/radix_cache.py`), so a salted request matches only what was
# inserted with the same salt. A request whose salt no other request carries can share nothing,
# cached or in flight, and the same server serves the cache-off run.
#
# Each server ran a burst of `salted_requests` few-shot requests, sent at once, each generating
# exactly `salted_output_tokens` tokens (`min_tokens` equal to `max_tokens`), with the cache on
# and with a salt each, each time from an emptied cache, in `rounds` rounds whose order alternates
# (on, off; off, on; ...), so neither always runs first (`servelab/measure/prefix_cache/salt.py`).
# Before each burst, one more request with the same system prompt and no salt ran first, untimed, as
# on a server that has served that prompt before; without it, SGLang under its default `fcfs` would
# prefill the burst's first step with no request finding the prefix, since what a step computes
# enters its tree only after the step. It runs before the salted burst too, so that a salt the
# engine ignored would show as cached tokens. With the cache off, every request of the burst carried
# a salt of its own. Both runs decode the same number of tokens, and the salted burst, which holds
# the system prompt once per request, fits each server's KV cache at once (printed below), so
# neither run waits for memory: they differ in what they prefill. A run lasts from its first request
# sent to its last answer.
# :::

# %%
from servelab.measure.prefix_cache.salt import kv_needed, ratios

salted_runs = {"vLLM": vllm_salted, "SGLang": sglang_salted}
salted_built = {"vLLM": vllm_built, "SGLang": sglang_built}
salted_fit = {engine: (kv_needed(salted_runs[engine], salted_output_tokens, built["block_size"]), built["usable"])
              for engine, built in salted_built.items()}
salted_table = pd.concat(salted_runs, names=["engine", "round", "cache"]).reset_index()
results.save("prefix_on_off_throughput", salted_table, prof, workload="few_shot", requests=salted_requests,
             output_tokens=salted_output_tokens, kv_tokens=kv_tokens, salted_kv_needed=salted_fit)
for engine, (needed, usable) in salted_fit.items():
    print(f"{engine}: the salted burst holds at most {needed} KV tokens at once (each request's prompt and output, "
          f"in whole blocks (pages) of {salted_built[engine]['block_size']}); "
          f"usable: {usable}.")
throughput = ratios(salted_runs)
throughput.T

# %%
ax = plots.axes("Few-shot burst: each engine against itself", "", "requests/s, cache on / off")
spread_bars = [throughput["requests/s on/off"] - throughput["lowest round"],
               throughput["highest round"] - throughput["requests/s on/off"]]
bars = ax.bar(np.arange(len(throughput)), throughput["requests/s on/off"], width=0.5, color="tab:green",
              yerr=spread_bars, capsize=4, label=plots.label("median round; black line: lowest to highest round"))
ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=3)
ax.axhline(1.0, color="grey", linestyle=":", label=plots.label("no change"))
ax.set_xticks(np.arange(len(throughput)), [plots.label(e) for e in throughput.index])
ax.set_ylim(bottom=0)
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()
for engine, row in throughput.iterrows():
    print(f"{engine}: with the cache on the burst's requests found {row['cached tokens on']:.0f} prompt tokens "
          f"cached (counter: {row['cached tokens on (counter)']:.0f}), with a salt each {row['cached tokens off']:.0f} "
          f"(counter: {row['cached tokens off (counter)']:.0f}); requests per second on / off: "
          f"{row['requests/s on/off']:.1f} (rounds: {row['lowest round']:.1f} to {row['highest round']:.1f}).")

# %%
# NBVAL_CHECK_OUTPUT
print((throughput["cached tokens off"] == 0).all(), (throughput["cached tokens off (counter)"] == 0).all(),
      (throughput["cached tokens on"] > 0).all(), throughput["on ahead in every round"].all(),
      all(needed <= usable for needed, usable in salted_fit.values()))

# %% [markdown]
# Each engine against itself: with the cache on, more requests per second in every round.
#
# :::{dropdown} How we know: what the salted-burst checks test
# With the cache on, every request of the burst found the system prompt cached and prefilled only
# its question; with a salt each, neither the requests' reports nor the engine's counter show a
# single cached token, in flight or before, although an unsalted request with the same system
# prompt ran just before them (the checks). Every round gave the cache on more requests per
# second (the fourth check); the plot shows each engine's median round and the range of its
# rounds. Output tokens per second give the same ratio, since every request generated the same
# number of tokens. Each compares an engine
# with itself on this machine, not the engines with each other: the larger the share of a
# request's time its prefill takes, the larger the ratio, so with long answers it shrinks towards
# one. Both runs used the same small KV budget, and the salted burst fitted it (the last check), so
# the ratio is the prefill saved and not a request left waiting for memory; a burst that did not
# fit would queue salted requests, which would add to the ratio.
# :::

# %% [markdown]
# ## The verdict on the articles' advice
#
# The source articles advise SGLang for agents and structured output for its radix-cache reuse, and
# say that SGLang, keeping no duplicate KV, fits larger batches into GPU memory, quoting SGLang's
# launch post:
#
# :::{dropdown} How we know: where the articles say it
# The source articles make three claims about the radix cache. The selection guide's second line
# reads, in the Spanish version (`seeds/004_ae5155f0df38b2f8.txt`), "Agentes de IA y Salida JSON
# Estructurada: Elija SGLang por su alta tasa de reutilización de caché Radix" (AI agents and
# structured JSON output: choose SGLang for its high radix-cache reuse rate); the Korean version
# (`seeds/002_1feddce1cc294d5b.txt`) credits RadixAttention with "획기적인 속도" (groundbreaking speed)
# on complex structured prompting. The long Japanese comparison (`seeds/003_dfbb9b238a691daf.txt`)
# says that SGLang, keeping no duplicate KV, fits larger batches into limited GPU memory, and
# repeats a throughput figure from the SGLang team's launch post:
# :::

# %%
from IPython.display import Markdown

from servelab.book.quoted_figures import quote_markdown

Markdown(quote_markdown("sglang_lmsys_5x"))

# %% [markdown]
# That figure compares SGLang with a vLLM that did not yet cache prefixes by default; this chapter
# neither confirms nor refutes it.
#
# :::{dropdown} How we know: what this chapter does and does not measure of the figure
# That figure compares SGLang with the vLLM of early 2024 (0.2.5), before vLLM cached prefixes by
# default; this chapter measures throughput only for a small burst, each engine with its cache on
# against itself with the cache off (the section on caching on and off), not one engine against the
# other under load, so it neither confirms nor refutes the figure for today's versions. Structured
# output is a matter of constrained decoding, not of the cache, and is not measured here either.
# :::
#
# How many requests sharing the few-shot system prompt fit at once in the same KV tokens, shared
# or each with its own copy:
#
# :::{dropdown} How we know: how the count is made
# Larger batches from shared prefixes can be counted. Both engines hold a shared prefix once: vLLM's
# blocks are reference-counted and a hit points a request at the same blocks, as SGLang's tree
# points it at the same nodes. How many requests that share the few-shot system prompt can run at
# once on our two caches (each checked against its engine above), with the prefix shared and with
# a prefix of the same length that every request holds alone, both in the same number of KV tokens:
# the smaller of the two servers' usable capacities (vLLM's budget loses one block to its null
# block), so that only the granularity differs:
# :::

# %%
from servelab.measure.prefix_cache.analysis import concurrent_fit

few = tokens["few_shot"]
system = next(i for i, (a, b) in enumerate(zip(few[0], few[1], strict=False)) if a != b)
question = max(len(t) for t in few) - system
capacity = min(vllm_built["usable"], sglang_built["usable"])
fit = pd.DataFrame([{"cache": label, "prefix": "shared" if sharing else "one each",
                     "requests at once": concurrent_fit(few[0][:system], question, 64, cache=cache, capacity=capacity,
                                                        block_size=size, sharing=sharing)}
                    for label, cache, size in (("vLLM blocks", "block", vllm_built["block_size"]),
                                               ("SGLang radix tree", "radix", 1))
                    for sharing in (True, False)])
results.save("prefix_concurrent_fit", fit, prof, kv_tokens=kv_tokens, shared_tokens=system, question_tokens=question,
             capacity=capacity)
print(f"Each request: {system} shared tokens and {question} of its own; prompts only, nothing decoded. Both caches: "
      f"{capacity} tokens (usable: vLLM {vllm_built['usable']}, SGLang {sglang_built['usable']}).")
fit.pivot(index="cache", columns="prefix", values="requests at once")

# %%
# NBVAL_CHECK_OUTPUT
per = fit.pivot(index="cache", columns="prefix", values="requests at once")
print((per["shared"] > per["one each"]).all(),
      per.loc["SGLang radix tree", "shared"] >= per.loc["vLLM blocks", "shared"])

# %% [markdown]
# Sharing multiplies the requests that fit in both caches: larger batches are not SGLang's alone.
# Blocks fit fewer, since each request keeps its own partly filled blocks.
#
# :::{dropdown} How we know: what the count leaves out
# The simulation admits every request at once with its whole prompt and decodes nothing; a live
# engine also reserves room for the tokens it will generate.
# :::
#
# The chapter's measurements, in one table:

# %%
from servelab.measure.prefix_cache.analysis import verdict_table


def share(frame):
    return frame.cached_tokens.sum() / frame.prompt_tokens.sum()


second_round = cost["second-round hit rate"].to_dict()
reusers = {c: share(reuse[reuse.configuration == c]) for c in bursts}
verdict = verdict_table(rates, second_round, reusers, on_off.to_dict(orient="index"))
results.save("prefix_verdict", verdict.reset_index(names="measure"), prof)
verdict

# %% [markdown]
# So "choose SGLang for agents because of its radix cache" overstates the case today: both engines
# cache and share prefixes by default, and SGLang's extra hits are bounded by one vLLM block per
# request; eviction and scheduling can matter more.
#
# :::{dropdown} How we know: the verdict table row by row, and what it means
# Read the table row by row:
#
# - **Agents and multi-turn chat.** SGLang's tree finds more than vLLM's blocks, because vLLM
#   stops at the last full block of what was cached. The gap is less than one vLLM block per
#   request, so it matters when the new part of each request is short compared with a block. How
#   large it is for this run's block size, and for another one, is printed below and in
#   exercise 1; the block-size plot shows the whole curve. With a long shared prefix, as in
#   few-shot prompting, both engines reuse almost all of it. In the agent tree run through
#   SGLang's `fork`, the vLLM replay asked for one output token per request, so it cached none of
#   the generated plan and steps that a real vLLM agent would cache in full blocks; part of that
#   run's gap is the replay's, not the block size's.
# - **Eviction.** When the working set does not fit, the unit of eviction decides what survives.
#   In the loop, vLLM's tail-first freeing kept the beginnings of documents that SGLang's
#   whole-leaf eviction dropped, so here the block cache found more.
# - **Scheduling.** Under a small cache and a queue, the order of prefills decided more than the
#   granularity. Under SGLang's default `fcfs` the fresh prompts evicted the shared prefix and the
#   reusing requests scheduled together prefilled it again; `lpm` kept it, an option that is off by
#   default and that falls back to first come, first served when the queue is long. What vLLM's
#   `fcfs` kept is printed below.
# - **Time.** With the cache on, a request's time to first token shrank, but not necessarily in
#   proportion to the tokens it no longer prefilled; the section on caching on and off prints both
#   shares, and where they part, the attention kernel is the likely reason. In every round, a burst
#   sharing the few-shot system prompt ran faster with the cache on than with a salt per request,
#   on both engines; the ratios are printed below.
# - **Memory.** Both engines hold a shared prefix once; at the block sizes printed above, the
#   tree fitted more requests that share one than the blocks did.
#
# So "choose SGLang for agents because of its radix cache" overstates the case today: both engines
# cache prefixes by default and both share them across running requests. SGLang's extra hits are
# bounded by one vLLM block per request, and the extra memory a vLLM request holds beside a shared
# prefix by two (the prefix's partly filled last block, and its own last block). The differences
# that can matter more, eviction unit and cache-aware scheduling, depend on whether the working set
# fits the cache, and a deployment can measure that on its own traffic with the tools of this
# chapter.
#
# Prefix caching turns repeated prompt tokens into memory reads. Both engines do it, by default,
# and our two small caches, checked against the engines' own code, predicted every hit the live
# engines reported in this chapter when requests ran one at a time, and bounded every hit of the
# agent tree that SGLang's frontend ran with its branches in parallel. The numbers behind the
# paragraphs above:
# :::

# %%
gap = both.sglang - both.vllm
other = other_block_size(vllm_built["block_size"])
small = hit_rate("block", tokens["multi_turn"], block_size=other, capacity=10 * kv_tokens)
print(f"Largest per-request gap SGLang - vLLM: {gap.max()} tokens (vLLM block: {vllm_built['block_size']} tokens); "
      f"mean over the {len(both)} requests: {gap.mean():.0f} tokens. Multi-turn hit rate: SGLang "
      f"{rates.loc['multi_turn', 'SGLang']:.0%}, vLLM {rates.loc['multi_turn', 'vLLM']:.0%} with "
      f"{vllm_built['block_size']}-token blocks, {small:.0%} simulated with {other}-token blocks.")
print(f"Hit rate, agent tree: vLLM {rates.loc['agent_tree', 'vLLM']:.0%}, "
      f"SGLang {rates.loc['agent_tree', 'SGLang']:.0%}; "
      f"control: vLLM {rates.loc['no_sharing', 'vLLM']:.0%}, SGLang {rates.loc['no_sharing', 'SGLang']:.0%}.")
print(f"Loop over {cycle_documents} documents that overflow a {kv_tokens}-token cache, second round: "
      f"vLLM found {second_round['vLLM']:.0%} of the prompt tokens, SGLang {second_round['SGLang']:.0%}.")
print(f"Burst: the reusing requests found {reusers['SGLang, fcfs']:.0%} of their prompt cached under SGLang's "
      f"fcfs and {reusers['SGLang, lpm']:.0%} under lpm; vLLM, fcfs: {reusers['vLLM, fcfs']:.0%} "
      f"({found['vLLM, fcfs']} of {burst_reusers} reusing requests found the prefix).")
print("Few-shot, time to first token with the cache emptied / on: " + ", ".join(
    f"{e} {row['TTFT ratio off/on']:.1f}x, rounds {row['lowest round']:.1f}-{row['highest round']:.1f} "
    f"(hits of {row['cached tokens on (median)']:.0f} tokens)"
    for e, row in on_off.iterrows()) + ".")
print("Requests sharing the few-shot system prompt that fit at once: " + "; ".join(
    f"{c} {per.loc[c, 'shared']} shared against {per.loc[c, 'one each']} alone" for c in per.index) + ".")
print(f"Agent tree through SGLang's fork, hit rate from the counters: SGLang {fork_rates['SGLang']:.0%}, "
      f"vLLM {fork_rates['vLLM']:.0%}.")
print(f"A burst of {salted_requests} few-shot requests, requests per second with the cache on / with a salt each: "
      + ", ".join(f"{e} {r['requests/s on/off']:.1f}x (rounds {r['lowest round']:.1f}-{r['highest round']:.1f})"
                  for e, r in throughput.iterrows()) + ".")

# %% [markdown]
# :::{dropdown} How we know: where to read the engines' code
# - vLLM: `v1/core/kv_cache_utils.py` (block hashes, `get_request_block_hasher`),
# `v1/core/block_pool.py`
#   (the hash-to-block map, the free queue, eviction when a cached block is reused),
#   `v1/core/kv_cache_manager.py` (`get_computed_blocks`: the lookup and its `num_tokens - 1` cap),
#   `v1/core/single_type_kv_cache_manager.py` (`free`, tail first), `v1/core/sched/scheduler.py`
#   (the counters are recorded when a request is admitted).
# - SGLang: `srt/mem_cache/radix_cache.py` (the classic tree),
# `srt/mem_cache/unified_radix_cache.py`
#   and `srt/mem_cache/registry.py` (what the server builds), `srt/managers/schedule_batch.py`
#   (`_compute_max_prefix_len`: the same last-token cap), `srt/managers/schedule_policy.py` (the
#   policies and their fallbacks).
# :::
#
# ## What to remember
#
# - Both engines cache prefixes by default: what requests share, a system prompt, a conversation, a
#   task, can be prefilled once.
# - SGLang reuses a prefix to the token, vLLM in whole blocks; the gap, under one vLLM block per
#   request, matters when what each request adds is short next to a block.
# - In a cache too small for the working set, the unit of eviction and the order of prefills decide
#   what survives: SGLang's `lpm` kept a prefix that `fcfs` let fresh prompts evict.
# - Measure the saving against an emptied or salted cache, in rounds; the time saved need not match
#   the tokens saved.
#
# ## Exercises
#
# 1. (10 min, no engine) Using this run's token ids and our block cache, how much of the hit-rate
#    gap to SGLang remains on each workload with another block size: 16 tokens, or 128 if this run
#    already uses 16?
# 2. (10 min, no engine) What is the smallest KV budget at which the cycle workload's second round
#    finds as much as with an unlimited cache, for each engine's cache? Give it as `kv_cache_tokens`.
# 3. (10 min, no engine) In the multi-turn conversation, how many tokens does each turn prefill
#    beyond its own new messages, with SGLang's tree and with vLLM blocks of both sizes?
#
# :::{dropdown} How we know: vLLM's default block size
# vLLM's default block is 16 tokens (`CacheConfig.DEFAULT_BLOCK_SIZE` in `vllm/config/cache.py`);
# the CPU platform raises it (`vllm/platforms/cpu.py`), and on a GPU it stays unless the attention
# backend prefers another size (`update_block_size_for_backend` in `vllm/platforms/interface.py`).
# :::
#
# Fill in each stub, then run the check below it; solutions are hidden below.

# %%
# Exercise 1: your answer. `analysis.hit_rate("block", tokens[workload], block_size=..., capacity=10 * kv_tokens)`
# replays a workload's token ids on our block cache; `rates` holds the measured hit rates (columns vLLM, SGLang).
from servelab.book import exercise_check
from servelab.measure.exercises import prefix_caching as answers
from servelab.measure.prefix_cache import analysis


def gap_points(workload: str, block_size: int) -> float:
    """SGLang's measured hit rate minus our block cache's at `block_size`, in percentage points."""
    raise NotImplementedError


# %%
exercise_check.check(gap_points, answers.gap_cases(rates, tokens, vllm_built["block_size"], 10 * kv_tokens),
                     title="Exercise 1")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1: the measured gap at this run's block size, and the simulated one at another size (no
# eviction).
from servelab.measure.prefix_cache.analysis import extra_prefill, gap_table, smallest_budget, vllm_budget_for

gaps = gap_table(rates, tokens, vllm_built["block_size"], capacity=10 * kv_tokens)
print(gaps.round(1).rename(columns={"measured": f"gap at block {gaps.attrs['block_size']} (points, measured)",
                                    "simulated": f"gap at block {gaps.attrs['other']} (points, simulated)"}))
print(f"With {gaps.attrs['other']}-token blocks the largest gap is {gaps.simulated.max():.1f} percentage points "
      f"({gaps.simulated.idxmax()}), against {gaps.measured.max():.1f} ({gaps.measured.idxmax()}) "
      f"with this run's {gaps.attrs['block_size']}-token blocks.")


def gap_points(workload: str, block_size: int) -> float:
    vllm_rate = analysis.hit_rate("block", tokens[workload], block_size=block_size, capacity=10 * kv_tokens)
    return 100 * (rates.SGLang[workload] - vllm_rate)


exercise_check.check(gap_points, answers.gap_cases(rates, tokens, vllm_built["block_size"], 10 * kv_tokens),
                     title="Solution 1")

# %%
# Exercise 2: your answer. `analysis.smallest_budget` and `analysis.vllm_budget_for` help; the cycle workload is
# `tokens["cycle"]`, its first round the first `cycle_documents` prompts; search up to `10 * kv_tokens`.


def smallest_kv_cache_tokens(engine: str) -> int:
    """The `kv_cache_tokens` ("vLLM": blocks of this run's size, null block included; "SGLang": its tree)."""
    raise NotImplementedError


# %%
exercise_check.check(smallest_kv_cache_tokens, answers.budget_cases(tokens["cycle"], cycle_documents,
                                                                    vllm_built["block_size"], 10 * kv_tokens),
                     title="Exercise 2")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2: grow the usable KV until the second round finds what an unlimited cache finds.
need = {"vLLM": smallest_budget("block", tokens["cycle"], cycle_documents, block_size=vllm_built["block_size"],
                                limit=10 * kv_tokens),
        "SGLang": smallest_budget("radix", tokens["cycle"], cycle_documents, limit=10 * kv_tokens)}
flags = {"vLLM": vllm_budget_for(need["vLLM"], vllm_built["block_size"]), "SGLang": need["SGLang"]}
print(f"The documents hold {sum(map(len, tokens['cycle'][:cycle_documents]))} prompt tokens. The second round "
      f"finds everything it can with {need['vLLM']} usable tokens of vLLM blocks, that is kv_cache_tokens="
      f"{flags['vLLM']} (one more block for the null block), and with {need['SGLang']} tokens in SGLang's tree, "
      f"kv_cache_tokens={flags['SGLang']}. This run used kv_cache_tokens={kv_tokens}: "
      f"{vllm_built['usable']} usable tokens in vLLM, {sglang_built['usable']} in SGLang.")
exercise_check.check(flags.get, answers.budget_cases(tokens["cycle"], cycle_documents, vllm_built["block_size"],
                                                    10 * kv_tokens), title="Solution 2")

# %%
# Exercise 3: your answer. `analysis.extra_prefill` counts it for several caches at once; here, one cache.


def extra_prefill_per_turn(cache: str, block_size: int) -> list[int]:
    """Per turn of `tokens["multi_turn"]`, prefilled tokens beyond the turn's new ones ("radix" or "block")."""
    raise NotImplementedError


# %%
exercise_check.check(extra_prefill_per_turn, answers.extra_prefill_cases(tokens["multi_turn"], vllm_built["block_size"],
                                                                         10 * kv_tokens), title="Exercise 3")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3: prefilled tokens minus the tokens the turn adds to the previous prompt.
size, other = vllm_built["block_size"], other_block_size(vllm_built["block_size"])
extra = extra_prefill(tokens["multi_turn"], {"SGLang": ("radix", 1), f"vLLM, block {other}": ("block", other),
                                             f"vLLM, block {size}": ("block", size)}, capacity=10 * kv_tokens)
print(extra)
print(f"After the first turn SGLang prefills {extra['SGLang'].iloc[1:].mean():.0f} extra token(s) per turn on average "
      f"(each turn starts with the whole previous prompt, which is cached; the one-token cap applies to the "
      f"prompt looked up, not to what it reuses), vLLM {extra[f'vLLM, block {other}'].iloc[1:].mean():.0f} with "
      f"{other}-token blocks and {extra[f'vLLM, block {size}'].iloc[1:].mean():.0f} with {size}-token blocks "
      f"(the previous prompt's partial last block).")


def extra_prefill_per_turn(cache: str, block_size: int) -> list[int]:
    return list(extra_prefill(tokens["multi_turn"], {"it": (cache, block_size)}, capacity=10 * kv_tokens)["it"])


exercise_check.check(extra_prefill_per_turn, answers.extra_prefill_cases(tokens["multi_turn"], vllm_built["block_size"],
                                                                         10 * kv_tokens), title="Solution 3")
