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
# cheap, and it is what fills GPU memory. The source articles describe the symptoms: as
# concurrent traffic grows, KV memory grows, requests wait, time to first token (TTFT) climbs,
# and eventually the server runs out of memory (OOM). This chapter puts numbers on that story:
# first with arithmetic from model configurations, then checked against what the real vLLM
# engine reports on this machine.

# %% tags=["parameters"]
profile = "auto"
kv_cache_tokens = None        # KV budget to check (tokens); None: the profile's, else two full-length sequences
gpu_memory_gib = [24, 80]     # GPU sizes to plan for
utilization = 0.9             # fraction of GPU memory an engine claims (vLLM's default is 0.9)
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
# Here is that arithmetic for the four models the source articles talk about, using their
# published configurations (stored in the package as data; nothing is downloaded).

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

# %%
ax = plots.axes("KV cache of one sequence", "context length (tokens)", "GiB")
for name in big:
    ax.plot(contexts, [kv_memory.kv_bytes_per_token(shapes[name], "bf16") * n / kv_memory.GIB for n in contexts],
            marker="o", label=name.split("/")[1])
ax.set_xscale("log", base=2)
ax.legend()
plt.show()

# %% [markdown]
# ## How many sequences fit?
#
# An engine claims a fraction of GPU memory (the `utilization` parameter above), loads the
# weights, and carves what is left into KV blocks. Dividing that budget by the KV cost of one
# sequence gives the number of sequences that can run at once. Every request beyond that
# number waits in the queue, and its TTFT includes the wait; a system that reserves memory
# carelessly hits the same wall earlier, or runs out of memory.
#
# The planner below does this arithmetic for each model, GPU size and context length. It counts
# weights and KV cache only; an engine also needs memory for activations (and, on GPUs, CUDA
# graphs), which the planner's `overhead_gib` argument can reserve.

# %%
plans = pd.DataFrame([
    vars(kv_memory.plan(shapes[name], mem, "bf16", n, utilization=utilization))
    for name in big for mem in gpu_memory_gib for n in contexts
])
results.save("kv_plans", plans, prof, utilization=utilization)
plans.pivot_table(index=["model", "memory_gib"], columns="context_len", values="max_sequences")

# %%
fig, axs = plt.subplots(1, len(gpu_memory_gib), figsize=(11, 4), sharey=True)
for ax, mem in zip(axs, gpu_memory_gib, strict=True):
    plots.axes(f"{mem} GiB GPU", "context length (tokens)", "sequences that fit", ax=ax)
    for name in big:
        rows = plans[(plans.model == name) & (plans.memory_gib == mem) & (plans.max_sequences > 0)]
        if len(rows):
            ax.plot(rows.context_len, rows.max_sequences, marker="o", label=name.split("/")[1])
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog")
axs[0].legend()
plt.show()

# %% [markdown]
# Models without a line have no sequence that fits: the table above shows zeros for the
# 70B-class models on both GPU sizes, because their bf16 weights alone are larger than the
# memory an engine may claim on one GPU. That is the hard out-of-memory case; serving them takes
# several GPUs (tensor parallelism) or a smaller weight format. For the models that do fit, the
# next cell divides the sequences that fit at each context length by those at twice that length.

# %%
fitting = plans[plans.max_sequences > 0].sort_values("context_len")
ratios = fitting.groupby(["model", "memory_gib"]).max_sequences.apply(lambda s: (s / s.shift(-1)).dropna().round(2))
print(ratios.groupby(level=[0, 1]).agg(["min", "max"]).to_string())

# %% [markdown]
# ## Checking the arithmetic against the engine
#
# Arithmetic is only useful if the engine agrees. We start vLLM with a fixed KV budget of
# `kv_cache_tokens` tokens, which servelab hands to vLLM as bytes (`--kv-cache-memory-bytes`,
# tokens × the bytes per token above), then read back how many blocks vLLM allocated and how many
# tokens a block holds. vLLM publishes both on its `/metrics` endpoint in the
# `vllm:cache_config_info` series, computed from its own reading of the model's configuration.
# The planner predicts whole blocks: the budget divided by the block size, rounded down.

# %%
from servelab.engines.server import running
from servelab.measure.kv_capacity import engine_capacity, served_shape

served = served_shape(prof)
kv_cache_tokens = kv_cache_tokens or prof.kv_cache_tokens or 2 * prof.max_model_len
with running("vllm", prof, kv_cache_tokens=kv_cache_tokens) as vllm:
    built = engine_capacity(vllm)

planned_tokens = kv_memory.tokens_held(kv_cache_tokens, built["block_size"])
check = {
    "kv_cache_tokens": kv_cache_tokens, "dtype": prof.dtype, "block_size": built["block_size"],
    "kv_bytes_per_token": kv_memory.kv_bytes_per_token(served, prof.dtype),
    "engine_blocks": built["blocks"], "engine_tokens": built["tokens"], "planned_tokens": planned_tokens,
    "planned_max_concurrency": planned_tokens / prof.max_model_len,
}
results.save("kv_capacity_check", check, prof)
pd.Series(check)

# %% [markdown]
# The computation on both sides is exact integer arithmetic: if vLLM's bytes per token differed
# from the formula by even one number per layer, its block count would differ by at least one
# block. So the check demands equality.

# %%
# NBVAL_CHECK_OUTPUT
print(check["engine_tokens"] == check["planned_tokens"])

# %% [markdown]
# ## What it means
#
# KV memory is linear in context length and in the number of concurrent sequences, and it
# competes with the weights for the same memory. The planner turns a GPU size into a number
# of sequences; beyond that number, requests queue and TTFT grows, and an engine that reserves
# more than it needs reaches that number sooner. The next chapter shows how vLLM's paged KV
# cache avoids reserving more than it needs, and what happens on the engine when the KV budget
# really runs out.
#
# ## Exercises
#
# 1. Re-run the planner with an fp8 KV cache (`kv_dtype="fp8"`; the weights stay bf16). How
#    many more 8k-token sequences of Qwen2.5-7B fit on a 24 GiB GPU?
# 2. Run this notebook with `papermill ... -p kv_cache_tokens 5888`. Does the engine still agree
#    with the planner? How many full-length sequences does vLLM now say it can hold? (The answer
#    is that run's output; the last table above holds both numbers.)
# 3. Llama-3.1-70B has 64 attention heads but 8 KV heads. How much larger would its KV cache be
#    without grouped-query attention?
#
# The solutions are in the hidden cells below: click to open them.

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1
qwen7 = shapes["Qwen/Qwen2.5-7B-Instruct"]
bf16 = kv_memory.plan(qwen7, 24, "bf16", 8192, utilization=utilization)
fp8 = kv_memory.plan(qwen7, 24, "bf16", 8192, utilization=utilization, kv_dtype="fp8")
print(f"bf16 KV: {bf16.max_sequences} sequences, fp8 KV: {fp8.max_sequences} sequences")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3
llama70 = shapes["meta-llama/Llama-3.1-70B-Instruct"]
ratio = llama70.num_attention_heads / llama70.num_key_value_heads
print(f"{ratio:.0f}x larger: {kv_memory.kv_bytes_per_token(llama70, 'bf16') * ratio / 2**20:.2f} MiB per token")
