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
# # PagedAttention: where KV memory goes
#
# The previous chapter counted how much KV cache a sequence needs. This one asks how an engine
# should reserve it. A request arrives with a prompt; nobody knows how long its answer will be.
# Servers before vLLM reserved one contiguous slab per request, sized for the longest answer
# the model allows, and most of that slab was never written. vLLM's PagedAttention (Kwon et al.,
# SOSP 2023) borrowed the operating system's answer to the same problem: cut memory into small
# fixed-size blocks, give a sequence a new block only when its last one is full, and keep a block
# table per sequence that maps its logical blocks to wherever the physical blocks happen to be.
#
# The chapter builds that allocator from scratch, simulates it against contiguous reservation on
# a realistic workload, and then measures the real vLLM engine: its KV capacity, what it does
# when KV runs out, and how parallel sampling shares blocks.

# %% tags=["parameters"]
profile = "auto"
seed = 0
sim_requests = 1000           # requests in the simulated workload
kv_tokens = None              # KV budget for the engine, in tokens; None: two full-length sequences
pressure_requests = 12        # concurrent requests that overfill that budget
pressure_prompt_words = 200
pressure_output_tokens = None  # None: long enough that only half the requests fit at full length
samples = [1, 2, 4, 8]        # parallel sampling: n completions of one prompt
sample_prompt_words = 1000
sample_output_tokens = 64
small_block_size = 32         # a second server with smaller blocks (CPU needs multiples of 32)

# %%
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.book.quoted_figures import PAPER_FIGURES
from servelab.sim import kv_memory, paging
from servelab.sim.paging import BlockAllocator, parallel_sampling_blocks

prof = banner.start(profile)

# %% [markdown]
# ## A block allocator from scratch
#
# The allocator below is the whole idea in a few dozen lines (`servelab/sim/paging/block_pool.py`).
# Physical blocks live in a pool with a free list. Each sequence has a block table. A block can
# be shared by several sequences, so each block carries a reference count, and a sequence that
# wants to write into a shared, partly filled block first gets its own copy (copy-on-write).
#
# A tiny pool shows every move: a prompt of 10 tokens in blocks of 4, a second sample forked
# from it, and one new token for each.

# %%
alloc = BlockAllocator(num_blocks=8, block_size=4)
print("A's block table after a 10-token prompt:", alloc.allocate("A", 10))
alloc.fork("A", "B")
print("B shares it:", alloc.block_table("B"), "refcounts:", [alloc.refcount(b) for b in alloc.block_table("A")])
print("A writes into the shared last block:", alloc.append_token("A"))
print("B now writes in place:", alloc.append_token("B"))
print("tables:", {s: alloc.block_table(s) for s in alloc.sequences()}, "free:", alloc.free_block_ids())
alloc.stats()

# %% [markdown]
# ## Simulating three ways to reserve KV memory
#
# The simulator (`servelab/sim/paging/`) serves one seeded workload three ways with the same
# scheduler (first come, first served, one token per running request per step):
#
# - **max_len**: one contiguous slab of the model's maximum length per request, as servers did
#   before paging (the paper's "Orca (Max)");
# - **exact**: one contiguous slab of exactly prompt plus output, an oracle that knows the
#   answer's length in advance (the paper's "Orca (Oracle)"); slabs of different sizes leave
#   holes between them (external fragmentation);
# - **paged:B**: blocks of B tokens taken one at a time, as vLLM does.
#
# The workload's prompt and output lengths follow log-normal distributions with the mean lengths
# the paper reports for its ShareGPT trace; the KV capacity is the paper's 15.7K token slots
# (OPT-13B on an A100). Every step, each slot is used, reserved but empty, wasted in a hole,
# or idle. The table and the bar chart average these over the whole run; the column
# `used_pct_saturated` averages the used share only over the steps in which a request was
# waiting for memory, which is the situation the paper measured.

