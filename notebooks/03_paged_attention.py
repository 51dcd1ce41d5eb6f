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
# The previous chapter counted how much KV cache a sequence needs: the attention keys and values
# the model keeps for every token, so that it need not recompute them. This one asks how an engine
# should reserve it, when nobody knows how long an answer will be. Servers before vLLM reserved
# one contiguous slab per request, sized for the longest answer the model allows, and most of that
# slab was never written. vLLM's PagedAttention (Kwon et al.,
# SOSP 2023) borrowed the operating system's answer to the same problem: cut memory into small
# fixed-size blocks, give a sequence a new block only when its last one is full, and keep a block
# table per sequence that maps its logical blocks to wherever the physical blocks happen to be.
#
# The chapter builds that allocator, simulates it against contiguous reservation, and then
# measures both engines: what they do when a KV budget runs out, and how parallel sampling shares
# blocks.

# %% tags=["parameters"]
profile = "auto"
seed = 0
sim_requests = 1000            # requests in the simulated workload
kv_tokens = None               # KV budget for both engines, in tokens; None: two full-length sequences
pressure_requests = 12         # requests sent at once to that budget
pressure_prompt_words = 300    # filler words per prompt (the engine reports the tokens)
pressure_overfill = 1.4        # at full length the requests need this many times the budget
pressure_spread = 0.9          # answers run from (1 - spread) to (1 + spread) times their mean length
sglang_conservativeness = 0.1  # SGLang's --schedule-conservativeness in its pressure run (its default: 1.0)
retraction_answer = None       # answer tokens of each early request in the run that makes SGLang retract;
                               # None: the profile's (servelab.measure.paging.retraction.sizes)
retraction_lag = None          # tokens the early requests may have generated before the late one is admitted;
                               # None: the profile's (larger on GPUs, which decode many steps per second)
samples = [1, 2, 4, 8]         # parallel sampling: n completions of one prompt
sample_prompt_tokens = 600     # about this long; set so the two block sizes share different amounts
sample_output_tokens = 32

# %%
import pandas as pd
from IPython.display import Markdown, display
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.book.diagrams import draw_block_tables, draw_contiguous_vs_blocks, plot_pressure, plot_request_lanes
from servelab.book.quoted_figures import PAPER_FIGURES, fig2_breakdown, quote_markdown
from servelab.sim import paging
from servelab.sim.paging import BlockAllocator, parallel_sampling_blocks

prof = banner.start(profile)

# %% [markdown]
# ## A block allocator from scratch
#
# The allocator is the whole idea in a few dozen lines (`servelab/sim/paging/block_pool.py`).
# Physical blocks live in a pool with a free list. Each sequence has a block table. A block can
# be shared by several sequences, so each block carries a reference count, and a sequence that
# wants to write into a shared, partly filled block first gets its own copy (copy-on-write).
#
# First, one sequence stored both ways: 10 tokens, on a server whose answers may reach 32, in a pool
# of eight blocks of 4 slots. Reserved contiguously it takes all 32 slots, mostly never written.
# In blocks it takes three, wherever the free list had them (the block table maps its block 0 to
# physical block 2), and another sequence and four free blocks fit beside it.

# %%
alloc = BlockAllocator(num_blocks=8, block_size=4)
alloc.allocate("X", 8)
alloc.allocate("A", 4)
alloc.allocate("Y", 4)
alloc.free("X")           # X finished: its blocks went back to the free list
alloc.append_tokens("A", 6)  # A grows to 10 tokens, one new block whenever its last one is full
print("A's block table (logical -> physical):", alloc.block_table("A"))
draw_contiguous_vs_blocks(alloc, "A", max_len=32)
plt.show()

# %% [markdown]
# A tiny pool shows every move: a prompt of 10 tokens in blocks of 4, a second sample forked
# from it, and one new token for each. The pictures are drawn from the allocator's state.

# %%
alloc = BlockAllocator(num_blocks=8, block_size=4)
alloc.allocate("A", 10)
alloc.fork("A", "B")
fig, (before, after) = plt.subplots(1, 2, figsize=(15, 4.5))
draw_block_tables(alloc, "B forked from A: every block shared", ax=before)
print("A writes into the shared last block:", alloc.append_token("A"))
print("B now writes in place:", alloc.append_token("B"))
draw_block_tables(alloc, "After one token each: A got a copy", ax=after)
plt.show()

# %% [markdown]
# A finished sequence's blocks go back to the free list, printed below, next block first.
#
# :::{dropdown} How we know: the order in which vLLM reuses freed blocks
# When a sequence finishes, its blocks go back to the free list. vLLM puts blocks that hold no
# prefix-cache hash at the front of its free queue, the sequence's last block first, so the most
# recently freed block is reused first; blocks registered in the prefix cache go to the back and
# are evicted least recently used first (`BlockPool.free_blocks` in `vllm/v1/core/block_pool.py`).
# Our allocator has no prefix cache, so all its blocks take the first path.
# :::

# %%
alloc.free("B")
print("free list after B finishes, next block first:", alloc.free_block_ids())

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
# - **paged:B**: blocks of B tokens taken one at a time, as vLLM does; when a running request
#   needs a block and none is free, the most recently admitted request is preempted.
#
# To preempt a request is to free its blocks and send it back to the queue; when it is
# readmitted, it computes its KV again. Every step, each slot of the KV capacity is used,
# reserved but empty, wasted in a hole, free but too small for the request waiting, or idle.
#
# :::{dropdown} How we know: the simulated workload
# The workload's prompt and output lengths follow log-normal distributions with the mean lengths
# the paper reports for its ShareGPT trace; the KV capacity is the paper's 15.7K token slots
# (OPT-13B on an A100). Every step, each slot is used, reserved but empty, wasted in a hole,
# or idle.
# :::

# %%
workload = paging.sample_requests(sim_requests, seed=seed)
comparison = paging.compare_policies(workload)
results.save("paging_simulation", comparison.summary, prof, seed=seed, requests=sim_requests)
print(f"simulated {len(paging.DEFAULT_POLICIES)} policies in {comparison.seconds:.1f} s")
comparison.summary[["policy", "mean_batch", "max_batch", "preemptions", "used_pct", "wasted_pct"]].round(1)

# %% [markdown]
# In the simulator every step costs the same, so prefill (computing the KV of a prompt) and
# recomputing a preempted request are free.
#
# :::{dropdown} How we know: what the simulator leaves out
# The simulator is simpler than a server in ways that matter when reading these numbers. A step
# costs the same whatever it holds, so prefill is free and so is recomputing a preempted
# request: the simulator preempts as often as memory asks, which a real engine, paying for each
# recomputation, would not survive as cheaply. Requests arrive much faster than any policy
# serves them, so the queue is a backlog for almost the whole run. The spread of the lengths is
# our choice; the paper gives only their means. That a prefill or a recomputation costs no steps
# is an assumption of the simulator, not a result; the cell below prints what follows from the
# others.
# :::

# %%
sim = comparison.summary.set_index("policy")
last_arrival = int(workload["arrival"].max())
pd.Series({
    "preemptions per 1000 requests, paged:16": int(round(1000 * sim.loc["paged:16", "preemptions"] / sim_requests)),
    "last arrival, as a share of the paged:16 run (%)": round(100 * last_arrival / sim.loc["paged:16", "steps"], 1),
    "sigma of log(length), prompts and outputs (our choice)": paging.DEFAULT_SIGMA,
})

