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
# # KV cache memory: where the gigabytes go
#
# A serving engine keeps, for every token of every running request, a key vector and a value
# vector in every attention layer: the KV cache. It is what makes generating the next token
# cheap, and it is what fills GPU memory. This chapter computes how large it is and how many
# requests a GPU can therefore serve at once; then it checks that
# arithmetic against what the real vLLM and SGLang engines build on this machine. Along the way
# it corrects the story told by the source articles, the five web articles this book started from
# (a short article published in four languages and a long Japanese comparison of vLLM and
# SGLang): that KV memory grows exponentially with traffic until the server crashes.

# %% tags=["parameters"]
profile = "auto"
kv_cache_tokens = None        # KV budget to check (tokens); None: the profile's, else two full-length sequences
gpu_memory_gib = [24, 80]     # GPU sizes to plan for
utilization = None            # share of GPU memory the planner lets an engine claim; None: profile's, else vLLM's
contexts = [1024, 2048, 4096, 8192, 16384, 32768]

# %%
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.sim import kv_memory

prof = banner.start(profile)

# %% [markdown]
# ## Bytes per token
#
# Each layer stores one key and one value per KV head, each `head_dim` numbers long. So one
# token costs 2 × layers × KV heads × head dim × bytes per number. Models with grouped-query
# attention (GQA) let several query heads share one KV head, which divides this by the group
# size: that is why the number of KV heads, not attention heads, appears in the formula.
#
# Here is that arithmetic for the four models the source articles talk about, using their published
# configurations, with every number in bf16 (bfloat16), a half-precision format.

# %%
big = ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
       "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-72B-Instruct"]
shapes = kv_memory.known_shapes()
per_token = pd.DataFrame([{
    "model": name,
    "layers": shapes[name].num_hidden_layers,
    "attention heads": shapes[name].num_attention_heads,
    "KV heads": shapes[name].num_key_value_heads,
    "head dim": shapes[name].head_dim,
    "KV KiB/token (bf16)": kv_memory.kv_bytes_per_token(shapes[name], "bf16") / 1024,
    "KV GiB per 8k-token sequence": kv_memory.kv_bytes_per_token(shapes[name], "bf16") * 8192 / kv_memory.GIB,
    "weights GiB (bf16)": kv_memory.weights_bytes(shapes[name], "bf16") / kv_memory.GIB,
} for name in big])
results.save("kv_bytes_per_token", per_token, prof)
per_token.round(2)

# %% [markdown]
# Llama-3.1-70B and Qwen2.5-72B have the same layers, KV heads and head dim, so
# their KV caches are exactly the same size and their lines in the plot below coincide; the
# legend names the pair. Both axes are linear.

# %%
kib = dict(zip(per_token.model, per_token["KV KiB/token (bf16)"], strict=True))
lengths = [0, *contexts]
ax = plots.axes("KV cache of one sequence (bf16)", "context length (tokens)", "GiB")
for i, (name, marker, line) in enumerate(zip(big, "osD^", ["-", "--", "-.", ":"], strict=True)):
    first = next(n for n in big if kib[n] == kib[name])  # the first model of this size draws the line
    shared = f", {plots.label('same line as')} {first.split('/')[1]}" if first != name else ""
    ax.plot(lengths, [kib[name] * 1024 * n / kv_memory.GIB for n in lengths], color=f"C{i}", marker=marker,
            linestyle=line, markersize=11 if shared else 5, markerfacecolor="none" if shared else None,
            label=f"{name.split('/')[1]} ({kib[name]:.0f} KiB/token{shared})")
ax.set_xlim(left=0)
ax.set_ylim(bottom=0)
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18))
plt.show()

# %% [markdown]
# Each line is straight and starts at zero: twice the context, twice the memory. The KV cache
# of a sequence is linear in its length, and the cache of many sequences is the sum of theirs,
# linear in how many there are. (The source articles call this growth exponential, a claim the
# chapter's end takes up; only against a logarithmic length axis would these lines bend upwards
# like an exponential.)