# %%
workload = paging.sample_requests(sim_requests, seed=seed)
comparison = paging.compare_policies(workload)
results.save("paging_simulation", comparison.summary, prof, seed=seed, requests=sim_requests)
print(f"simulated {len(paging.DEFAULT_POLICIES)} policies in {comparison.seconds:.1f} s")
comparison.summary[["policy", "mean_batch", "max_batch", "preemptions", "used_pct_saturated", "wasted_pct"]].round(1)

# %%
component_names = {"used": "holds tokens", "reserved_for_future": "reserved, filled later",
                   "never_used": "reserved, never filled", "external_frag": "holes (external fragmentation)",
                   "stranded": "free but too small", "idle": "idle"}
breakdown = comparison.breakdown.pivot(index="policy", columns="component", values="pct")
breakdown = breakdown.loc[list(paging.DEFAULT_POLICIES), list(paging.COMPONENTS)]
ax = breakdown.plot.barh(stacked=True, figsize=(10, 4))
plots.axes("Where the KV capacity goes (simulated)", "share of KV capacity, time-averaged (%)", "", ax=ax)
ax.legend([plots.label(component_names[c]) for c in breakdown.columns], loc="upper left",
          bbox_to_anchor=(1.01, 1.0), fontsize=8)
ax.invert_yaxis()
plt.show()

# %% [markdown]
# The paper measured the same split on its own systems (its Fig. 2) and the batch sizes they
# reached (its Fig. 13). Here they are beside the simulation, quoted with their source.

# %%
paper = pd.DataFrame([
    {"figure": key, "paper says": f.value, "measures": f.measures, "where": f.where}
    for key, f in PAPER_FIGURES.items()
    if key in ("fig2_token_states", "batched_requests", "kv_usage_existing_systems")
])
paper

# %%
sim = comparison.summary.set_index("policy")
ours, theirs = ["max_len", "exact", "paged:16"], ["Orca (Max)", "Orca (Oracle)", "vLLM"]
pd.DataFrame({
    "simulated: % of KV holding tokens": sim.loc[ours, "used_pct_saturated"].round(1).values,
    "paper Fig. 2": [PAPER_FIGURES["fig2_token_states"].numbers[k] for k in theirs],
    "simulated: mean batch": sim.loc[ours, "mean_batch"].round(1).values,
    "paper Fig. 13 (ShareGPT)": [PAPER_FIGURES["batched_requests"].numbers[f"ShareGPT/{k}"] for k in theirs],
}, index=[f"{a} ({b})" for a, b in zip(ours, theirs, strict=True)])

# %% [markdown]
# The two are not the same experiment, so read the columns side by side rather than expecting
# equality: the paper served OPT-13B on an A100 with real prefill and decode times, while the
# simulator makes every step cost the same and recomputation free, so only memory decides.
# What the simulation shows is how much of the difference between the three approaches memory
# accounting alone explains.
#
# Block size trades two things. Inside a sequence, the last block is on average half empty, so
# larger blocks waste more (internal fragmentation, the `reserved_for_future` and `never_used`
# parts above); with block size 1 nothing is wasted. But each block is a unit of work for the
# attention kernel and of bookkeeping for the scheduler, so very small blocks cost speed.

# %%
ax = plots.axes("Waste inside the last block grows with block size", "block size (tokens)",
                "wasted share of KV capacity (%)")
paged = sim[sim.index.str.startswith("paged:")]
ax.plot(paged.block_size, paged.wasted_pct, marker="o")
ax.set_xscale("log", base=2)
plt.show()

# %% [markdown]
# ## The real engine under a small KV budget
#
# Now vLLM itself. We give it a deliberately small KV budget, `kv_tokens` tokens, and read back
# what it built: its block size and number of blocks, from `/metrics`, next to what the planner
# of the previous chapter predicts for the same budget.

# %%
from servelab.engines.client import run_load
from servelab.engines.metrics import Sampler
from servelab.engines.server import Server, running
from servelab.measure.kv_capacity import engine_capacity
from servelab.measure.parallel_sampling import measure_parallel_sampling
from servelab.measure.workloads import long_prompt

