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
# # Choosing and deploying: one load generator for both engines
#
# The source articles end with advice: which engine to pick for which job, and a launch command
# to copy. Their comparison rests on vendor benchmarks with no workload, versions or method (the
# [claims ledger](../book/claims.md) lists them as unverifiable), and their commands were written
# for older versions. This chapter does the three things a reader needs instead: it measures both
# engines on the same model, the same workloads and the same client; it gives launch commands for
# one GPU, four GPUs and two nodes that the engines' own parsers accept at the versions this book
# pins; and it derives a selection guide from the measurements of this and the earlier chapters.
#
# The client is vLLM's own benchmark, `vllm bench serve` (`vllm/benchmarks/serve.py`). It speaks
# only the OpenAI-compatible HTTP API, so it can load an SGLang server exactly as it loads a vLLM
# server: the same prompts, the same arrival times and the same code computing time to first token
# (TTFT), inter-token latency (ITL) and end-to-end latency. The engines run one at a time, never
# side by side, so neither competes with the other for the machine while it is measured.

# %% tags=["parameters"]
profile = "auto"
seed = 0
engines = ["vllm", "sglang"]   # measured one after the other, in this order
input_tokens = 64              # random prompts: tokens per prompt
output_tokens = 16             # tokens every request generates (EOS ignored)
concurrencies = [1, 4, 8]      # random prompts: client-side limits on requests in flight
waves = 1                      # random prompts: a limit c sends waves x c prompts (at least 4)
rates = [2.0, 8.0]             # random prompts: Poisson arrival rates, requests per second
rate_prompts = 6               # prompts per request rate
long_fraction = 0.25           # long prompts: a fraction of the profile's max_model_len
long_prompts = 2               # long prompts, sent one at a time
prefix_fraction = 0.125        # shared prefix: its length, a fraction of max_model_len
suffix_tokens = 32             # shared prefix: the distinct part of each prompt
prefixes = 2                   # shared prefix: distinct prefixes, also the concurrency
prefix_prompts = 6             # shared prefix: prompts in all
conversations = 2              # multi-turn (chapter 03's set): conversations, also the concurrency
turns = 3                      # multi-turn: turns per conversation

# %%
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.book.claims import load as load_ledger
from servelab.book.selection_guide import guide
from servelab.engines import flags
from servelab.engines.server import running
from servelab.measure import head_to_head as h2h
from servelab.measure import recipes

prof = banner.start(profile)
pd.set_option("display.max_colwidth", 120)

# %% [markdown]
# ## The runs
#
# Four workloads. Random prompts, first with a limit on the requests in flight (the client keeps
# that many busy until all are sent), then with requests arriving at random times at a fixed mean
# rate and no limit. Shared prefixes, from the benchmark's `prefix_repetition` dataset: a few long
# prefixes, each followed by a short distinct suffix, where the engines' prefix caches should
# help. Long prompts, a quarter of the context window each. And chapter 03's multi-turn
# conversations, where every turn re-sends the conversation so far: rendered with the model's chat
# template into a JSONL file and sent as the benchmark's `custom` dataset in file order, turn one of
# every conversation before turn two of any. With a concurrency equal to the number of
# conversations, a turn is sent once some request of the turn before has finished, not necessarily
# its own parent. Lengths that depend on the model come from the profile's context window.
# vLLM's `custom` dataset reads its file with pandas, which vLLM's CPU venv does not install, so
# `servelab/engines/engine_side/vllm_bench_runs.py` reads the same lines with `json`; that is the one
# change to the client, and it runs every run of both engines in one process with vLLM's `main`.
#
# The table lists every run. Each engine serves with the profile's settings, the same for both: the
# model, the data type and the KV budget in tokens where the profile sets one (a profile without one
# passes its memory share instead, which the two engines read differently, as the recipes section
# below shows). Everything else is each engine's default, prefix caching included.

# %%
runs = h2h.plan(prof.max_model_len, input_tokens=input_tokens, concurrencies=concurrencies, waves=waves, rates=rates,
                rate_prompts=rate_prompts, long_fraction=long_fraction, long_prompts=long_prompts,
                prefix_fraction=prefix_fraction, suffix_tokens=suffix_tokens, prefixes=prefixes,
                prefix_prompts=prefix_prompts, conversations=conversations, turns=turns, seed=seed)