# %% [markdown]
# ## How many sequences fit?
#
# An engine claims a fraction of GPU memory, loads the weights into it, and carves what is left, the
# KV budget, into KV blocks: fixed-size pieces of the KV cache, each holding the keys and values of
# a fixed number of tokens. In vLLM that fraction is the `gpu_memory_utilization` setting. The cell
# below reads vLLM's defaults and prints which fraction the planner uses: vLLM's default, unless
# the `utilization` parameter or the hardware profile sets another.
#
# Not all of that fraction is KV cache. Besides the weights, an engine needs room for activations,
# the intermediate results of a forward pass (one run of the model over a batch of tokens), and, on
# GPUs, for CUDA graphs, recorded sequences of GPU work that the engine replays instead of launching
# each step anew. vLLM's fraction covers them: vLLM measures a forward pass's peak memory and
# subtracts it before sizing the KV cache. SGLang's counterpart, `mem_fraction_static`, counts
# weights and KV pool only.
#
# :::{dropdown} How we know: the memory fraction in vLLM and SGLang
# An engine claims a fraction of GPU memory, loads the weights, and carves what is left into KV
# blocks. In vLLM that fraction is `gpu_memory_utilization`; the cell below reads its default, and
# the defaults around it, from vLLM's own `EngineArgs` (by running a small script inside vLLM's
# environment, since this notebook never imports an engine). Unless the `utilization` parameter
# above is set, the planner uses that default. SGLang's counterpart, `mem_fraction_static`, has no
# fixed default: SGLang derives it from the GPU's memory when it starts
# (`handle_gpu_memory_settings` in `sglang/srt/arg_groups/memory_hook.py`), and it counts weights
# and KV pool only, where vLLM's fraction also covers activations and, on GPUs, CUDA graphs: vLLM
# profiles a forward pass and subtracts its peak from the fraction before it sizes the KV cache
# (`determine_available_memory` in `vllm/v1/worker/gpu_worker.py`). The planner uses the `utilization`
# parameter if set, else the profile's `gpu_memory_utilization` where the profile sets one (the GPU
# profiles do), else vLLM's default; the cell prints which.
# :::

# %%
from servelab.measure.kv_memory.capacity import vllm_cache_defaults

vllm_defaults = vllm_cache_defaults(prof)
utilization_source = ("the utilization parameter" if utilization else "the profile" if prof.gpu_memory_utilization
                      else "vLLM's default")
utilization = utilization or prof.gpu_memory_utilization or vllm_defaults["gpu_memory_utilization"]
pd.Series({**vllm_defaults, "planner utilization": utilization, "planner utilization from": utilization_source})

# %% [markdown]
# In the table, `None` means that vLLM chooses the value when it starts: without
# `kv_cache_memory_bytes` it sizes the KV cache from `gpu_memory_utilization`, and without
# `block_size` it takes `DEFAULT_BLOCK_SIZE` tokens per block, which its CPU build raises to 128
# (the block size vLLM reports below on the cpu profile). `kv_cache_dtype` `auto` keeps keys and
# values in the model's own number format.
#
# :::{dropdown} How we know: which block size
# Which block size? vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE` (`vllm/config/cache.py`), printed with
# the defaults above, is what vLLM uses when neither the user, nor the platform, nor (on a GPU) the
# attention backend (`update_block_size_for_backend` in `vllm/platforms/interface.py`) picks one: a
# `CacheConfig` built with `block_size` left at `None` fills in that default and records that the
# user chose none. The CPU platform does pick one: when the user gives no `--block-size`,
# `check_and_update_config` in `vllm/platforms/cpu.py` sets 128 for the CPU attention backend,
# which accepts only multiples of 32 (`get_supported_kernel_block_sizes` in
# `vllm/v1/attention/backends/cpu_attn.py`). The block size the engine built is the `block_size`
# row of the vLLM check below, read from the engine, not assumed. `kv_cache_memory_bytes`, when
# set, replaces `gpu_memory_utilization` in sizing the KV cache; `kv_cache_dtype` `auto` uses the
# model's data type (both documented on `CacheConfig`).
# :::
#
# The planner below counts the sequences that can run at once for each model, GPU size and context
# length. To read one row of its table: the model's weights are subtracted from the memory share
# the engine may claim on that GPU, and what is left is divided by one sequence's KV at each
# context length, rounded down to whole sequences. The 70B-class rows are all zeros because their
# bf16 weights alone are larger than that share.
#
# The planner counts weights and KV cache only, with nothing reserved for activations or CUDA
# graphs, and it takes the GPU size at face value, though a card sold as 24 GB shows a program
# somewhat less than 24 GiB. Every number it gives is therefore an upper bound, as the column name
# says: the real engine on the same card builds a smaller pool.