kv_tokens = kv_tokens or 2 * prof.max_model_len  # vLLM refuses budgets below one full-length sequence
pressure_output_tokens = pressure_output_tokens or 2 * kv_tokens // pressure_requests - pressure_prompt_words
vllm = Server("vllm", prof, kv_cache_tokens=kv_tokens).start()
built = engine_capacity(vllm)
block_size, num_blocks = built["block_size"], built["blocks"]
planned = kv_memory.tokens_held(kv_tokens, block_size)
print(f"vLLM {vllm.version()}: {num_blocks} blocks of {block_size} tokens = {num_blocks * block_size} tokens; "
      f"the planner of chapter 01 predicts {planned} tokens")

# %% [markdown]
# Next, `pressure_requests` requests arrive at once, each with a prompt of about
# `pressure_prompt_words` tokens and asked for exactly `pressure_output_tokens` tokens
# (`ignore_eos`, so every answer has the same length). Reserving the model's maximum length per
# request, this budget would hold only a couple of them; reserving exactly what each needs, a
# few more. vLLM admits requests while it has blocks for their prompts, and when running
# sequences later need a block that is not there, it preempts the most recently admitted one:
# frees its blocks and puts it back in the queue, to recompute its KV later. We sample the
# engine's gauges while this happens.

# %%
gauges = ["vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
          "vllm:num_preemptions"]
prompts = [long_prompt(pressure_prompt_words, seed=seed * 1000 + i) for i in range(pressure_requests)]
with Sampler(vllm.url, gauges, every_s=0.25) as sampler:
    load = run_load(vllm, prompts, concurrency=pressure_requests, max_tokens=pressure_output_tokens,
                    extra_body={"ignore_eos": True})
timeline = sampler.frame()
results.save("kv_pressure_requests", load.drop(columns=["text", "prompt"]), prof, kv_tokens=kv_tokens)
results.save("kv_pressure_timeline", timeline, prof, kv_tokens=kv_tokens)
need = int(load.prompt_tokens.mean()) + pressure_output_tokens
fit = pd.Series({
    "requests": pressure_requests,
    "max_len reservation would run at once": num_blocks * block_size // prof.max_model_len,
    "exact reservation would run at once": num_blocks * block_size // need,
    "vLLM ran at once (max)": int(timeline["vllm:num_requests_running"].max()),
    "preemptions": int(timeline["vllm:num_preemptions"].iloc[-1]),
})
fit

# %%
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
plots.axes("vLLM with a small KV budget", "", "KV cache used (%)", ax=top)
top.plot(timeline.t_s, 100 * timeline["vllm:kv_cache_usage_perc"])
plots.axes("", "time (s)", "requests", ax=bottom)
bottom.plot(timeline.t_s, timeline["vllm:num_requests_running"], label=plots.label("running"))
bottom.plot(timeline.t_s, timeline["vllm:num_requests_waiting"], label=plots.label("waiting"))
bottom.step(timeline.t_s, timeline["vllm:num_preemptions"], label=plots.label("preemptions (total)"))
bottom.legend()
plt.show()

# %% [markdown]
# The KV cache fills up and running requests go back to the waiting queue: those are the
# preemptions. The counter lags behind the two gauges because vLLM's front end counts a
# preemption when the preempted request's next output arrives (`PREEMPTED` events in
# `vllm/v1/metrics/stats.py`), that is, once it runs again. The gauges themselves are updated
# once per engine step, so a long step, such as recomputing several preempted prompts at once,
# shows as a flat stretch.
#
# The cost shows up in latency: a preempted request recomputes its prompt and the tokens it had
# already generated before it can continue, so the requests admitted last finish last.

# %%
ax = plots.axes("Latency of each request", "request (by start of its answer)", "seconds")
order = load.sort_values("ttft_s").reset_index(drop=True)
ax.bar(order.index, order.latency_s, label=plots.label("total latency"))
ax.bar(order.index, order.ttft_s, label=plots.label("time to first token"))
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print(fit["vLLM ran at once (max)"] > fit["max_len reservation would run at once"], fit["preemptions"] > 0)