pd.DataFrame([{"run": r.name, "workload": r.workload, "prompts": r.prompts, "max concurrency": r.concurrency,
               "request rate": r.rate, "dataset arguments": " ".join(r.dataset)} for r in runs])

# %% [markdown]
# ## Head-to-head
#
# One server at a time: start it, send every run through the benchmark client (one process, so
# vLLM is imported once), stop it. The client runs on the same machine as the server, and on the
# cpu profile they share its cores, for both engines alike.

# %%
parts = []
for engine in engines:
    with running(engine, prof) as server:
        parts.append(h2h.measure(server, runs, output_tokens=output_tokens, seed=seed))
table = pd.concat(parts, ignore_index=True)
saved = results.save("head_to_head", table, prof, output_tokens=output_tokens, seed=seed,
                     runs=[{"name": r.name, "dataset": list(r.dataset)} for r in runs])
table[["engine", "run", "completed", "failed", "duration", "p50_ttft_ms", "p90_ttft_ms", "p50_itl_ms", "p90_itl_ms",
       "output_throughput"]].round(1)

# %%
# NBVAL_CHECK_OUTPUT
by = table.set_index(["engine", "run"])
light, heavy = f"random, concurrency {min(concurrencies)}", f"random, concurrency {max(concurrencies)}"
# every request of every run completed on both engines, none failed
print(bool((table.completed == table.prompts).all() and (table.failed == 0).all()))
for engine in engines:
    # more requests in flight raise each engine's output throughput ...
    print(by.loc[(engine, heavy), "output_throughput"] > by.loc[(engine, light), "output_throughput"])
    # ... and its median time to first token (requests wait for each other)
    print(by.loc[(engine, heavy), "p50_ttft_ms"] > by.loc[(engine, light), "p50_ttft_ms"])

# %% [markdown]
# The first figure is the concurrency sweep. Each line is the median, the shaded band runs from
# the median to the 90th percentile, and the markers are the 99th; throughput is output tokens per
# second over the whole run. The axes start at zero, so the ratios between the lines can be read
# off the picture.

# %%
colors = {"vllm": "tab:blue", "sglang": "tab:orange"}
sweep = table[table.workload.eq("random") & table.concurrency.notna()]
fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), constrained_layout=True)
for engine, rows in sweep.groupby("engine", sort=False):
    rows = rows.sort_values("concurrency")
    for ax, metric in zip(axes[:2], ("ttft", "itl"), strict=True):
        ax.plot(rows.concurrency, rows[f"p50_{metric}_ms"], "-o", color=colors[engine], label=engine)
        ax.fill_between(rows.concurrency, rows[f"p50_{metric}_ms"], rows[f"p90_{metric}_ms"], color=colors[engine],
                        alpha=0.2)
        ax.plot(rows.concurrency, rows[f"p99_{metric}_ms"], "x", color=colors[engine])
    axes[2].plot(rows.concurrency, rows.output_throughput, "-o", color=colors[engine], label=engine)
plots.axes("Time to first token", "requests in flight (limit)", "ms (p50 line, p90 band, p99 x)", ax=axes[0])
plots.axes("Inter-token latency", "requests in flight (limit)", "ms (p50 line, p90 band, p99 x)", ax=axes[1])
plots.axes("Output throughput", "requests in flight (limit)", "tokens/s", ax=axes[2])
for ax in axes:
    ax.set_ylim(bottom=0)
    ax.set_xticks(concurrencies)
axes[2].legend()
plt.show()

# %% [markdown]
# The second figure is the rate sweep: requests arrive at random times (a Poisson process with the
# benchmark's seed, so both engines get the same arrival times) and nothing limits how many are in
# flight. Where the rate exceeds what the server completes, requests queue and TTFT grows. With so
# few requests per rate, each run is mostly its start and its tail: the completed requests per
# second are counted over the whole run, sending included, so they stay below the dotted line of
# the rate sent even where the server keeps up. The points show a direction, not a capacity curve.

# %%
by_rate = table[table.workload.eq("random") & table.concurrency.isna()]
fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), constrained_layout=True)
for engine, rows in by_rate.groupby("engine", sort=False):
    rows = rows.sort_values("rate")
    for ax, metric in zip(axes[:2], ("ttft", "itl"), strict=True):
        ax.plot(rows.rate, rows[f"p50_{metric}_ms"], "-o", color=colors[engine], label=engine)
        ax.fill_between(rows.rate, rows[f"p50_{metric}_ms"], rows[f"p90_{metric}_ms"], color=colors[engine], alpha=0.2)
        ax.plot(rows.rate, rows[f"p99_{metric}_ms"], "x", color=colors[engine])
    axes[2].plot(rows.rate, rows.request_throughput, "-o", color=colors[engine], label=engine)