# %%
fits = "max_sequences (upper bound)"
plans = pd.DataFrame([
    vars(kv_memory.plan(shapes[name], mem, "bf16", n, utilization=utilization))
    for name in big for mem in gpu_memory_gib for n in contexts
]).rename(columns={"max_sequences": fits})
results.save("kv_plans", plans, prof, utilization=utilization, overhead_gib=0,
             note="upper bound: no activations, CUDA graphs or driver memory reserved")
none_fit = plans.groupby("model")[fits].max().loc[lambda m: m == 0].index
for name, weights in plans[plans.model.isin(none_fit)].groupby("model").weights_gib.first().items():
    print(f"{name}: bf16 weights {weights:.1f} GiB, more than the largest share, {utilization} x "
          f"{max(gpu_memory_gib)} GiB = {utilization * max(gpu_memory_gib):.1f} GiB")
plans.pivot_table(index=["model", "memory_gib"], columns="context_len", values=fits)

# %% [markdown]
# The plot shows the sequences that fit against context length with both axes logarithmic: the
# number that fits is inversely proportional to the length, halving with every doubling, which on
# these axes is a straight falling line.

# %%
fig, axs = plt.subplots(1, len(gpu_memory_gib), figsize=(11, 4), sharey=True)
for ax, mem in zip(axs, gpu_memory_gib, strict=True):
    plots.axes("GiB GPU", "context length (tokens)", "sequences that fit (upper bound)", ax=ax)
    ax.set_title(f"{mem} {ax.get_title()}")
    for i, (name, marker) in enumerate(zip(big, "osD^", strict=True)):
        rows = plans[(plans.model == name) & (plans.memory_gib == mem) & (plans[fits] > 0)]
        if len(rows):
            ax.plot(rows.context_len, rows[fits], color=f"C{i}", marker=marker, label=name.split("/")[1])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
axs[0].legend()
plt.show()

# %% [markdown]
# The 70B-class models have no line: no sequence fits. Such an engine does not start; serving
# these models takes several GPUs (tensor parallelism) or a smaller weight format. For the other
# models, the next cell divides the sequences that fit at each context length by those at twice
# that length: 2 wherever whole sequences divide evenly, more where rounding down bites at the long
# end.

# %%
fitting = plans[plans[fits] > 0].sort_values("context_len")
ratios = fitting.groupby(["model", "memory_gib"])[fits].apply(lambda s: (s / s.shift(-1)).dropna().round(2))
print(ratios.groupby(level=[0, 1]).agg(["min", "max"]).to_string())

# %% [markdown]
# ## Checking the arithmetic against vLLM
#
# The engine here serves the banner's model, not the models of the tables above. The next cell
# starts vLLM with a KV budget of `kv_cache_tokens` tokens, handed to it as bytes
# (`--kv-cache-memory-bytes`, the tokens times the formula's bytes per token), and, before sending
# any request, reads back from its `/metrics` how many blocks it built and how many tokens one block
# holds (`block_size`). vLLM divides those bytes by its own bytes per block, computed from the model
# it loaded: if the formula were off, it would build a different number of blocks, so the
# comparison tests the formula. The planner predicts whole blocks: the budget divided by the block
# size, rounded down. The table also shows `engine_max_concurrency`, vLLM's own count of the
# full-length requests (as long as the profile's longest context) that the pool holds.
#
# :::{dropdown} How we know: how the budget goes in and the blocks come out
# Arithmetic is only useful if the engine agrees. We start vLLM with a fixed KV budget of
# `kv_cache_tokens` tokens, which servelab hands to vLLM as bytes (`--kv-cache-memory-bytes`,
# tokens × the bytes per token of the formula above), then read back how many blocks vLLM
# allocated and how many tokens a block holds. vLLM publishes both on its `/metrics` endpoint in
# the `vllm:cache_config_info` series, with the number of full-length requests it says the pool
# holds under the label `kv_cache_max_concurrency` (`get_max_concurrency_for_kv_cache_config` and
# `update_kv_cache_capacity` in `vllm/v1/core/kv_cache_utils.py`, null block counted; the table
# calls it `engine_max_concurrency`). It computes its own bytes per block from the model
# configuration it loaded, and allocates the whole pool when it starts, before the first request;
# the cell reads it before sending any. The planner predicts whole blocks: the budget divided by
# the block size, rounded down.
# :::