# %% [markdown]
# ## Sharing: parallel sampling
#
# Asking for `n` answers to one prompt (`n > 1` in the API) is where blocks get shared: all
# samples have the same prompt, so its full blocks can be held once. Each sample still needs its
# own copy of the prompt's last, partly filled block, because it will write its own tokens
# there. The from-scratch allocator predicts the count; the engine's KV usage gauge measures it.

# %%
sharing = measure_parallel_sampling(vllm, samples, num_blocks=num_blocks, block_size=block_size,
                                    prompt_words=sample_prompt_words, output_tokens=sample_output_tokens, seed=seed)
results.save("parallel_sampling_blocks", sharing, prof)
sharing.round(1)

# %%
ax = plots.axes("KV blocks held by n samples of one prompt", "n (samples)", "KV blocks")
ax.plot(sharing.n, sharing["blocks without sharing"], marker="o", label=plots.label("without sharing"))
ax.plot(sharing.n, sharing["predicted blocks"], marker="o", label=plots.label("from-scratch allocator"))
ax.plot(sharing.n, sharing["measured blocks"], marker="x", linestyle="none", markersize=10,
        label=plots.label("vLLM, measured"))
ax.axhline(num_blocks - 1, color="grey", linestyle=":", label=plots.label("engine capacity"))
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print((sharing["measured blocks"] == sharing["predicted blocks"]).all())

# %%
vllm.stop()

# %% [markdown]
# The engine holds exactly what the from-scratch allocator predicts. Compare the blocks
# without sharing with the engine's capacity line in the plot: that is how much of this budget
# sharing frees for other requests.
#
# How much sharing saves depends on how much of each sample is prompt. Here the prompt is long
# and the answers short, so the saving is large. The paper reports smaller savings for parallel
# sampling on its traces, where answers are long compared with prompts; its figures are quoted
# below. The exercises ask you to move between the two regimes.

# %%
pd.DataFrame([{"paper says": PAPER_FIGURES[k].value, "measures": PAPER_FIGURES[k].measures,
               "where": PAPER_FIGURES[k].where} for k in ("sharing_saving_alpaca", "sharing_saving_sharegpt")])

# %% [markdown]
# ## Block size on the engine
#
# On this profile vLLM chose the block size printed above. vLLM's default is 16 tokens on GPUs
# (`CacheConfig.DEFAULT_BLOCK_SIZE` in `vllm/config/cache.py`), and its CPU platform raises it to
# 128 (`CpuPlatform.check_and_update_config` in `vllm/platforms/cpu.py`). `--block-size` takes
# any positive integer, but each attention backend only accepts some: multiples of 16 for
# FlashAttention and Triton, multiples of 32 for the CPU backend (16 makes the CPU engine exit
# with "No common block size"). The vLLM paper found block sizes from 16 to 128 worked best on
# its ShareGPT trace and chose 16 as the default (§7.2).
#
# What a smaller block changes is visible with the same experiment: the last, partly filled
# block of every sample is smaller, and the prefix cache, which only shares full blocks, shares
# more of the prompt. We start a second server with `small_block_size` and repeat.

# %%
with running("vllm", prof, kv_cache_tokens=kv_tokens, block_size=small_block_size) as small:
    built_small = engine_capacity(small)
    sharing_small = measure_parallel_sampling(
        small, samples, num_blocks=built_small["blocks"],
        block_size=built_small["block_size"], prompt_words=sample_prompt_words,
        output_tokens=sample_output_tokens, seed=seed)
by_block = pd.concat([sharing, sharing_small])
results.save("parallel_sampling_block_size", by_block, prof)
by_block.pivot(index="n", columns="block size", values=["KV tokens held", "shared prompt tokens"])

# %%
ax = plots.axes("KV held by n samples, by block size (vLLM, measured)", "n (samples)", "KV tokens held")
for size, rows in by_block.groupby("block size"):
    ax.plot(rows.n, rows["KV tokens held"], marker="o", label=f"{plots.label('block size')} {size}")
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print((sharing_small["measured blocks"] == sharing_small["predicted blocks"]).all(),
      (sharing_small["KV tokens held"] <= sharing["KV tokens held"].values).all())