# %%
component_names = {"used": "holds tokens", "reserved_for_future": "reserved, filled later",
                   "never_used": "reserved, never filled", "external_frag": "holes (external fragmentation)",
                   "stranded": "free but too small", "idle": "idle"}
breakdown = comparison.breakdown.pivot(index="policy", columns="component", values="pct")
breakdown = breakdown.loc[list(paging.DEFAULT_POLICIES), list(paging.COMPONENTS)]
ax = breakdown.plot.barh(stacked=True, figsize=(10, 4))
plots.axes("Where the KV capacity goes (simulated, whole run)", "share of KV capacity, time-averaged (%)", "",
           ax=ax)
ax.legend([plots.label(component_names[c]) for c in breakdown.columns], loc="upper left",
          bbox_to_anchor=(1.01, 1.0), fontsize=8)
ax.invert_yaxis()
plt.show()

# %% [markdown]
# The paper measured the same split on its own systems (its Fig. 2) and the batch sizes they
# reached (its Fig. 13):

# %%
display(Markdown(quote_markdown("kv_usage_existing_systems", "fig2_breakdown", "batched_requests")))

# %% [markdown]
# The paper's bars have no idle part, so the plot below sets its Fig. 2 beside the simulation
# averaged only over the steps in which a request waited for memory.
#
# :::{dropdown} How we know: how our bars map to the paper's Fig. 2
# Averaged over the whole run, the bars above include the drain at the end, when nobody waits
# and memory sits idle. The paper's caption speaks of the average "during the experiment", and
# its bars have no idle part; we read it as the time in which requests were waiting for memory,
# and average the simulation over those steps only. That reading is our interpretation, not a
# method the paper states. Fig. 2's bar labels are drawn beside it; the mapping of our states to
# its segments is ours too: reserved and filled later is its "reservation", reserved and never
# filled its "internal frag.", holes and stranded slots its "external frag. & others".
# :::

# %%
ours, theirs = ["max_len", "exact", "paged:16"], ["Orca (Max)", "Orca (Oracle)", "vLLM"]
segments = {"token states": ["used"], "reservation": ["reserved_for_future"], "internal frag.": ["never_used"],
            "external frag. & others": ["external_frag", "stranded", "idle"]}
simulated_fig2 = pd.DataFrame({seg: sim.loc[ours, [f"{c}_pct_saturated" for c in cs]].sum(axis=1).values
                               for seg, cs in segments.items()},
                              index=ours)