# %%
from servelab.measure.chapter_servers import c02
from servelab.measure.kv_memory.capacity import engine_capacity, served_shape

served = served_shape(prof)
# every server this chapter starts (`python -m servelab plan` lists them); the budget: the parameter, else the
# profile's, else two full-length sequences
servers = c02.servers(prof, kv_cache_tokens=kv_cache_tokens)
kv_cache_tokens = servers["vLLM"].options["kv_cache_tokens"]
with servers["vLLM"].server(prof) as vllm:
    built = engine_capacity(vllm)

planned_tokens = kv_memory.tokens_held(kv_cache_tokens, built["block_size"])
check = {
    "kv_cache_tokens": kv_cache_tokens, "dtype": prof.dtype, "block_size": built["block_size"],
    "kv_bytes_per_token": kv_memory.kv_bytes_per_token(served, prof.dtype),
    "engine_blocks": built["blocks"], "engine_tokens": built["tokens"], "planned_tokens": planned_tokens,
    "engine_usable_tokens": built["usable"], "engine_max_concurrency": built["max_concurrency"],
    "planned_max_concurrency (null block included, as vLLM does)": planned_tokens / prof.max_model_len,
}
results.save("kv_capacity_check", check, prof)
pd.Series(check)

# %% [markdown]
# The next cell prints whether the budget is a whole number of blocks and what share of the budget
# one block is; the check after it demands that vLLM built exactly the planned tokens, with no
# tolerance. That share matters: if vLLM's bytes per token were slightly larger than the formula's,
# it would build just one block fewer, and a tolerance as large as one block would let that wrong
# formula pass.
#
# :::{dropdown} How we know: why the check demands equality, and what it misses
# Why the check below demands equality rather than a tolerance: the planner's side is just whole
# blocks of the budget, so what it really tests is the formula. vLLM was handed the budget in
# bytes, computed with the formula's bytes per token, and divided those bytes by its own bytes per
# block. When the budget is a whole number of blocks, a per-token size in vLLM larger than the
# formula's by a single number in a single layer would leave the last block short, and vLLM would
# build one block fewer. One block is a small share of the budget, printed below; a tolerance of a
# few percent would let a wrong formula pass. So the check also demands that the budget is a whole
# number of blocks, as every profile's is.
#
# The check is one-sided. A per-token size in vLLM larger than the formula's loses a block; a
# smaller one would leave vLLM a surplus that shows only once it adds up to a whole block, so small
# underestimates of vLLM's size pass unseen. The SGLang section below checks the bytes themselves,
# in both directions.
# :::
#
# The table's `engine_usable_tokens` is one block less than `engine_tokens`: vLLM keeps one block
# back as a placeholder, which requests cannot use. Its own `engine_max_concurrency` counts that
# block, so at the edge of the pool it can promise one full-length request more than can run at
# once; exercise 2's solution shows such a case.
#
# :::{dropdown} How we know: the block vLLM keeps back
# One of those blocks is not available to requests: vLLM's block pool holds its first block back
# as a "null block", a placeholder for block-table entries that hold no KV
# (`vllm/v1/core/block_pool.py`). The `engine_usable_tokens` row above leaves it out; vLLM's own
# `engine_max_concurrency` counts it.
# :::

# %%
print({"budget is a whole number of blocks": kv_cache_tokens % built["block_size"] == 0,
       "one block, share of the budget (%)": round(100 * built["block_size"] / planned_tokens, 2)})