# %% [markdown]
# ## How vLLM implements this today
#
# The PagedAttention paper describes a custom CUDA kernel that reads keys and values through a
# block table. Current vLLM (the V1 engine) kept the idea and replaced the kernel. The files
# below are in the installed package (`vllm/...`); open them alongside this chapter.
#
# - `v1/core/block_pool.py`, `BlockPool`: every physical block, the free list
#   (`FreeKVCacheBlockQueue`, ordered so the least recently freed block is reused first) and the
#   prefix-cache index from block hash to block. Block 0 is set aside as a "null block", which is
#   why the usage gauge divides by one block fewer.
# - `v1/core/kv_cache_utils.py`, `KVCacheBlock`: one block's id, reference count and hash.
# - `v1/core/kv_cache_manager.py`, `KVCacheManager.allocate_slots`, and
#   `v1/core/single_type_kv_cache_manager.py`: the per-request block lists (the block tables) and
#   the per-step allocation. Full blocks are hashed and registered in the prefix cache when they
#   are allocated.
# - `v1/core/sched/scheduler.py`, `Scheduler.schedule`: when `allocate_slots` fails, the last
#   running request is preempted: its blocks are freed and it goes back to the front of the
#   queue to be recomputed. V1 has no swapping to CPU memory; preemption means recomputation.
# - `v1/engine/parallel_sampling.py`, `ParentRequest`: a request with `n > 1` is split into `n`
#   child requests that find the shared prompt blocks through the prefix cache. There is no
#   copy-on-write of a partly filled block for ordinary models: each sample gets a fresh last
#   block, which is exactly what our allocator's copy-on-write produces in the end.
# - `v1/worker/block_table.py`: the worker's copy of the block tables, handed to the attention
#   backend every step.
# - `v1/attention/backends/`: the kernels that read through block tables. On GPUs these are
#   FlashAttention, FlashInfer or Triton kernels; on CPU, `cpu_attn.py` calls vLLM's own C++
#   kernel. The original `paged_attention_v1` and `v2` wrappers are gone from
#   `vllm/_custom_ops.py`.
#
# ## What it means
#
# Reserving KV memory a block at a time turns most of the wasted reservation of contiguous
# allocation into room for more running requests, which is where the throughput gains of paging
# come from. The price appears when the budget is overcommitted: the engine preempts and
# recomputes, and the preempted requests pay for it in latency. Sharing full blocks between
# sequences makes parallel sampling cheap when prompts are long, and the same mechanism, the
# prefix cache, is what the next chapter measures across requests.
#
# ## Exercises
#
# 1. In the simulator, which block size wastes less than 2 % of the KV capacity? Does the mean
#    batch size keep growing as the block shrinks?
# 2. Rerun the parallel-sampling experiment with a short prompt and long answers
#    (`sample_prompt_words=50`, `sample_output_tokens=512`). How does the saving compare with the
#    paper's figures now?
# 3. With `pressure_requests` requests of this size, what is the smallest `kv_tokens` for which
#    vLLM never preempts? Work it out from the block counts, then check it on the engine.
#
# The solutions are in the hidden cells below.

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1: from the simulation above.
print(sim.loc[sim.index.str.startswith("paged:"), ["wasted_pct", "mean_batch"]].round(2))

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2: the allocator predicts it without an engine (the engine agreed above). A 60-token
# prompt fills no whole block of 128, so on the CPU profile nothing is shared at all.
for size in sorted({16, block_size}):
    for n in samples:
        blocks = parallel_sampling_blocks(60, 512, n, size)
        print(f"block size {size}, n={n}: saved {100 * (1 - blocks['shared'] / blocks['unshared']):.1f} %")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3: every request at full length, in whole blocks.
per_request = -(-need // block_size)
print(f"{pressure_requests} x {per_request} blocks = {pressure_requests * per_request * block_size} tokens")