axes[2].plot(rates, rates, ":", color="grey", label=plots.label("sent"))
plots.axes("Time to first token", "request rate (req/s)", "ms (p50 line, p90 band, p99 x)", ax=axes[0])
plots.axes("Inter-token latency", "request rate (req/s)", "ms (p50 line, p90 band, p99 x)", ax=axes[1])
plots.axes("Completed requests", "request rate (req/s)", "requests/s", ax=axes[2])
for ax in axes:
    ax.set_ylim(bottom=0)
    ax.set_xticks(rates)
axes[2].legend()
plt.show()

# %% [markdown]
# The ratios put both engines side by side within this one run: vLLM's value over SGLang's for
# each run. A latency ratio below 1, or a throughput ratio above 1, favours vLLM. They are what the
# [claims ledger](../book/claims.md) sets against the articles' benchmark figures (rows
# `throughput-vs-latency-split`, `cerebrium-ttft-123-vs-340`, `sglang-5000-tokens-per-second`,
# `vllm-7b-throughput-range`, `vllm-ttft-from-streaming`): one client, one run, both engines.

# %%
ratio = h2h.ratios(table)
results.save("head_to_head_ratios", ratio.reset_index(), prof)
ratio.round(2)

# %%
spread = ratio[["p50_ttft_ms", "p50_itl_ms", "output_throughput"]]
print(f"Median TTFT, vLLM/SGLang: from {spread.p50_ttft_ms.min():.2f} ({spread.p50_ttft_ms.idxmin()}) "
      f"to {spread.p50_ttft_ms.max():.2f} ({spread.p50_ttft_ms.idxmax()}).")
print(f"Median ITL, vLLM/SGLang: from {spread.p50_itl_ms.min():.2f} to {spread.p50_itl_ms.max():.2f}.")
print(f"Output throughput, vLLM/SGLang: from {spread.output_throughput.min():.2f} "
      f"({spread.output_throughput.idxmin()}) to {spread.output_throughput.max():.2f} "
      f"({spread.output_throughput.idxmax()}).")
for engine in engines:
    gain = by.loc[(engine, heavy), "output_throughput"] / by.loc[(engine, light), "output_throughput"]
    wait = by.loc[(engine, heavy), "p50_ttft_ms"] / by.loc[(engine, light), "p50_ttft_ms"]
    print(f"{engine}: from {min(concurrencies)} to {max(concurrencies)} requests in flight, throughput x{gain:.1f}, "
          f"median TTFT x{wait:.1f}.")

# %% [markdown]
# ### What these numbers can and cannot tell about GPUs
#
# They can tell how the two engines' schedulers, caches and HTTP front ends behave under the same
# requests: whether throughput grows with the requests in flight, whether TTFT climbs with load
# (the ledger's `concurrency-raises-ttft`), whether a shared prefix or a re-sent conversation gets
# cheaper, and how each engine ranks within this run. They cannot tell how fast either engine is
# on a GPU. Here a small model runs in float32 on two CPU cores that the benchmark client shares
# with the server, and the engines use their CPU attention back ends (`torch_native` for SGLang).
# On a GPU the CUDA kernels, CUDA graphs and overlap schedulers that decide the ranking are in play,
# and none of them is measured here. The engines' Python front ends (HTTP, tokenization, streaming)
# cost a roughly fixed time per request and per token, whose share of a step is different on a GPU,
# where a step of the same model is much shorter. So the ratios above are this machine's, for this
# model, at these versions; the way to rank the engines for a deployment is to run this notebook
# with a GPU profile, where the same cells measure them on the GPU.
#
# ## Deployment recipes
#
# The articles' commands and their corrected forms (chapter 00 and the ledger's section on the
# articles' vLLM command), and launch commands for one GPU, for four GPUs with tensor parallelism,
# and for two nodes. When one node is not enough, vLLM either spans nodes with Ray
# (`--distributed-executor-backend ray`, once `ray start` has joined the nodes into one cluster;
# `vllm/config/parallel.py` says Ray must be chosen by hand) or, without Ray, with its
# multiprocessing back end and `--nnodes`, `--node-rank`, `--master-addr`, every node but rank 0
# started `--headless` (`vllm/entrypoints/cli/serve.py`, `run_headless`). SGLang runs the same
# command on every node with its own `--node-rank` and the address of rank 0 in `--dist-init-addr`
# (`sglang/srt/arg_groups/fields/parallel.py`). Every command below was handed to its engine's own
# parser, in the venv the profile uses, without starting anything: vLLM's `vllm serve` entry point
# and engine-argument classes, SGLang's `sglang serve` up to its resolved server arguments (hub
# models it cannot read here are given a stand-in config with their shape; `servelab/engines/flags.py`).
# The ledger rows these commands settle: `vllm-articles-command-valid`, `vllm-tp-flag`,
# `vllm-ray-multinode`, `sglang-tp-dp` and `sglang-no-multinode-docs`.