# %%
# NBVAL_CHECK_OUTPUT
# vLLM built exactly the planned tokens; and the budget is whole blocks, so one missing block would show
print(check["engine_tokens"] == check["planned_tokens"], kv_cache_tokens % built["block_size"] == 0)

# %% [markdown]
# ## The same budget in SGLang
#
# SGLang also splits its KV cache into fixed-size pieces, which it calls pages, but by default a
# page holds a single token. servelab hands SGLang the same budget, in tokens, as a cap, and SGLang
# builds a pool of that size rounded down to whole pages: with one-token pages, the budget itself,
# all of it usable by requests. Since SGLang was given tokens, not bytes, a pool of the right size
# only shows that SGLang honours the cap. The formula is tested by SGLang's own report, on its
# `/server_info`, of the bytes its K and V buffers (the tensors that hold the keys and the values)
# take, which the next cell compares with the formula's prediction. SGLang reports them in GiB
# rounded to three decimals, so the check sees only errors larger than that rounding: a layer or a
# KV head too many or too few is caught, but an error of one number per token in one layer is
# smaller and passes. The table prints both shares of the buffers.
#
# :::{dropdown} How we know: SGLang's page size and pool
# SGLang pages its KV cache too, but with pages of one token by default: `_page_size_default`
# in `sglang/srt/arg_groups/overrides.py` sets `--page-size` to 1 except on MUSA GPUs and with
# one ROCm KV-cache layout, and a few attention backends (TensorRT-LLM's, FA4 on Blackwell GPUs)
# raise it. servelab hands SGLang the same budget as `--max-total-tokens`. SGLang caps the pool it
# could afford at that number (`_apply_token_constraints` in
# `sglang/srt/mem_cache/kv_cache_configurator.py`) and then rounds it down to whole pages
# (`max_total_num_tokens // page_size * page_size` in
# `sglang/srt/model_executor/pool_configurator.py`). With pages of one token nothing is rounded
# away, and all of it is usable: the allocator's padding slot 0 lies outside the pool
# (`sglang/srt/mem_cache/allocator/token.py`). SGLang reports the pool and its page size on
# `/server_info`.
# :::

# %%
from servelab.measure.kv_memory.capacity import SGLANG_KV_GIB_HALF_STEP, sglang_buffer_gib

with servers["SGLang"].server(prof) as sglang:
    sgl_built = engine_capacity(sglang)

formula_bytes = kv_memory.kv_bytes_per_token(served, prof.dtype)
sgl_check = {
    "kv_cache_tokens": kv_cache_tokens, "page_size": sgl_built["block_size"],
    "engine_tokens": sgl_built["tokens"], "engine_usable_tokens": sgl_built["usable"],
    "planned_tokens (engine's page size)": kv_memory.tokens_held(kv_cache_tokens, sgl_built["block_size"]),
    "engine K+V buffers (GiB, SGLang's own)": sgl_built["kv_gib"],
    "planned K+V buffers (GiB, formula)": sglang_buffer_gib(sgl_built["tokens"], sgl_built["block_size"],
                                                            formula_bytes),
    "rounding, share of the buffers (%)": 100 * SGLANG_KV_GIB_HALF_STEP / sgl_built["kv_gib"],
    "one number per token in one layer, share (%)": 100 * kv_memory.dtype_bytes(prof.dtype) / formula_bytes,
    "one layer, share (%)": 100 / served.num_hidden_layers,
    "one KV head, share (%)": 100 / served.num_key_value_heads,
    "vLLM engine_tokens": built["tokens"],
}
results.save("kv_capacity_check_sglang", sgl_check, prof)
pd.Series(sgl_check)