paper_fig2 = fig2_breakdown()
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 3.6), sharey=False, layout="constrained")
paper_fig2.plot.barh(stacked=True, ax=left, legend=False)
simulated_fig2.plot.barh(stacked=True, ax=right, legend=False)
plots.axes("The paper's Fig. 2 (bar labels; unlabelled parts left blank)", "share of KV memory (%)", "", ax=left)
plots.axes("Simulated, steps in which a request waited", "share of KV capacity (%)", "", ax=right)
for ax in (left, right):
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
right.legend([plots.label(s) for s in segments], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
plt.show()

# %%
pd.DataFrame({
    "simulated, waiting steps: % holding tokens": sim.loc[ours, "used_pct_saturated"].round(1).values,
    "simulated, whole run: % holding tokens": sim.loc[ours, "used_pct"].round(1).values,
    "paper Fig. 2": [PAPER_FIGURES["fig2_token_states"].numbers[k] for k in theirs],
    "simulated: mean batch": sim.loc[ours, "mean_batch"].round(1).values,
    "paper Fig. 13 (ShareGPT)": [PAPER_FIGURES["batched_requests"].numbers[f"ShareGPT/{k}"] for k in theirs],
}, index=[f"{a} ({b})" for a, b in zip(ours, theirs, strict=True)])

# %% [markdown]
# :::{dropdown} How we know: why the columns differ from the paper's
# The simulation shows how much of the difference memory accounting alone explains; the paper's
# systems are not the same experiment.
#
# The two are not the same experiment, so read the columns side by side rather than expecting
# equality: the paper served OPT-13B on an A100 with real prefill and decode times, while the
# simulator makes every step cost the same and recomputation free, so only memory decides. The
# paper's Fig. 13 batch sizes were also measured at a request rate of 2 requests per second on
# ShareGPT (as `servelab/book/quoted_figures.py` records), while the simulation keeps a permanent backlog,
# so its batches are as large as memory allows.
# What the simulation shows is how much of the difference between the three approaches memory
# accounting alone explains.
# :::
#
# Block size trades two things. Inside a sequence, the last block is on average half empty, so
# larger blocks waste more (internal fragmentation); with block size 1 nothing is wasted. The
# plot sets the simulated waste beside the expected one, `(B - 1) / 2` empty slots per running
# request.
#
# :::{dropdown} How we know: the expected-waste line
# Block size trades two things. Inside a sequence, the last block is on average half empty, so
# larger blocks waste more (internal fragmentation, the `reserved_for_future` and `never_used`
# parts above); with block size 1 nothing is wasted. If the lengths are spread evenly over the
# block's residues, each running request leaves `(B - 1) / 2` slots empty on average, so the
# expected waste is the mean batch times that, over the capacity; the plot sets it beside the
# simulation. The expected line reuses the simulated mean batch, so the comparison tests only the
# assumption that lengths spread evenly over the block's residues, not the batch sizes.
# :::

# %%
paged = sim[sim.index.str.startswith("paged:")].copy()
paged["expected"] = [paging.expected_last_block_waste_pct(r.mean_batch, int(r.block_size), r.capacity_tokens)
                     for r in paged.itertuples()]
ax = plots.axes("Waste inside the last block grows linearly with block size", "block size (tokens)",
                "wasted share of KV capacity (%)")
ax.plot(paged.block_size, paged.wasted_pct, marker="o", label=plots.label("simulated"))
ax.plot(paged.block_size, paged.expected, linestyle="--", color="grey",
        label=plots.label("expected: mean batch x (B - 1) / 2 / capacity"))
ax.legend()
plt.show()

# %% [markdown]
# The other side of the trade-off is speed, which the simulator does not model: each block is a
# unit of work for the attention kernel, which reads keys and values through the block table.
# The paper measured what that indirection costs, and chose its block size from both sides:

# %%
display(Markdown(quote_markdown("attention_kernel_overhead", "default_block_size")))

# %% [markdown]
# ## The real engine under a small KV budget
#
# Now vLLM itself, with a deliberately small KV budget of `kv_tokens` tokens, out of which it
# carves whole blocks; the cell prints how many blocks of how many tokens it built.
#
# :::{dropdown} How we know: how the budget reaches vLLM
# Now vLLM itself. We give it a deliberately small KV budget of `kv_tokens` tokens. servelab
# passes vLLM that many tokens' worth of bytes (`--kv-cache-memory-bytes`: tokens times the KV
# bytes of one token of this model), and vLLM carves whole blocks out of them, sizing a block
# from its own model config. If vLLM's bytes per token agree with ours, it builds exactly
# `kv_tokens // block_size` blocks; that, not a prediction from the same formula, is what the
# check below tests.
# :::

# %%
from servelab.measure.chapter_servers import c03
from servelab.measure.kv_events import Recorder, record_paging
from servelab.measure.kv_memory.capacity import engine_capacity
from servelab.measure.paging import pressure as kv_pressure
from servelab.measure.paging import retraction
from servelab.measure.paging.block_size import (
    comparison_block_size,
    refusal_names_block_size,
    refused_start,
    shared_prompt_tokens,
    sharing_prompt_tokens,
)
from servelab.measure.paging.parallel_sampling import count_tokens, measure_parallel_sampling
from servelab.measure.workloads import long_prompt

# every server this chapter starts (`python -m servelab plan` lists them); the budget: the parameter, else two
# full-length sequences (vLLM refuses budgets below one)
servers = c03.servers(prof, kv_tokens=kv_tokens, sglang_conservativeness=sglang_conservativeness)
kv_tokens = servers["vLLM"].options["kv_cache_tokens"]
# both engines publish their KV-cache events to a recorder of ours, on 127.0.0.1, started before them
recorders = {engine: Recorder(engine, prof).start() for engine in ("vllm", "sglang")}
vllm = servers["vLLM"].server(prof, **recorders["vllm"].options()).start()
built = engine_capacity(vllm)
block_size, num_blocks = built["block_size"], built["blocks"]
print(f"vLLM {vllm.version()}: {num_blocks} blocks of {block_size} tokens out of "
      f"{kv_pressure.budget_bytes(vllm)} bytes for {kv_tokens} tokens; kv_tokens // block_size = "
      f"{kv_tokens // block_size}; one block, the null block, is never handed out")

# %%
# NBVAL_CHECK_OUTPUT
print(num_blocks == kv_tokens // block_size)

# %% [markdown]
# Next, `pressure_requests` requests of different lengths are sent at once; at full length they
# need `pressure_overfill` times the budget. vLLM admits requests while it has blocks for their
# prompts, and when a running request later
# needs a block that is not there, it preempts the most recently admitted one. A sampler reads
# the engine's gauges (live values such as the number of requests running).
#
# :::{dropdown} How we know: how the pressure run is built
# Reserving the model's maximum length per request, this budget would hold only a couple of them;
# reserving exactly what each needs, a few more (the numbers are printed below, as requests that
# would run at once; vLLM's time-averaged number running is a different kind of figure, since its
# requests end at different times).
#
# Next, `pressure_requests` requests are sent at once, each with a prompt of about
# `pressure_prompt_words` words, asking for answers long enough that, at full length, they
# need `pressure_overfill` times the budget. The answer lengths rise evenly from `1 - pressure_spread`
# to `1 + pressure_spread` times their mean, so the requests finish at different times, as real
# ones do. Greedy
# decoding, and every answer has exactly its length: the end-of-sequence token is refused until
# then (`min_tokens`). Reserving the model's
# maximum length per request, this budget would hold only a couple of them; reserving exactly
# what each needs, a few more. vLLM admits requests while it has blocks for their prompts, and
# when a running request later needs a block that is not there, it preempts the most recently
# admitted one: frees its blocks and puts it back at the front of the queue, to recompute its KV
# when it is readmitted (`Scheduler.schedule` in `vllm/v1/core/sched/scheduler.py`). The client
# records when each token of each answer arrives, and a sampler reads the engine's gauges.
# :::

# %%
prompts = [long_prompt(pressure_prompt_words, seed=seed * 1000 + i) for i in range(pressure_requests)]
prompt_tokens = [count_tokens(vllm, p) for p in prompts]
answer_tokens = kv_pressure.pressure_output_tokens(kv_tokens, pressure_requests, max(prompt_tokens),
                                                   pressure_overfill, pressure_spread)
needs = [p + a for p, a in zip(prompt_tokens, answer_tokens, strict=True)]
vllm_run = kv_pressure.run_pressure(vllm, prompts, answer_tokens)
for part in ("requests", "tokens", "timeline"):
    results.save(f"kv_pressure_vllm_{part}", getattr(vllm_run, part), prof, kv_tokens=kv_tokens)
vllm_pauses = kv_pressure.pauses(vllm_run.tokens)
simulated = kv_pressure.simulated_pressure(prompt_tokens, answer_tokens, block_size=block_size,
                                           blocks=num_blocks - 1, max_len=prof.max_model_len)
reserve = kv_pressure.reservation_fit(kv_tokens, prof.max_model_len, needs)
fit = pd.Series({
    "requests": pressure_requests,
    "tokens they need at full length, over the budget": round(sum(needs) / kv_tokens, 2),
    "max_len reservation would run at once": reserve["max_len"],
    "exact reservation would run at once": reserve["exact"],
    "vLLM: most running at once (gauge)": int(vllm_run.timeline["running"].max()),
    "vLLM: mean running while busy (time-averaged)": round(kv_pressure.busy_mean_running(vllm_run.timeline), 1),
    "simulator: mean running (step-averaged)": round(simulated["mean_batch"], 1),
    "vLLM: preemptions seen in the streams (pauses)": len(vllm_pauses),
    "vLLM: requests preempted at least once": int(vllm_pauses.req.nunique()),
    "vLLM: preemptions counted (vllm:num_preemptions)": int(vllm_run.timeline["evictions"].iloc[-1]),
    "simulator: preemptions": simulated["preemptions"],
})
fit

# %% [markdown]
# The most running at once is a momentary peak, because vLLM admits on the prompt alone; the
# time-averaged number running while busy is the fairer figure, and the from-scratch simulator,
# given the same requests and blocks, lands near it. The plot below follows the run over time.
#
# :::{dropdown} How we know: peak, time average and simulator
# The highest number of running requests is a momentary peak: vLLM admits on the prompt alone,
# so right after an admission wave more requests run than the budget can carry to the end. The
# time-averaged number running while anything was in the engine is the fairer figure, and the
# from-scratch simulator, given the same requests and the same blocks, lands near it; it counts
# steps rather than seconds, and its prefills and recomputations cost nothing, so the two agree
# only roughly. The engine's time average also includes the first seconds in which the API server
# had not yet handed most requests to the scheduler (see below), a lag the simulator lacks, so
# a close match between the two is partly coincidence.
# :::

# %%
fig = plot_pressure(vllm_run, vllm_pauses, "vLLM with a small KV budget")
plt.show()

# %% [markdown]
# The red lines mark preemptions where they happened: a request's own stream paused while the
# other requests went on receiving tokens. The engine's own counter, dashed, moves later, once the
# preempted request runs again.
#
# :::{dropdown} How we know: the pauses, the counter and the first seconds
# The red lines mark preemptions where they happened: a request's own stream paused while the
# other requests went on receiving tokens (`servelab.measure.paging.pressure.pauses`). The engine's
# counter, dashed, steps later: vLLM's front end counts a preemption when the preempted
# request's next output arrives (`PREEMPTED` events in `vllm/v1/metrics/stats.py`), that is,
# once it runs again. The gauges are updated once per engine step, so a long step, such as
# recomputing several preempted prompts at once, shows as a flat stretch.
#
# All requests were sent within milliseconds (`sent_s` in the saved table), yet in the first
# seconds the engine's gauges may show a single request running and nobody waiting: the others
# had not reached the scheduler. They were still in vLLM's API server process (HTTP handling,
# chat template, tokenization), which on this machine shares its cores with the busy engine. The
# grey band marks those seconds: it ends at the first sample in which the gauges count every
# request the client had in flight (`gauges_catch_up_s` in `servelab/measure/paging/pressure.py`).
# SGLang's running gauge counts a newly prefilled request only at its next decode report, so on SGLang
# the band lasts until the first decode step after the first prefill.
# :::
#
# Each lane below is one request. A preempted one waits, then recomputes its prompt and the tokens
# it had generated, except what vLLM's prefix cache still holds: the prefix cache indexes full
# blocks by a hash of their tokens, so a request that begins with the same tokens finds them again.
#
# :::{dropdown} How we know: what a preempted request finds again
# The cost of preemption shows up per request: a preempted request waits, then recomputes its
# prompt and the tokens it had already generated before it can continue, except what vLLM's prefix
# cache still holds: vLLM hashes every full block a request writes, prompt and generated tokens
# alike (`KVCacheManager.allocate_slots` in `vllm/v1/core/kv_cache_manager.py`), and a preempted
# request's blocks go to the free queue with their hashes, so the full blocks nobody reused
# meanwhile are found again when it is readmitted. Each lane below is one
# request, in the order the requests were sent; that order among requests sent in the same
# milliseconds is arbitrary, so do not read meaning into it.
# :::

# %%
plot_request_lanes(vllm_run, vllm_pauses, "Each request on vLLM")
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print(fit["vLLM: most running at once (gauge)"] > fit["max_len reservation would run at once"],
      fit["vLLM: preemptions seen in the streams (pauses)"] > 0,
      fit["vLLM: preemptions counted (vllm:num_preemptions)"] > 0)

# %% [markdown]
# ## Sharing: parallel sampling
#
# Asking for `n` answers to one prompt (`n > 1` in the API) is where blocks get shared: the
# prompt's full blocks are held once, and each sample gets its own copy of the prompt's last,
# partly filled block to write its tokens into. The from-scratch allocator predicts the count;
# the engine's KV usage gauge measures it.
#
# :::{dropdown} How we know: what each sample holds, and why the prompt has this length
# Asking for `n` answers to one prompt (`n > 1` in the API) is where blocks get shared: all
# samples have the same prompt, so its full blocks can be held once. Each sample still needs its
# own copy of the prompt's last, partly filled block, because it will write its own tokens
# there. The from-scratch allocator predicts the count; the engine's KV usage gauge measures it.
# At the end each sample stores its prompt and all its generated tokens but the last, which is
# sampled and returned but never fed back into the model, so the allocator is given one token less.
#
# Later in the chapter a second server repeats this with another block size. So that the two can
# differ in what they share, the prompt is made exactly as long as `sharing_prompt_tokens` says:
# about `sample_prompt_tokens`, at a length where the smaller block holds more of the prompt in
# full blocks than the larger one.
# :::

# %%
other_block_size = comparison_block_size(block_size)
small, large = sorted((block_size, other_block_size))
sample_tokens = sharing_prompt_tokens(sample_prompt_tokens, small, large)
print(f"prompt of {sample_tokens} tokens: full blocks hold {shared_prompt_tokens(sample_tokens, small)} of them "
      f"with blocks of {small}, {shared_prompt_tokens(sample_tokens, large)} with blocks of {large}")
sharing = measure_parallel_sampling(vllm, samples, num_blocks=num_blocks, block_size=block_size,
                                    prompt_tokens=sample_tokens, output_tokens=sample_output_tokens, seed=seed)
results.save("parallel_sampling_blocks", sharing, prof)
sharing.round(1)

# %%
ax = plots.axes("KV blocks held by n samples of one prompt", "n (samples)", "KV blocks")
ax.plot(sharing.n, sharing["blocks without sharing"], marker="o", label=plots.label("without sharing"))
ax.plot(sharing.n, sharing["predicted blocks"], marker="o", label=plots.label("from-scratch allocator"))
ax.plot(sharing.n, sharing["measured blocks"], marker="x", linestyle="none", markersize=10,
        label=plots.label("vLLM, measured"))
ax.axhline(num_blocks - 1, color="grey", linestyle=":", label=plots.label("blocks vLLM can hand out"))
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print((sharing["measured blocks"] == sharing["predicted blocks"]).all())

# %%
vllm_paging, vllm_referee = record_paging(vllm, recorders["vllm"])  # drawn after SGLang's runs
vllm.stop()

# %% [markdown]
# The engine holds exactly what the from-scratch allocator predicts. Compare the blocks
# without sharing with the line of blocks vLLM can hand out: that is how much of this budget
# sharing frees for other requests.
#
# How much sharing saves depends on how much of each sample is prompt. Here the prompt is long
# and the answers short, so the saving is large. The paper reports smaller savings for parallel
# sampling on its traces, where answers are long compared with prompts:

# %%
display(Markdown(quote_markdown("sharing_saving_alpaca", "sharing_saving_sharegpt")))

# %% [markdown]
# ## SGLang under the same budget
#
# SGLang pages its KV cache too, with pages of one token, so no page is partly filled, and its
# radix cache (a tree of the token sequences it has stored) shares any common beginning. It gets
# the same budget and the same requests.
#
# :::{dropdown} How we know: SGLang's page size and budget flags
# SGLang pages its KV cache too, with pages of one token (`--page-size` resolves to 1 here), so
# a request never holds a partly filled page, and its radix cache shares any common prefix down
# to the token. We give it the same budget in tokens (`--max-total-tokens`) and send it the same
# requests.
# :::
#
# vLLM admits a request when its prompt fits. SGLang admits one only if its prompt and its whole
# `max_tokens` (the most tokens it may generate) fit beside the running requests' remaining
# `max_tokens` times a `new_token_ratio`, which decays step by step. This run lowers that ratio
# (`--schedule-conservativeness`), so that SGLang counts on running requests needing little more:
# that is when it can run out of KV.
#
# :::{dropdown} How we know: SGLang's admission rule
# Its scheduler differs from vLLM's before memory runs out. vLLM admits a request when its prompt
# fits. SGLang admits one only if its prompt and its whole `max_tokens` fit beside what the running
# requests are still expected to need: their remaining `max_tokens` times a `new_token_ratio`
# (`PrefillAdder.add_one_req` in `sglang/srt/managers/schedule_policy.py`); once a request is
# refused, it tries again only after a running request has left. The ratio starts at 0.7 times
# `--schedule-conservativeness` and decays step by step to 0.14 of that (`SGLANG_INIT_NEW_TOKEN_RATIO`
# and `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` in `sglang/srt/environ.py`). For requests with
# `ignore_eos` the ratio is 1: their length is known, so SGLang reserves all of it and never has to
# take anything back; that is why these requests force their length with `min_tokens` instead. So
# that SGLang counts on running requests needing little more, which is when it can run out of KV,
# this run sets `--schedule-conservativeness` to `sglang_conservativeness`.
# :::
#
# When a decode step (one new token for every running request) does not fit, SGLang retracts: it
# sends the running requests with the fewest generated tokens back to the queue until the step
# fits, where vLLM sends back the most recently admitted one. Both recompute what they no longer
# hold.
#
# :::{dropdown} How we know: what each engine keeps of an evicted request
# When a decode step does not fit, SGLang retracts (`ScheduleBatch.retract_decode` in
# `sglang/srt/managers/schedule_batch.py`): it sorts the running requests by the number of
# tokens they have generated, and sends back to the queue the one with the fewest (among equals,
# the one with the longest prompt), then the next, until the step fits, always keeping one.
# vLLM sends back the most recently admitted request instead. Both free the evicted request's KV
# and recompute what they no longer hold, but they keep different parts of it. vLLM frees the
# blocks into its free queue with their prefix-cache hashes, so every full block, of the prompt and
# of the generated tokens, stays findable until it is reused. SGLang stores a request's prompt in
# its radix tree as soon as the prompt is prefilled (`checkpoint_kv_cache` in
# `sglang/srt/mem_cache/common.py`, called from
# `sglang/srt/managers/scheduler_components/batch_result_processor.py`). When it retracts the
# request (`release_req` in `sglang/srt/managers/schedule_batch.py`), it frees the generated tokens
# without storing them (`release_kv_cache(..., checkpoint=False)` in
# `sglang/srt/mem_cache/common.py`) and unlocks the prompt, which stays in the tree but may now be
# evicted; then it evicts 20 tokens per remaining request from the tree
# (`SGLANG_RETRACT_DECODE_STEPS`), least recently used leaves first, and these can include that very
# prompt. What is still in the tree when the request is readmitted is found again; the rest is
# recomputed.
# After a retraction SGLang sets its ratio to the tokens the remaining requests have generated,
# plus 20 each, over their `max_tokens` (`estimate_new_token_ratio_after_retract`), so it admits
# more cautiously. Its counter, `sglang:num_retracted_requests_total`, counts a retraction when it
# happens, and its log says `KV cache pool is full. Retract requests.`
# :::

# %%
retraction_sizes = retraction.sizes(prof.is_cpu)
retraction_answer = retraction_answer or retraction_sizes["answer"]
retraction_lag = retraction_lag or retraction_sizes["lag"]
with servers["SGLang"].server(prof, **recorders["sglang"].options()) as sg:
    sglang_capacity = engine_capacity(sg)
    sglang_tokens = sglang_capacity["tokens"]
    sglang_run = kv_pressure.run_pressure(sg, prompts, answer_tokens)
    forced = retraction.force(sg, sglang_conservativeness, seed=seed, answer=retraction_answer, lag=retraction_lag)
    # drawn after the retraction; the same tokens as vLLM's, sized in vLLM's blocks
    sglang_paging, sglang_referee = record_paging(sg, recorders["sglang"], block=block_size)
for part in ("requests", "tokens", "timeline"):
    results.save(f"kv_pressure_sglang_{part}", getattr(sglang_run, part), prof, kv_tokens=kv_tokens,
                 schedule_conservativeness=sglang_conservativeness)
sglang_pauses = kv_pressure.pauses(sglang_run.tokens)
engines = pd.DataFrame({
    run.engine: {
        "KV tokens it can hand out": capacity,
        "most running at once (gauge)": int(run.timeline["running"].max()),
        "mean running while busy (time-averaged)": round(kv_pressure.busy_mean_running(run.timeline), 1),
        "evictions seen in the streams (pauses)": len(found),
        "requests evicted at least once": int(found.req.nunique()),
        "evictions counted by the engine": int(run.timeline["evictions"].iloc[-1]),
        "prompt tokens found in its prefix cache": int(run.timeline["cached_tokens"].iloc[-1]),
        "answers of full length": int((run.requests.completion_tokens == run.requests.max_tokens).sum()),
    }
    for run, found, capacity in ((vllm_run, vllm_pauses, built["usable"]), (sglang_run, sglang_pauses, sglang_tokens))
})
engines

# %%
fig = plot_pressure(sglang_run, sglang_pauses, "SGLang with the same KV budget")
plt.show()
plot_request_lanes(sglang_run, sglang_pauses, "Each request on SGLang")
plt.show()

# %% [markdown]
# Compare the columns rather than the clocks. The eviction rows (an eviction is a preemption or a
# retraction) say whether each engine ran out of KV. vLLM's requests hold whole blocks, up to a
# block of empty slots each; SGLang holds exactly the tokens it stores and admits a request only
# if its answer fits too, so it runs out later.
#
# :::{dropdown} How we know: clocks, shared prefixes and SGLang's gauges
# Compare the columns rather than the clocks: on the cpu profile SGLang runs a pure-PyTorch
# attention on one thread, so its seconds say little about its scheduler. The eviction rows say
# whether each engine ran out of KV on these requests. The two spend the same budget differently.
# vLLM admits on the prompt alone, and each request holds whole blocks of the size printed above,
# up to a block's worth of empty slots. SGLang holds exactly the tokens it stores (pages of one
# token), shares the chat template's common beginning to the token (the prefix-cache row: on this
# profile shorter than one of vLLM's blocks, whose size is printed above, so vLLM shares none of
# it; with the 16-token blocks of the GPU profiles that need not hold), and reserves a newcomer's whole answer, so
# the same budget carries it further before a decode step fails. When one does fail, SGLang
# retracts as described above, and its counter moves at the retraction itself, where vLLM's moves
# only when the preempted request runs again. Either way an evicted request frees its KV and pays
# for it later in latency. SGLang updates its gauges with each prefill batch and every
# `--decode-log-interval` decode steps (`report_decode_stats` in
# `sglang/srt/managers/scheduler_components/metrics_reporter.py`). By default that is every 40
# steps, and between two updates a gauge would hold a stale value for up to 40 steps; this server
# was started with `--decode-log-interval 1`, so, like vLLM's, its gauges are updated every step.
# :::
#
# :::{dropdown} How we know: what the eviction check tests
# Whether SGLang retracted at all is its value in the eviction rows. Where that is 0, this run did
# not make SGLang retract, and the SGLang half of the check below is then trivially true (0 is
# not more than 0); only vLLM's half tests anything. The next section makes SGLang retract on
# purpose.
#
# The check below compares the evictions seen in the streams with each engine's own count: the
# streams can miss an eviction (a request evicted before its first token shows no pause) but must
# never invent one.
# :::

# %%
# NBVAL_CHECK_OUTPUT
seen, counted = engines.loc["evictions seen in the streams (pauses)"], engines.loc["evictions counted by the engine"]
print((seen <= counted).all(), (engines.loc["answers of full length"] == pressure_requests).all())

# %% [markdown]
# ### Making SGLang retract
#
# A request that arrives while others decode sees their remaining answers only at the ratio. So
# the same server was sent two waves: first a few requests that just fill the pool even at full
# length, then, once each had its first token, one late request as long as fits beside them when
# their answers count at the ratio. It is admitted, and the pool now holds less than the early
# requests are about to write.
#
# :::{dropdown} How we know: how the two waves are sized
# SGLang's admission rule says when it can run out: a request that arrives while others decode
# sees their remaining answers only at the ratio, here at most 0.7 x `sglang_conservativeness`.
# So the same server, still running with the same budget, was sent two waves
# (`servelab.measure.paging.retraction.plan`): first a few requests whose prompts and answers together
# just fill the pool, so they fit even if every answer runs to its full length, however SGLang
# splits them into prefill batches; then, once each of them had its first token, one late request
# as long as fits beside them when their answers count at the ratio. It is admitted, and the pool
# now holds less than the early requests are about to write. The plan sizes the late request for
# any delay of up to `retraction_lag` generated tokens before its admission (the table shows the
# delay this run had), and gives every answer enough tokens that all requests still run when the
# free tokens run out. The lengths are tokens, exact on this model's tokenizer, and the plan counts
# pages of one token, which the table shows this server used (`force` refuses other page sizes). The
# prompts share the chat template's beginning, which the radix tree stores once; the plan counts it
# once too, and `force` checks the prompts it sent against that count before the run.
# :::

# %%
plan = forced.plan
forced_pauses = kv_pressure.pauses(forced.run.tokens)
for part in ("requests", "tokens", "timeline", "events"):
    data = forced.events if part == "events" else getattr(forced.run, part)
    results.save(f"kv_retraction_sglang_{part}", data, prof, kv_tokens=kv_tokens,
                 schedule_conservativeness=sglang_conservativeness, answer=retraction_answer, lag=retraction_lag)
first_event = forced.events.iloc[0] if len(forced.events) else None
readmitted = forced.readmitted.iloc[0] if len(forced.readmitted) else None
ratio_low, ratio_high = forced.ratio_after_range()
pd.Series({
    "SGLang's pool (tokens)": plan.capacity,
    "SGLang's page size (tokens)": sglang_capacity["block_size"],
    "prompt tokens every prompt shares (stored once)": plan.shared,
    "prompt tokens the prompts sent hold in a radix tree": forced.held,
    "early requests: prompt + answer tokens, each": f"{plan.first_prompt} + {plan.first_answer}",
    "early requests: how many": plan.first_requests,
    "late request: prompt + answer tokens": f"{plan.second_prompt} + {plan.second_answer}",
    "early answers still to come, as SGLang counts them (at most)": plan.reserved_at_ratio,
    "early answers still to come, at full length (at most)": plan.first_requests * plan.first_answer,
    "late request admitted by SGLang's rule, early answers at the ratio":
        plan.late_admitted(forced.early_tokens, plan.ratio),
    "late request admitted by SGLang's rule, early answers at full length": plan.late_admitted(0, 1.0),
    "early tokens received before the late request's first (plan allows)":
        f"{forced.early_tokens} ({plan.lag})",
    "requests retracted (sglang:num_retracted_requests)": forced.counted,
    "requests retracted (its log)": forced.logged,
    "retractions seen in the streams (pauses)": len(forced_pauses),
    "requests paused": ", ".join(str(r) for r in sorted(forced_pauses.req.unique())) or "none",
    "new_token_ratio before -> after the first retraction":
        f"{first_event.ratio_before} -> {first_event.ratio_after}" if first_event is not None else "no retraction",
    "ratio after, SGLang's formula from the streams' counts (+-1 token each)":
        f"{ratio_low:.4f} to {ratio_high:.4f}",
    "readmission prefill: tokens computed, tokens found in the tree":
        f"{readmitted.new_tokens}, {readmitted.cached_tokens}" if readmitted is not None else "none logged",
    "answers of full length": f"{int((forced.run.requests.completion_tokens == forced.run.requests.max_tokens).sum())}"
                              f" of {len(forced.run.requests)}",
})

# %%
fig = plot_pressure(forced.run, forced_pauses, "SGLang, two waves: the late request takes the early ones' room")
plt.show()
plot_request_lanes(forced.run, forced_pauses, "Each request of the two waves (the last one came late)")
plt.show()

# %% [markdown]
# A few decode steps after the late request is admitted, a step no longer fits and SGLang
# retracts the request with the fewest generated tokens: the late one (the last lane), which waits
# until early requests finish and then recomputes what SGLang no longer holds.
#
# :::{dropdown} How we know: what the late request found again
# The pool fills with the early prompts, the late request is admitted beside them, and a few
# decode steps later a step no longer fits: SGLang retracts. Its victim is the request with the
# fewest generated tokens, the late one (the last lane), which waits until early requests finish.
# The table quotes SGLang's log for its readmission: the prefill batch that took it back computed
# the tokens printed there and found the rest in the radix tree. Where the tree kept only the
# shared beginning, the retraction's eviction of 20 tokens per remaining request took the late
# request's own prompt (the least recently used leaf), and it recomputed that prompt and the tokens
# it had generated. Its log line also shows the ratio jump from its decayed starting value to the
# estimate from the remaining requests, so the next admissions are cautious; the table recomputes
# that estimate with SGLang's formula from the tokens the streams had received, which is not how
# the plan was made.
# :::
#
# SGLang's retraction is the price of counting running answers at less than their full length,
# which lets it run more requests at once when answers end early, as real ones often do.
#
# :::{dropdown} How we know: what the retraction check tests
# The late request got in only because the early answers counted at the ratio. By the same rule,
# with the early answers counted at their full length it would not have been admitted (the
# table's two admission rows, computed from the plan, not run): it would have waited until an early
# request finished, and nothing would have been retracted.
#
# The check below asks that SGLang retracted at least once, that its counter and its log agree,
# that the streams saw no more retractions than it counted and that every pause was the late
# request's, that the early requests had generated no more tokens before the late one started than
# the plan allows, that the ratio SGLang logged lies in the range its formula gives from the
# streams, and that every answer still arrived in full.
# :::

# %%
# NBVAL_CHECK_OUTPUT
full = (forced.run.requests.completion_tokens == forced.run.requests.max_tokens).all()
logged_ratio = first_event.ratio_after if first_event is not None else float("nan")
print(forced.counted >= 1, forced.logged == forced.counted, len(forced_pauses) <= forced.counted,
      set(forced_pauses.req) == {forced.late}, forced.early_tokens <= plan.lag,
      bool(ratio_low - 5e-5 <= logged_ratio <= ratio_high + 5e-5), bool(full))

# %% [markdown]
# ## Both engines' own record
#
# Both engines can publish every KV block or page they store and evict. A recorder of ours
# listened while each served four requests, one at a time, each generating a fixed number of
# tokens: a document A whose answer fills a block while it decodes, A with that answer and a
# question, then two documents, the second too large to fit beside what the others left cached.
# The events name blocks only by a hash of their tokens, so the picture draws our own caches
# replayed on the same tokens, checked against the engines' events. Drag the slider: vLLM's pool
# left (blocks by hash), SGLang's tree right (nodes by their first token ids), each step's engine
# events below.
#
# :::{dropdown} How we know: the recording, and the referee behind the picture
# Both servers were started with `--kv-events-config`, pointing at a port on 127.0.0.1 where our
# recorder listens (`servelab/engines/engine_side/kv_event_recorder.py`, in each engine's venv,
# decoding with the engine's own `KVEventBatch`); each engine's publisher connects to it. The events
# name blocks by hash, not by position, so the picture draws our own caches replayed on the same
# tokens, prompts and generated tokens alike, with each engine's events beside them; a referee
# (`servelab/measure/kv_events/paging_replay.py`) compares what each engine stored and removed,
# request by request, with what our cache did, and the check below prints True only where all agree
# (a hit the engine did not report, or SGLang pages of more than one token, count as disagreement).
#
# What the engines do, read in the installed sources and seen in the traces. vLLM, on this CPU
# build, stores a block in the step that computes its last token (`allocate_slots` in
# `vllm/v1/core/kv_cache_manager.py`, `cache_full_blocks` in `vllm/v1/core/block_pool.py`), prompt
# and output alike (with asynchronous scheduling, on by default on GPUs, one step later); the last
# generated token's KV is never computed, so it fills nothing. A finished request's blocks stay
# cached in the free queue, tail first, until a new request takes them. SGLang puts a request's
# prompt into its tree once it is prefilled (`checkpoint_kv_cache` in
# `sglang/srt/mem_cache/common.py`, called from `batch_result_processor.py`; the server's
# `UnifiedRadixCache.checkpoint_into_tree`) and its generated tokens whose KV was computed when it
# finishes (`release_kv_cache`); the answer hangs below the prompt as a leaf, so eviction drops it
# before the prompt. The recording ran after the pressure runs, on the same servers, from an emptied
# cache; the events published before it are counted but not saved. The referee compares what was
# stored and removed per request, not exactly when within it; the picture places SGLang's stores by
# their pages: the prompt's when the request is admitted, the answer's when it finishes.
# :::

# %%
from servelab.book.kv_event_recording import print_referees, save_and_draw

save_and_draw("kv_events_paging", {"vllm": (vllm_paging, vllm_referee), "sglang": (sglang_paging, sglang_referee)},
              prof, plots.label("The engines' own KV-cache events while requests decode"), kv_tokens=kv_tokens)

# %% tags=["hide-output"]
print_referees(vllm_referee, sglang_referee)

# %%
# NBVAL_CHECK_OUTPUT
table = {r.engine: r.table.set_index("request").drop("start") for r in (vllm_referee, sglang_referee)}
print(vllm_referee.agree, sglang_referee.agree, (table["vllm"].engine_stored > 0).all(),
      table["vllm"].engine_removed.iloc[-1] > 0, table["sglang"].engine_removed.iloc[-1] > 0)

# %% [markdown]
# vLLM stored each block once a step filled it, answers included, and kept it cached after the
# request ended, until the last document needed the room. SGLang stored each prompt once prefilled
# and its answer at the end. Our replayed caches stored and evicted what the engines reported.
#
# ## Block size on the engine
#
# Each attention backend (the kernels that compute attention through the block tables) accepts
# only some block sizes, and vLLM refuses a size its backend cannot use only when it starts. The
# cell starts it with a size its backend refuses and prints the first error the engine logs.
#
# :::{dropdown} How we know: which block sizes vLLM accepts, and where
# On this profile vLLM chose the block size printed above. vLLM's default is 16 tokens
# (`CacheConfig.DEFAULT_BLOCK_SIZE` in `vllm/config/cache.py`), and its CPU platform raises it to
# 128 (`CpuPlatform.check_and_update_config` in `vllm/platforms/cpu.py`). `--block-size` takes
# any positive integer, but each attention backend accepts only some
# (`get_supported_kernel_block_sizes` in `vllm/v1/attention/backends/`): multiples of 32 for the
# CPU backend; multiples of 16 for FlashAttention, Triton and FlexAttention; 16, 32 or 64 for
# FlashInfer. These are the common cases, not every one: FlashAttention asks for multiples of 64 on
# Intel XPUs and fixed sizes for some FA4 cases, and FlashInfer adds pages of 128 and more on
# Blackwell GPUs for models with grouped query heads. vLLM's argument checks do not know the backend
# yet and accept any positive size
# (`CacheConfig.block_size` is declared `Field(default=None, gt=0)`; servelab's own flag check,
# `servelab.engines.flags.check`, which runs those parsers, accepts it too, as its tests show). The
# engine refuses a size its backend cannot use only while it starts. The cell starts it with the
# paper's 16 where that is not the default (else 8) and prints the first error the engine logs.
# :::

# %%
probe_server = servers["vLLM, refused block size"]
probe = probe_server.options["block_size"]
refusal = refused_start(probe_server, prof)
print(f"vllm serve --block-size {probe}: {refusal or 'started'}")

# %%
# NBVAL_CHECK_OUTPUT
print(refusal_names_block_size(refusal))

# %% [markdown]
# Another block size changes what parallel sampling shares: the prefix cache shares only full
# blocks, so smaller blocks share more of the prompt. A second server repeats the experiment with
# another block size.
#
# :::{dropdown} How we know: which other block size
# The paper found block sizes from 16 to 128 worked best on its ShareGPT trace and chose 16 as
# its default (§7.2, quoted above). What another block size changes is visible with the
# parallel-sampling experiment: the last, partly filled block of every sample is smaller or
# larger, and the prefix cache, which shares only full blocks, shares more of the prompt with
# smaller blocks. The second server uses half the default block size where the backends accept
# it and twice the default where they do not (`comparison_block_size`: on GPUs, half of 16 is
# below what any backend takes).
# :::

# %%
assert servers["vLLM, other block size"].options["block_size"] == other_block_size
with servers["vLLM, other block size"].server(prof) as other:
    built_other = engine_capacity(other)
    sharing_other = measure_parallel_sampling(
        other, samples, num_blocks=built_other["blocks"], block_size=built_other["block_size"],
        prompt_tokens=sample_tokens, output_tokens=sample_output_tokens, seed=seed)
by_block = pd.concat([sharing, sharing_other])
results.save("parallel_sampling_block_size", by_block, prof)
by_block.pivot(index="n", columns="block size", values=["KV tokens held", "shared prompt tokens"])

# %%
ax = plots.axes("KV held by n samples, by block size (vLLM, measured)", "n (samples)", "KV tokens held")
for size, rows in by_block.groupby("block size"):
    ax.plot(rows.n, rows["KV tokens held"], marker="o", label=f"{plots.label('block size')} {size}")
ax.set_ylim(0)
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
held = by_block.pivot(index="n", columns="block size", values="KV tokens held")
shared = by_block.pivot(index="n", columns="block size", values="shared prompt tokens")
several = shared.index > 1
print((sharing_other["measured blocks"] == sharing_other["predicted blocks"]).all(),
      (held[small] <= held[large]).all(), (shared.loc[several, small] > shared.loc[several, large]).all())

# %% [markdown]
# ## How vLLM implements this today
#
# Current vLLM (the V1 engine) kept the paper's idea, blocks read through a block table, and
# replaced its custom CUDA kernel; the dropdown names the files that implement each part.
#
# :::{dropdown} How we know: the vLLM files behind each part of the mechanism
# The PagedAttention paper describes a custom CUDA kernel that reads keys and values through a
# block table. Current vLLM (the V1 engine) kept the idea and replaced the kernel. The files
# below are in the installed package (`vllm/...`); open them alongside this chapter.
#
# - `v1/core/block_pool.py`, `BlockPool`: every physical block, the free queue and the
#   prefix-cache index from block hash to block. The free queue (`FreeKVCacheBlockQueue` in
#   `v1/core/kv_cache_utils.py`) starts in block-id order; freed blocks without a hash go to its
#   front, the most recently freed reused first, and freed blocks with a hash go to its back, so
#   cached blocks are evicted least recently used first. Block 0 is set aside as a "null block",
#   which is why the usage gauge divides by one block fewer.
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
# - The worker's copy of the block tables, handed to the attention backend every step, lives in
#   one of two files. `v1/worker/gpu/block_table.py` belongs to the newer GPU model runner
#   (`v1/worker/gpu/model_runner.py`), which vLLM uses by default when Triton is installed and
#   the model uses no feature it lacks (`VllmConfig.use_v2_model_runner` in `vllm/config/vllm.py`;
#   `VLLM_USE_V2_MODEL_RUNNER` forces the choice). Otherwise it is `v1/worker/block_table.py`.
#   The CPU worker follows the same rule (`CPUWorker` in `v1/worker/cpu_worker.py`): with Triton it
#   loads the newer runner of `v1/worker/cpu/model_runner.py`; this CPU build has no Triton, so its
#   `CPUModelRunner` extends the older `GPUModelRunner` and uses `v1/worker/block_table.py`.
# - `v1/attention/backends/`: the kernels that read through block tables. On GPUs these are
#   FlashAttention, FlashInfer or Triton kernels; on CPU, `cpu_attn.py` calls vLLM's own C++
#   kernel. The original `paged_attention_v1` and `v2` wrappers are gone from
#   `vllm/_custom_ops.py`.
# :::

# %% [markdown]
# ## What it means
#
# Paging turns the wasted reservation of contiguous allocation into room for more running
# requests: that is where its throughput comes from. Shared blocks make parallel sampling cheap;
# across requests they are the next chapter's prefix cache.

# %% [markdown]
# ## What to remember
#
# - Reserve KV memory a block at a time, not a slab for the longest possible answer: the
#   simulation's table shows the freed room as a larger mean batch.
# - Smaller blocks waste less and share more of a prompt, but each block is a unit of work for the
#   attention kernel, and each backend accepts only some sizes.
# - When the budget is overcommitted, vLLM preempts and SGLang retracts; the evicted request
#   recomputes what is no longer held and pays in latency. Watch the engines' eviction counters.
# - SGLang counts running answers at less than their full length: more requests run at once when
#   answers end early, and it retracts when they do not.
# - Parallel sampling shares a prompt's full blocks, which saves most for long prompts and short
#   answers.

# %% [markdown]
# ## Exercises
#
# 1. (5 min, no engine) In the simulator, which block sizes waste less than 2 % of the KV
#    capacity? Does the mean batch size keep growing as the block shrinks?
# 2. (10 min, no engine) Redo the parallel-sampling count with a short prompt and long answers
#    (`sample_prompt_tokens=60`, `sample_output_tokens=512`). How does the saving compare with the
#    paper's figures now?
# 3. (15 min, no engine) With the requests of the pressure run, what is the smallest `kv_tokens`
#    for which vLLM never preempts? Work it out from the block counts.
#
# Fill in each stub, then run the check below it. Solutions are hidden below.

# %%
# Exercise 1: your answer. `sim` is the simulation's table: one row per policy ("paged:..." rows are paged),
# with columns block_size, wasted_pct and mean_batch.
from servelab.book import exercise_check
from servelab.measure.exercises import paged_attention as answers


def block_size_answer(sim: pd.DataFrame) -> dict:
    """{"block sizes": [sizes wasting < 2 %, ascending], "mean batch keeps growing": True or False}"""
    raise NotImplementedError


# %%
exercise_check.check(block_size_answer, answers.waste_cases(sim), title="Exercise 1")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1: from the simulation above.
waste = sim.loc[sim.index.str.startswith("paged:"), ["block_size", "wasted_pct", "mean_batch"]]
waste = waste.sort_values("block_size", ascending=False)
print(waste.round(2))
below = sorted(int(b) for b in waste.block_size[waste.wasted_pct < 2])
steps = waste.mean_batch.diff().dropna()  # change in mean batch as the block shrinks
trend = "keeps growing" if (steps > 0).all() else "stops growing"
print(f"Of those simulated, block sizes {below} waste less than 2 % of the capacity. "
      f"As the block shrinks the mean batch {trend}, "
      f"by {steps.iloc[0]:.1f} requests from {int(waste.block_size.iloc[0])} to {int(waste.block_size.iloc[1])} "
      f"but only {steps.iloc[-1]:.1f} from {int(waste.block_size.iloc[-2])} to {int(waste.block_size.iloc[-1])}: "
      "once the last block wastes little, the tokens themselves fill the memory.")


def block_size_answer(sim: pd.DataFrame) -> dict:
    return {"block sizes": below, "mean batch keeps growing": trend == "keeps growing"}


exercise_check.check(block_size_answer, answers.waste_cases(sim), title="Solution 1")

# %%
# Exercise 2: your answer. The chapter sends `sharing_prompt_tokens(60, small, large)` prompt tokens for
# sample_prompt_tokens=60; count blocks with `parallel_sampling_blocks` (no engine needed).
short_prompt = sharing_prompt_tokens(60, small, large)


def saving_pct(prompt_tokens: int, output_tokens: int, n: int, block_size: int) -> float:
    """The share of blocks (%) that `n` samples save by sharing their prompt's blocks."""
    raise NotImplementedError


# %%
exercise_check.check(saving_pct, answers.saving_cases(short_prompt, 512, samples, (small, large)), title="Exercise 2")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2: the allocator predicts it without an engine; above, the engine matched the allocator
# block for block. The chapter turns sample_prompt_tokens=60 into the prompt length it actually sends.
short_prompt, long_answer = sharing_prompt_tokens(60, small, large), 512


def saving_pct(prompt_tokens: int, output_tokens: int, n: int, block_size: int) -> float:
    blocks = parallel_sampling_blocks(prompt_tokens, output_tokens, n, block_size)
    return 100 * (1 - blocks["shared"] / blocks["unshared"])


exercise_check.check(saving_pct, answers.saving_cases(short_prompt, 512, samples, (small, large)), title="Solution 2")
savings = {}
for size in (small, large):
    for n in samples[1:]:
        blocks = parallel_sampling_blocks(short_prompt, long_answer, n, size)
        savings[(size, n)] = 100 * (1 - blocks["shared"] / blocks["unshared"])
print(pd.Series(savings, name="saved (%)").rename_axis(["block size", "n"]).round(1).unstack())
paper = PAPER_FIGURES["sharing_saving_sharegpt"].numbers
low, high = paper["parallel_low"], paper["parallel_high"]
best = max(savings.values())
where = "below" if best < low else "within" if best <= high else "above"
print(f"With a {short_prompt}-token prompt and {long_answer}-token answers sharing saves at most {best:.1f} %, "
      f"{where} the paper's {low}-{high} % for parallel sampling on ShareGPT: the prompt is a small share of each "
      f"sample, and only its full blocks ({short_prompt // small * small} tokens with blocks of {small}, "
      f"{short_prompt // large * large} with blocks of {large}) are shared; each sample's last, partly "
      "filled block is its own, and with long answers most of a sample's blocks are its own answer.")

# %%
# Exercise 3: your answer. `prompt_tokens` and `answer_tokens` are the pressure run's requests, all sent at once;
# vLLM's blocks hold `block_size` tokens and one block is its null block. Check it with
# `kv_pressure.simulated_pressure`, and, if you like, on the engine: rerun the chapter with that `kv_tokens`
# (a server restart, about 10 min on the cpu profile).


def smallest_kv_tokens() -> int:
    """The smallest `kv_tokens` at which vLLM never preempts the pressure run's requests."""
    raise NotImplementedError


# %%
exercise_check.check(smallest_kv_tokens, answers.never_preempts_cases(prompt_tokens, answer_tokens, block_size),
                     title="Exercise 3")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3: all requests start together; count the blocks they hold at each step until they finish
# (an engine stores all but the newest token), take the peak, and add vLLM's null block.
peak = kv_pressure.peak_blocks(prompt_tokens, answer_tokens, block_size)
answer = (peak + 1) * block_size
preempts = {blocks: kv_pressure.simulated_pressure(prompt_tokens, answer_tokens, block_size=block_size,
                                                   blocks=blocks, max_len=prof.max_model_len)["preemptions"]
            for blocks in (peak - 1, peak)}
print(f"Every request at full length would need {sum(-(-(n - 1) // block_size) for n in needs)} blocks, but the "
      f"short answers finish before the long ones are full: at the peak the requests hold {peak} blocks of "
      f"{block_size}. With vLLM's null block the smallest budget that never preempts is kv_tokens = "
      f"({peak} + 1) x {block_size} = {answer} tokens; the simulator preempts {preempts[peak]} times with {peak} "
      f"usable blocks and {preempts[peak - 1]} times with one fewer.")
exercise_check.check(lambda: answer, answers.never_preempts_cases(prompt_tokens, answer_tokens, block_size),
                     title="Solution 3")