# %%
book = recipes.load()
verdicts = recipes.table(book)
results.save("deployment_recipes", verdicts, prof)
verdicts[["engine", "setting", "id", "form", "command", "accepted", "engine's error", "checked with"]]

# %%
# NBVAL_CHECK_OUTPUT
recipe_rows = verdicts[verdicts.form == "recipe"]
# every recipe is accepted by its engine's parser
print(bool(recipe_rows.accepted.all()), len(recipe_rows) == len(book.recipes))
# every corrected article command is accepted; the articles' removed vLLM flags and SGLang arguments are not
print(bool(verdicts[verdicts.form == "corrected"].accepted.all()),
      not verdicts.loc[verdicts.id.eq("vllm-removed-speculative-flags") & verdicts.form.ne("corrected"),
                       "accepted"].any())
# every flag in every command shown is explained below
print(recipes.unexplained(book) == [])

# %% [markdown]
# Two-node recipes also need what runs before them; the Ray recipe's cluster start is shown here,
# not parsed, since it is Ray's command, not vLLM's.

# %%
for r in book.recipes:
    if r.before:
        print(f"{r.id}:", *r.before, sep="\n  ")
    print(f"{r.id}: {r.note}")

# %% [markdown]
# ### Every flag, and what it trades
#
# Two flags are often read as the same thing and are not. vLLM's `--gpu-memory-utilization` is
# the share of the GPU's *total* memory the whole instance may use: weights, activations, CUDA
# graphs and the KV cache, which gets what is left after a profiling run. SGLang's
# `--mem-fraction-static` covers only the *static* part, weights plus the KV pool; activations and
# CUDA graph buffers must fit in the rest. So the same number gives SGLang the larger KV pool and
# the smaller headroom. Both definitions, and the defaults, are read here from the engines' own
# classes and source.

# %%
defaults = recipes.memory_defaults(prof)
results.save("deployment_memory_defaults", defaults, prof)
v, s = defaults["vllm"], defaults["sglang"]
for name, field in {**v["fields"], **s["fields"]}.items():
    print(f"{name}: default {field['default']!r}. {field['doc']}")
print("vLLM request_memory() = total GPU memory x gpu_memory_utilization:", v["request_memory_is_total_times_fraction"])
print("vLLM serve's default max_num_seqs on stand-in CUDA devices:", v["serve_max_num_seqs_by_cuda_device"])
print("SGLang:", s["definition"])
print("SGLang's default when mem_fraction_static is unset (handle_gpu_memory_settings), lines found in its source:")
for line, found in s["code"].items():
    print(f"  {found}: {line}")

# %%
# NBVAL_CHECK_OUTPUT
# vLLM sizes the instance as total memory x the fraction; SGLang defines its fraction as weights + KV pool
print(v["request_memory_is_total_times_fraction"], "(model weights + KV cache pool)" in s["definition"])
# SGLang's default is computed from the GPU's memory (every line of the rule is in the installed source)
print(all(s["code"].values()))
# the articles' 0.90 is below vLLM's own default at the pinned version
print(v["fields"]["CacheConfig.gpu_memory_utilization"]["default"] > 0.90)