# %% [markdown]
# The first check: SGLang's pool is exactly the budget in whole pages (the cap is honoured). The
# second: SGLang's own K and V bytes are the formula's, within its rounding. Where the budget is
# not a whole number of vLLM blocks, the two engines differ: vLLM drops the remainder of its last
# block, SGLang keeps every token (exercise 2).
#
# :::{dropdown} How we know: what the two SGLang checks test
# That the pool has the budget's size is no test of the formula: servelab handed SGLang the budget
# in tokens, so the first check below only tests that SGLang honours the cap. The formula is tested
# by SGLang's own bytes. SGLang reports, in `/server_info` (`memory_usage`, per scheduler, built in
# `sglang/srt/managers/scheduler_components/memory_usage.py`), the size of the K and V buffers it
# allocated, in GiB of 2³⁰ bytes rounded to three decimals, computed from the tensors themselves
# (`get_kv_size_bytes` in `sglang/srt/mem_cache/memory_pool.py`). Those buffers hold the pool plus
# one padding page. The prediction multiplies those tokens by the formula's bytes per token; the
# second check demands that the two agree within SGLang's rounding, printed as a share of the
# buffers below, beside the shares one number per token in one layer, one whole layer and one KV head
# would make: errors larger than the rounding, such as a layer or a KV head too many or too few, are
# caught (the check's second line demands that the rounding is smaller than both); smaller ones are not.
# :::

# %%
# NBVAL_CHECK_OUTPUT
print(sgl_check["engine_tokens"] == sgl_check["planned_tokens (engine's page size)"],
      abs(sgl_check["engine K+V buffers (GiB, SGLang's own)"] - sgl_check["planned K+V buffers (GiB, formula)"])
      <= SGLANG_KV_GIB_HALF_STEP + 1e-9)
# the rounding is smaller than a layer or a KV head too many or too few would make, so such an error is caught
print(sgl_check["rounding, share of the buffers (%)"]
      < min(sgl_check["one layer, share (%)"], sgl_check["one KV head, share (%)"]))

# %% [markdown]
# ## What the source articles say about traffic, and what the engines do
#
# The short source article, published in Japanese, German, Korean and Spanish, opens with the
# memory problem of serving. The German version says "Mit
# steigenden Benutzerzahlen wächst der KV Cache Speicherbedarf exponentiell, was zu TTFT-Spitzen
# und OOM-Crashes führen kann" (as the number of users rises, the KV cache's memory demand grows
# exponentially, which can lead to TTFT spikes and OOM crashes); the Korean version says the KV
# cache memory grows "기하급수적으로" (exponentially) with concurrent users until "서버가
# 다운되거나" (the server goes down); the Japanese and Spanish versions say it swells rapidly and
# causes OOM errors ("OOM エラーを引き起こす", "fallos por falta de memoria (OOM)").

# %% [markdown]
# Two parts of that story are wrong for these engines, and one is right. The growth is not
# exponential: KV memory is linear in the tokens held, per sequence and across sequences, as the
# first plot shows. And more traffic does not make an engine allocate more KV memory until it
# crashes: both engines allocate their whole KV pool when they start, before the first request, as
# the pool sizes read above show. When requests
# need more KV than the pool holds, the scheduler (the part of the engine that decides which
# requests run) makes them wait in its queue, and their time to first token (TTFT, the wait before a
# request's first generated token) grows with the wait: that part of the story, the TTFT spikes, is
# right. When running requests need more blocks than are free, vLLM preempts one (it frees its
# blocks and computes its KV again later) and SGLang retracts one to its waiting queue; chapter 03
# measures both.
#
# :::{dropdown} How we know: where the engines allocate the pool, preempt and retract
# Two parts of that story are wrong for these engines, and one, the TTFT spikes, is right. The
# growth is not exponential: KV memory
# is linear in the tokens held, per sequence and across sequences, as the first plot shows. And
# more traffic does not make an engine allocate more KV memory until it crashes: both engines
# allocate their whole KV pool when they start, before they serve the first request, as the pool
# sizes read above show (vLLM in `_initialize_kv_caches`, `vllm/v1/engine/core.py`; SGLang in
# `alloc_memory_pool`, `sglang/srt/model_executor/model_runner.py`). When requests need more KV than the pool
# holds, the scheduler makes them wait: new requests stay in the queue, and their time to first
# token grows with the wait. When running requests need more blocks than are free, vLLM preempts
# one, frees its blocks and recomputes it later (`_preempt_request` in
# `vllm/v1/core/sched/scheduler.py`), and SGLang retracts requests to its waiting queue
# (`retract_decode` in `sglang/srt/managers/schedule_batch.py`). Chapter 03 runs such a workload
# and measures the queueing and the preemptions.
# :::
#
# An out-of-memory (OOM) error does happen, but at start, when weights, pool and activations do not
# fit (the 70B-class rows above), or from memory outside the pool, such as another process on the
# same GPU. It is not what KV growth under traffic does.
#
# :::{dropdown} How we know: vLLM's start-up check
# An out-of-memory error does happen, but at start, when weights, pool and activations do not fit
# (the 70B-class rows above; vLLM also refuses to start with a pool that cannot hold one
# full-length request: `check_enough_kv_cache_memory` in `vllm/v1/core/kv_cache_utils.py`), or from
# memory outside the pool, such as another process on the same GPU. It is not what KV growth under
# traffic does.
# :::