# %% [markdown]
# With those definitions, the table explains every flag the recipes use. `--max-model-len`
# (SGLang: `--context-length`) and `--max-num-seqs` (SGLang: `--max-running-requests`) trade
# against each other through the KV pool: the pool must hold at least one request of the full
# length, and the more requests run at once, the fewer tokens each can hold before the scheduler
# must queue or preempt (chapter 02). vLLM's default `--max-num-seqs` for `vllm serve` depends on
# the GPU, as printed above from its own `get_batch_defaults`.

# %%
recipes.explanations(book)

# %% [markdown]
# ## A selection guide from this book's measurements
#
# The articles' guide gives recommendations without the measurements behind them (the ledger's
# `guide-*` rows). This one is computed: each row reads a result saved by a chapter (on this
# profile) or a verdict in the ledger, says what was measured, and leans to an engine only where
# the measured ratio is more than 10% from even. On another profile the same cell reads that
# profile's results; a chapter not yet run there leaves its rows out.

# %%
selection = guide(saved.parent, load_ledger())
results.save("selection_guide", selection, prof)
selection

# %% [markdown]
# Read it as where to start, not as a verdict: each row is a single run on one machine, and the
# leaning is the measured direction, not a margin that would hold on another model or GPU. Two rows
# can point different ways for the same workload: a prefix-cache hit rate counts cached tokens
# only, while a latency includes everything else each engine spends per step. Where the articles'
# guide (ledger rows `guide-vllm-for-rag`, `guide-sglang-for-json`,
# `guide003-vllm-under-memory-pressure`, `guide003-chat-sglang-api-vllm`) and this one disagree, the
# evidence column says which cell or ledger row to open.
#
# ## Exercises
#
# 1. From the saved head-to-head table, how much does each engine's throughput grow per doubling
#    of the requests in flight? Compute the scaling efficiency (throughput ratio over concurrency
#    ratio) between neighbouring points of the sweep.
# 2. Write SGLang's two-node recipe with pipeline parallelism across the nodes instead of tensor
#    parallelism over all eight GPUs (`--pp-size 2 --tp-size 4`), and check it with SGLang's own
#    parser.
# 3. Does either engine win every run? Count, per metric, the runs where the ratio favours vLLM,
#    and name the run whose throughput ratio is farthest from even.

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1
eff = []
for engine, rows in sweep.groupby("engine", sort=False):
    rows = rows.sort_values("concurrency").reset_index(drop=True)
    for a, b in zip(rows.index[:-1], rows.index[1:], strict=True):
        grow = rows.output_throughput[b] / rows.output_throughput[a]
        eff.append({"engine": engine, "from": int(rows.concurrency[a]), "to": int(rows.concurrency[b]),
                    "throughput x": grow, "efficiency": grow / (rows.concurrency[b] / rows.concurrency[a])})
eff = pd.DataFrame(eff)
print(eff.round(2).to_string(index=False))
worst = eff.loc[eff.efficiency.idxmin()]
print(f"Answer: throughput grows less than the concurrency everywhere the efficiency is below 1; the lowest "
      f"efficiency is {worst.efficiency:.2f} ({worst.engine}, {worst['from']} to {worst.to} requests in flight), "
      "where adding requests mostly adds waiting: the machine is already busy, so each step gets longer instead of "
      "serving more tokens in the same time.")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2
pp = ["sglang", "serve", "--model-path", "meta-llama/Llama-3.1-70B-Instruct", "--tp-size", "4", "--pp-size", "2",
      "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000"]
verdict = flags.check("sglang", pp)
print(" ".join(pp))
print("accepted:", verdict.ok, verdict.error)
print(f"Answer: SGLang's parser {'accepts' if verdict.ok else 'rejects'} it ({verdict.checked_with}); "
      "each node then holds half the layers split over its four GPUs, so only activations cross the network, once "
      "per stage, instead of an all-reduce per layer across the nodes as with --tp-size 8.")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3
favours = pd.DataFrame({"TTFT p50": ratio.p50_ttft_ms < 1, "ITL p50": ratio.p50_itl_ms < 1,
                        "throughput": ratio.output_throughput > 1})
print(favours.to_string())
far = (ratio.output_throughput - 1).abs().idxmax()
sweeps = favours.all().all() or (~favours).all().all()
print(f"Answer: vLLM is ahead in {favours.sum().to_dict()} of {len(ratio)} runs per metric, so "
      f"{'one engine wins every run' if sweeps else 'neither engine wins every run'}"
      f"; the throughput ratio farthest from even is {ratio.output_throughput[far]:.2f}, in '{far}'.")