# %% [markdown]
# ## What it means
#
# A pool sized from the memory share, after activations and CUDA graphs, is smaller than the
# planner's upper bound (not measured here: these servers got their pool in bytes); vLLM prints its
# own figure (`kv_cache_max_concurrency`) when it starts. The next
# chapter shows how vLLM's paged KV cache avoids reserving more than a request needs, and what
# happens when the pool runs out.

# %% [markdown]
# ## What to remember
#
# - The KV cache costs 2 × layers × KV heads × head dim × bytes per number for every token held; it
#   is the number of KV heads, not attention heads, that counts, so grouped-query attention shrinks
#   it.
# - KV memory is linear, not exponential: twice the context or twice the sequences, twice the
#   memory, and the sequences that fit halve when the context doubles.
# - The weights are paid first: what the engine may claim minus the weights is the KV budget. The
#   planner's count of sequences is an upper bound, and a model whose weights do not fit in that
#   share (the 70B-class rows) does not start at all.
# - Read the pool your engine really built instead of assuming it: vLLM reports it on `/metrics`,
#   SGLang on `/server_info`.
# - Both engines allocate their whole KV pool at start. More traffic means queueing and preemption,
#   not an out-of-memory crash; an OOM comes at start, when weights, pool and activations do not
#   fit, or from memory outside the pool.

# %% [markdown]
# ## Exercises
#
# 1. (5 min, no engine) Re-run the planner with an fp8 KV cache (`kv_dtype="fp8"`; the weights
#    stay bf16). How many more 8k-token sequences of Qwen2.5-7B fit on a 24 GiB GPU?
# 2. (5 min, no engine) Fill in `vllm_tokens_kept`: how many tokens of a KV budget vLLM keeps
#    with blocks of a given size, when the budget is not a whole number of blocks; the check tries
#    two full-length requests of this profile plus half a block. Optional follow-up (a server
#    restart): read both engines' pools for that budget with
#    `from servelab.measure.kv_memory.capacity import capacity_for_budget`, then
#    `capacity_for_budget(servers["vLLM, partial block"], prof)` and
#    `capacity_for_budget(servers["SGLang, partial block"], prof)`. How many full-length requests
#    does vLLM say it holds, and how many run at once?
# 3. (5 min, no engine) Llama-3.1-70B has 64 attention heads but 8 KV heads. How much larger
#    would its KV cache be without grouped-query attention?
#
# Fill in each stub, then run the check below it. The solutions are in the hidden cells.

# %%
# Exercise 1: your answer
from servelab.book import exercise_check
from servelab.measure.exercises import kv_cache_memory as answers


def fp8_extra_sequences() -> int:
    """How many more 8k-token sequences of Qwen2.5-7B fit on 24 GiB with an fp8 KV cache (`utilization` above)."""
    raise NotImplementedError


# %%
exercise_check.check(fp8_extra_sequences, answers.fp8_cases(shapes["Qwen/Qwen2.5-7B-Instruct"], utilization),
                     title="Exercise 1")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1
qwen7 = shapes["Qwen/Qwen2.5-7B-Instruct"]
bf16 = kv_memory.plan(qwen7, 24, "bf16", 8192, utilization=utilization)
fp8 = kv_memory.plan(qwen7, 24, "bf16", 8192, utilization=utilization, kv_dtype="fp8")
print(f"bf16 KV: {bf16.max_sequences} sequences, fp8 KV: {fp8.max_sequences} sequences.")
print(f"Answer: with an fp8 KV cache, {fp8.max_sequences - bf16.max_sequences} more 8k-token sequences of "
      f"Qwen2.5-7B fit on a 24 GiB GPU ({fp8.max_sequences} instead of {bf16.max_sequences}), "
      f"at a utilization of {utilization}.")


def fp8_extra_sequences() -> int:
    return fp8.max_sequences - bf16.max_sequences


exercise_check.check(fp8_extra_sequences, answers.fp8_cases(qwen7, utilization), title="Solution 1")

# %%
# Exercise 2: your answer, first the prediction (no engine). The whole run can also take that budget:
# `papermill ... -p kv_cache_tokens N`; the hidden solution starts the chapter's "partial block" servers.


def vllm_tokens_kept(budget: int, block_size: int) -> int:
    """The tokens of a `kv_cache_tokens` budget that vLLM keeps with blocks of `block_size` tokens."""
    raise NotImplementedError


# %%
partial_budget = servers["vLLM, partial block"].options["kv_cache_tokens"]
exercise_check.check(vllm_tokens_kept, answers.kept_cases(partial_budget, built["block_size"]), title="Exercise 2")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2: both engines started with that budget.
from servelab.measure.kv_memory.capacity import capacity_for_budget


def vllm_tokens_kept(budget: int, block_size: int) -> int:
    return budget // block_size * block_size  # whole blocks only


exercise_check.check(vllm_tokens_kept, answers.kept_cases(partial_budget, built["block_size"]), title="Solution 2")

budget = servers["vLLM, partial block"].options["kv_cache_tokens"]  # two sequences and half a block
assert budget == 2 * prof.max_model_len + built["block_size"] // 2, "the declared budget assumed another block size"
small = {engine: capacity_for_budget(servers[f"{label}, partial block"], prof)
         for engine, label in (("vllm", "vLLM"), ("sglang", "SGLang"))}
print(small)
v, g = small["vllm"], small["sglang"]
if v["started"] and g["started"]:
    print(f"Answer: of a budget of {budget} tokens, vLLM keeps {v['tokens']} ({v['blocks']} whole blocks of "
          f"{v['block_size']}; the planner predicts {kv_memory.tokens_held(budget, v['block_size'])}) and drops "
          f"the {budget - v['tokens']} tokens of the partial block; SGLang, paging by {g['block_size']}, keeps "
          f"{g['tokens']}. vLLM says it holds {v['max_concurrency']:.2f} sequences of {prof.max_model_len} tokens, "
          f"counting its null block; without it {v['usable'] / prof.max_model_len:.2f}, so "
          f"{v['usable'] // prof.max_model_len} at once.")
else:
    print(f"Answer: an engine refused the budget of {budget} tokens at start: "
          f"{v.get('reason') or g.get('reason')}")

# %%
# Exercise 3: your answer


def kv_growth_without_gqa(shape: kv_memory.ModelShape) -> float:
    """How many times larger the KV cache per token would be with one KV head per attention head."""
    raise NotImplementedError


# %%
exercise_check.check(kv_growth_without_gqa, answers.gqa_cases(shapes), title="Exercise 3")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3
llama70 = shapes["meta-llama/Llama-3.1-70B-Instruct"]


def kv_growth_without_gqa(shape: kv_memory.ModelShape) -> float:
    return shape.num_attention_heads / shape.num_key_value_heads


exercise_check.check(kv_growth_without_gqa, answers.gqa_cases(shapes), title="Solution 3")
ratio = llama70.num_attention_heads / llama70.num_key_value_heads
with_gqa = kv_memory.kv_bytes_per_token(llama70, "bf16")
print(f"Answer: {ratio:.0f} times larger: {with_gqa * ratio / 2**20:.2f} MiB per token instead of "
      f"{with_gqa / 2**10:.0f} KiB, since every attention head would keep its own keys and values.")
