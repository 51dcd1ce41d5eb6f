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
# for older versions. This chapter does two things instead: it measures both engines on the same
# model, workloads and client; and it gives launch commands for one GPU, four GPUs and two nodes that
# the engines' own parsers accept at the versions this book pins. [Chapter 08](08_selection_guide.ipynb)
# then turns these measurements and the earlier chapters' into a selection guide.
#
# Every measurement runs under a *profile*: this book's settings for one kind of machine, such as the
# model, its data type and its context window (the most tokens one request may hold). The cpu profile
# runs a small model on the machine's CPU cores; a GPU profile runs the same cells on a GPU.

# %% [markdown]
# The client is vLLM's own benchmark, `vllm bench serve` (`vllm/benchmarks/serve.py`). It speaks
# only the OpenAI-compatible HTTP API, so it can load an SGLang server exactly as it loads a vLLM
# server: the same prompts, the same arrival times and the same code computing TTFT, ITL (both defined
# in [chapter 01](01_serving_basics.ipynb)) and end-to-end latency. The engines are measured one at a
# time, taking turns, so neither competes with the other for the machine.

# %% tags=["parameters"]
profile = "auto"
seed = 0
engines = ["vllm", "sglang"]   # measured in turn, every round starting with the next one
rounds = 3                     # the whole plan runs this many times per engine, the engines taking turns
input_tokens = 64              # random prompts: tokens per prompt
output_tokens = 16             # tokens every request generates (EOS ignored)
concurrencies = [1, 4, 8]      # random prompts: client-side limits on requests in flight
waves = 2                      # random prompts: a limit c sends waves x c prompts (at least 4)
rates = [2.0, 8.0]             # random prompts: Poisson arrival rates, requests per second
rate_prompts = 6               # prompts per request rate
long_fraction = 0.25           # long prompts: a fraction of the profile's max_model_len
long_prompts = 2               # long prompts, sent one at a time
prefix_fraction = 0.125        # shared prefix: its length, a fraction of max_model_len
suffix_tokens = 32             # shared prefix: the distinct part of each prompt
prefixes = 2                   # shared prefix: distinct prefixes, also the concurrency
prefix_prompts = 6             # shared prefix: prompts in all
conversations = 2              # multi-turn (chapter 04's set): conversations, also the concurrency
turns = 3                      # multi-turn: turns per conversation

# %%
import shlex
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from IPython.display import display
from matplotlib import pyplot as plt

from servelab.book import banner, results
from servelab.book.diagrams_head_to_head import draw_sweep
from servelab.book.i18n import N_
from servelab.engines import flags
from servelab.engines.launch import kv_budget_flags
from servelab.measure.deploying import head_to_head as h2h
from servelab.measure.deploying import recipes
from servelab.measure.kv_memory.capacity import engine_capacity

prof = banner.start(profile)
pd.set_option("display.max_colwidth", None)
pd.set_option("display.expand_frame_repr", False)  # a wide table prints whole rows, not wrapped

# %% [markdown]
# ## The runs
#
# The KV cache holds the attention keys and values the model keeps for every token so it need not
# recompute them; a prefix cache keeps them after a request ends, so that a later prompt opening the
# same way skips that work. Each workload asks one question:
#
# - **random prompts, at most c in flight**: what do more requests at once buy, and what do they cost?
# - **random prompts arriving at random times**: when does a queue start to form?
# - **shared prefixes**, long openings each followed by a short distinct part: do the prefix caches help?
# - **long prompts** (a quarter of the context window) and **chapter 04's conversations** (every turn
#   re-sends the conversation so far): how do prompt-heavy requests fare?
#
# :::{dropdown} How we know: how each workload is built and seeded
# Four workloads. Random prompts, first with a limit c on the requests in flight (the client sends
# `waves` x c prompts, at least four, never more than c at a time), then with requests arriving at
# random times at a fixed mean rate and no limit. Shared prefixes, from the benchmark's
# `prefix_repetition` dataset: a few long prefixes, each followed by a short distinct suffix, where
# the engines' prefix caches should help. Long prompts, a quarter of the context window each. And
# chapter 04's multi-turn conversations, where every turn re-sends the conversation so far: rendered
# with the model's chat template into a JSONL file and sent as the benchmark's `custom` dataset in
# file order, turn one of every conversation before turn two of any. With a concurrency equal to the
# number of conversations, a turn is sent once some request of the turn before has finished, not
# necessarily its own parent. The assistant turns are chapter 04's fixed texts, not what the engine
# generated, so this set exercises the reuse of re-sent prompts, not of generated tokens. Lengths
# that depend on the model come from the profile's context window. vLLM's `custom` dataset reads
# its file with pandas, which vLLM's CPU venv does not install, so
# `servelab/engines/engine_side/vllm_bench_runs.py` reads the same lines with `json`; that is the
# one change to the client, and it runs every run of both engines in one process with vLLM's
# `main`.
#
# Every run has its own seed (the table's last column), so no two runs send the same prompts: with
# one seed for all, the benchmark builds the same random prompts in every run, and an engine that
# caches prefixes across runs would serve later runs from its cache. Before the measured runs each
# server gets a short warm-up run with a seed of its own, not reported, so that one-off start-up
# costs do not land on the first measured run.
# :::
#
# The table lists every run. Both engines serve with the same settings from the profile: model, data
# type, context window, requests at once, and one KV budget in tokens (in tokens, because the two
# engines read a memory share differently; the recipes section shows how). Prefix caching is on, each
# engine's default. The cell after the runs prints both servers' full command lines.

# %%
plans = h2h.plans(rounds, seed=seed, max_model_len=prof.max_model_len, input_tokens=input_tokens,
                  concurrencies=concurrencies, waves=waves, rates=rates, rate_prompts=rate_prompts,
                  long_fraction=long_fraction, long_prompts=long_prompts, prefix_fraction=prefix_fraction,
                  suffix_tokens=suffix_tokens, prefixes=prefixes, prefix_prompts=prefix_prompts,
                  conversations=conversations, turns=turns)
runs = plans[0]  # the first round's runs; later rounds differ only in their seeds
pd.DataFrame([{"run": r.name, "workload": r.workload, "prompts": r.prompts, "max concurrency": r.concurrency,
               "request rate": r.rate, "dataset arguments": " ".join(r.dataset), "seed": r.seed} for r in runs])

# %% [markdown]
# ## Head-to-head
#
# The engines take turns: in each of `rounds` rounds every run goes to one server and then to the
# other, through the same benchmark client, and the server that goes first changes from round to
# round. A slow stretch of the host then lands on both engines, and every ratio below comes with the
# range of its rounds.
#
# In the two tables one row is one run in one round. Read `p50_ttft_ms` (the median wait for the
# first token), `p50_itl_ms` (the median gap between tokens) and `output_throughput` (tokens per
# second), and compare one run across its rounds: how far they differ is this host's noise, and the
# reason every comparison below uses medians and ranges.
#
# :::{dropdown} How we know: how the rounds are arranged
# The servers take turns: in each of `rounds` rounds every run goes to one server and then to the
# other, through the benchmark client (one process per server and round), and the server that goes
# first changes from round to round. Each round has seeds of its own, so no round is served from
# the prefix cache an earlier round filled (the conversations' system prompts start with their
# round's seed, so two rounds share no more than the chat template's opening tokens). A slow
# stretch of the host then lands on both engines, and every ratio below comes with the range of its
# rounds. On the cpu profile both servers stay up side by side. On a GPU they do not fit together
# (vLLM refuses to start unless its share of the card is free, `request_memory` in
# `vllm/v1/worker/utils.py`, even when given its pool in bytes), so there every round starts each
# server afresh, in the same turns, with its warm-up run: one start per server and round instead of one
# per server, so that a drift of the machine lands on both engines there too. The client runs on
# the same machine as the servers, and on the cpu profile they share its cores, for both engines
# alike.
# :::
#

# %%
from servelab.measure.chapter_servers import c07
from servelab.measure.lineup import side_by_side

servers = c07.servers(prof)  # both engines with one KV budget (`python -m servelab plan` lists them)
kv_tokens = servers["vLLM"].options["kv_cache_tokens"]
warm = h2h.warm_up([r for plan in plans for r in plan])
capacity, launched = {}, {}


def started(engine, server):
    capacity[engine] = engine_capacity(server)
    launched[engine] = {"argv": server.spec.argv, "env": {**server.spec.env, **server.extra_env}}


names = {"vllm": "vLLM", "sglang": "SGLang"}
live = {e: servers[names[e]].server(prof) for e in engines}
table, requests_sent = h2h.measure_rounds(live, plans,
                                          together=side_by_side(prof), output_tokens=output_tokens, warm=warm,
                                          started=started)
saved = results.save("head_to_head", table, prof, output_tokens=output_tokens, seed=seed, kv_cache_tokens=kv_tokens,
                     capacity=capacity, warm_up_seed=warm.seed, rounds=rounds,
                     runs=[{"name": r.name, "round": i, "dataset": list(r.dataset), "seed": r.seed}
                           for i, plan in enumerate(plans) for r in plan])
results.save("head_to_head_requests", requests_sent, prof)
shown = table[["round", "engine", "run", "completed", "failed", "cached_tokens", "duration", "p50_ttft_ms",
               "p50_itl_ms", "output_throughput"]].round(1)
for engine in engines:  # one table per engine, each printed whole
    display(shown[shown.engine.eq(engine)].reset_index(drop=True))

# %% [markdown]
# The servers as they ran: each command line, and the KV cache each engine built from the same budget
# (`tokens`, in blocks of `block_size` tokens). The `cached_tokens` column above
# counts the prompt tokens each engine served from its prefix cache during a run. For the same
# prompts the two engines count differently: vLLM caches a prefix only in whole KV blocks, SGLang
# to the token ([chapter 04](04_prefix_caching.ipynb)).
#
# :::{dropdown} How we know: what the capacity table's columns mean
# Each engine's row is what it reported building from the same budget in tokens: `block_size` is
# the tokens per KV block, `blocks` how many it built, `tokens` their product and `usable` what
# requests can hold. vLLM keeps one block aside as a null block, so its usable tokens are one block
# fewer. `max_concurrency` is vLLM's own figure (`kv_cache_max_concurrency`,
# `get_max_concurrency_for_kv_cache_config` in `vllm/v1/core/kv_cache_utils.py`): the pool's blocks,
# null block included, over the blocks one full-length request needs, so requests of full length
# that fit at once, a fraction where the last one fits only in part; SGLang reports no such figure,
# hence NaN in its row. `kv_gib`
# is the size of SGLang's K and V buffers in GiB, as its server reports it (the pool plus one padding
# page); vLLM reports none, hence NaN in its row (it was given its pool in bytes, as shown below).
# :::

# %%
for engine, launch in launched.items():
    print(f"{engine}:", shlex.join([Path(launch["argv"][0]).name, *launch["argv"][1:]]))
    print("  environment set by servelab:", launch["env"] or "nothing")
pd.DataFrame(capacity).T

# %%
# NBVAL_CHECK_OUTPUT
by = table.set_index(["engine", "run", "round"]).sort_index()  # sorted: a lookup by (engine, run) is then fast
light, heavy = f"random, concurrency {min(concurrencies)}", f"random, concurrency {max(concurrencies)}"
# both engines built the same KV capacity from the budget, within one block
print(abs(capacity["vllm"]["usable"] - capacity["sglang"]["usable"]) <= max(c["block_size"] for c in capacity.values()))
# every request of every run completed on both engines, none failed
print(bool((table.completed == table.prompts).all() and (table.failed == 0).all()))
# no random-prompt run got a single prefix-cache hit on either engine (each engine's own counter) ...
print(bool((table[table.workload.eq("random")].cached_tokens == 0).all()))
# ... while the same counters saw the shared-prefix run's hits on both engines
print(bool((table[table.workload.eq("shared_prefix")].cached_tokens > 0).all()))
# both engines were sent and returned the same numbers of tokens in every run
tokens = table.pivot(index=["run", "round"], columns="engine", values=["total_input_tokens", "total_output_tokens"])
print(bool((tokens.xs("vllm", axis=1, level=1) == tokens.xs("sglang", axis=1, level=1)).all().all()))
# more requests in flight raise each engine's output throughput, in every round
print(*(bool((by.loc[(e, heavy), "output_throughput"] > by.loc[(e, light), "output_throughput"]).all())
        for e in engines))

# %% [markdown]
# ### On your own server
#
# The same measurement runs against any server that speaks the OpenAI-compatible API: run the
# command the next cell prints (this chapter's busiest random-prompt run) with your server's address
# for `YOUR-HOST` and your model's name and tokenizer. To compare two engines
# fairly, give both the same KV cache in tokens: SGLang takes tokens (`--max-total-tokens`), vLLM
# takes bytes per GPU (`--kv-cache-memory-bytes`): the tokens times the bytes per token, 2 (K and V)
# × layers × KV heads × head size × bytes per number, divided by N with `--tensor-parallel-size N`.
# The cell prints that product for this run's model.
#
# :::{dropdown} How we know: three of the flags this book's servers add
# `--enforce-eager` makes vLLM run the model as plain PyTorch, skipping the compilation its CPU
# platform otherwise does at start (a CPU has no CUDA graphs to capture), so it starts faster on the
# cpu profile (`enforce_eager` in `vllm/config/model.py`; the start times measured are in a comment
# of `servelab/data/profiles.toml`).
# `--enable-prompt-tokens-details` makes vLLM's API report each request's cached prompt tokens in
# its usage (`vllm/entrypoints/launchers/cli_args.py`). `--sleep-on-idle` lets SGLang's scheduler
# sleep while no request waits instead of polling ("Reduce CPU usage when sglang is idle.")
# (`sleep_on_idle` in `sglang/srt/arg_groups/fields/device.py`): on the cpu profile the two servers
# share the cores, and an idle one must not take them from the one measured. The others are in the
# printed commands: `--enable-metrics` (SGLang's counters), and the cpu profile's `--device cpu`,
# `--attention-backend torch_native` and `--sampling-backend pytorch` (chapter 00).
# :::

# %%
busiest = next(r for r in runs if r.name == heavy)
yours = SimpleNamespace(url="http://YOUR-HOST:8000", served_model=live["vllm"].served_model, model=live["vllm"].model)
lines = []
for arg in busiest.args(yours, output_tokens):  # one flag and its value per line
    if arg.startswith("--") or not lines:
        lines.append([arg])
    else:
        lines[-1].append(arg)
print("vllm bench serve \\\n  " + " \\\n  ".join(shlex.join(line) for line in lines))
kv_bytes = kv_budget_flags("vllm", kv_tokens, live["vllm"].model, prof.dtype)["kv_cache_memory_bytes"]
print(f"\nOne KV budget of {kv_tokens} tokens for {prof.model} in {prof.dtype}:")
print(f"  SGLang: --max-total-tokens {kv_tokens}")
print(f"  vLLM:   --kv-cache-memory-bytes {kv_bytes}  ({kv_tokens} tokens x {kv_bytes // kv_tokens} bytes per token)")

# %% [markdown]
# The first figure is the concurrency sweep: time to first token (TTFT), inter-token latency and output
# throughput as the limit on requests in flight grows. Each line is the median, the band reaches the
# 90th percentile, a marker is the largest value. Read it left to right: while throughput climbs,
# more requests at once are worth their extra wait; where it flattens and TTFT still climbs, they
# buy only waiting. That knee is where to set your server's cap on running requests (`--max-num-seqs`;
# here the client set the limit). If throughput still climbs at the largest limit, there is no knee
# yet: widen `concurrencies`.
#
# :::{dropdown} How we know: what each point of the figure is
# The first figure is the concurrency sweep. Each line is the median, the shaded band runs from
# the median to the 90th percentile, and the markers are the largest value of the run: with at most
# a few dozen requests per run, a 99th percentile would only be the largest value interpolated, so
# the figure shows the largest itself (from the saved per-request times). Throughput is output
# tokens per second over the whole run. Every point is the median of the rounds, and the largest
# value the largest of any round. The axes start at zero, so the ratios between the lines can be
# read off the picture; how far the rounds spread is in the table of ratios below.
# :::
#

# %%
middle = h2h.medians(table).merge(h2h.maxima(requests_sent), on=["engine", "run"], how="left")
cpu_caveat = N_("cpu profile: a small model on shared CPU cores; this ranks two set-ups, not the engines") \
    if prof.is_cpu else None
sweep = middle[middle.workload.eq("random") & middle.concurrency.notna()]
draw_sweep(sweep, "concurrency", ("output_throughput", N_("Output throughput"), N_("tokens/s")),
           N_("requests in flight (limit)"), caveat=cpu_caveat)
plt.show()

# %% [markdown]
# The second figure is the rate sweep: requests arrive at random times (the same times for both
# engines) and nothing limits how many are in flight. Where the rate exceeds what the server
# completes, requests queue and TTFT grows. Each rate sends only a few requests, so the completed
# requests per second stay below the dotted rate sent even where the server keeps up: read the
# direction of TTFT, not the height of the throughput.
#
# :::{dropdown} How we know: why completed requests stay below the rate sent
# With so few requests per rate, each run is mostly its start and its tail: the completed requests
# per second are counted over the whole run, sending included, so they stay below the dotted line of
# the rate sent even where the server keeps up. The points show a direction, not a capacity curve.
# :::

# %%
by_rate = middle[middle.workload.eq("random") & middle.concurrency.isna()]
draw_sweep(by_rate, "rate", ("request_throughput", N_("Completed requests"), N_("requests/s")),
           N_("request rate (req/s)"), sent=rates, caveat=cpu_caveat)
plt.show()

# %% [markdown]
# The ratios put both engines side by side: vLLM's value over SGLang's, for each run and round (on the
# cpu profile, two set-ups rather than the engines, as the next section explains). A
# latency ratio below 1, or a throughput ratio above 1, favours vLLM. The first table gives each
# run's median round; the second, for three metrics, the lowest and highest round and the engine
# that every round favoured (blank where the rounds disagree). Even two equal engines put every
# round on one side now and then, by chance: the probability printed below says how often, so
# "every round agreed" is strong evidence only when that probability is small.
#
# :::{dropdown} How we know: which claims these ratios settle
# These are what the [claims ledger](../book/claims.md) sets against the articles' benchmark figures
# (rows `throughput-vs-latency-split`, `cerebrium-ttft-123-vs-340`, `sglang-5000-tokens-per-second`,
# `vllm-7b-throughput-range`, `vllm-ttft-from-streaming`): one client, both engines in one run.
# :::

# %%
from servelab.measure.rounds import chance_of_agreement

ratio = h2h.ratios(table)
results.save("head_to_head_ratios", ratio.reset_index(), prof, rounds=rounds)
ratio.round(2)

# %%
rounds_range = pd.concat({metric: h2h.ratio_spread(table, metric, lower_is_better=metric != "output_throughput")
                          for metric in ("p50_ttft_ms", "p50_itl_ms", "output_throughput")}, names=["metric"])
results.save("head_to_head_ratio_rounds", rounds_range.reset_index(), prof, rounds=rounds)
print(f"With {rounds} rounds and no real difference, all rounds favour one engine by chance "
      f"{chance_of_agreement(rounds):.0%} of the time.")
print(rounds_range.drop(columns="rounds").round(2).to_string())  # every run had `rounds` rounds

# %%
spread = ratio[["p50_ttft_ms", "p50_itl_ms", "output_throughput"]]
mid = middle.set_index(["engine", "run"])
print(f"Median TTFT, vLLM/SGLang: from {spread.p50_ttft_ms.min():.2f} ({spread.p50_ttft_ms.idxmin()}) "
      f"to {spread.p50_ttft_ms.max():.2f} ({spread.p50_ttft_ms.idxmax()}).")
print(f"Median ITL, vLLM/SGLang: from {spread.p50_itl_ms.min():.2f} to {spread.p50_itl_ms.max():.2f}.")
print(f"Output throughput, vLLM/SGLang: from {spread.output_throughput.min():.2f} "
      f"({spread.output_throughput.idxmin()}) to {spread.output_throughput.max():.2f} "
      f"({spread.output_throughput.idxmax()}).")
for engine in engines:
    gain = mid.loc[(engine, heavy), "output_throughput"] / mid.loc[(engine, light), "output_throughput"]
    wait = mid.loc[(engine, heavy), "p50_ttft_ms"] / mid.loc[(engine, light), "p50_ttft_ms"]
    print(f"{engine}: from {min(concurrencies)} to {max(concurrencies)} requests in flight, throughput x{gain:.1f}, "
          f"median TTFT x{wait:.1f}.")
print(f"Profile {prof.name}: {prof.model} in {prof.dtype} on {prof.device}; KV block: vLLM "
      f"{capacity['vllm']['block_size']} tokens, SGLang {capacity['sglang']['block_size']} token(s).")

# %% [markdown]
# ### What these numbers can and cannot tell about GPUs
#
# What this run teaches on any machine: whether throughput grows with the requests in flight, whether
# TTFT climbs with load, and whether a shared prefix or a re-sent conversation gets cheaper. What it
# cannot teach on the cpu profile is which engine is faster: there SGLang runs slow fallbacks
# without its CPU kernels, on one thread, while vLLM runs compiled CPU kernels, so the
# engine-against-engine ratios rank these two set-ups, not the engines. To rank the engines for a
# deployment, run this notebook with a GPU profile.
#
# :::{dropdown} How we know: why the cpu ratios rank set-ups, not engines
# They can tell how the two engines' schedulers, caches and HTTP front ends behave under the same
# requests: whether throughput grows with the requests in flight, whether TTFT climbs with load (the
# ledger's `concurrency-raises-ttft`), whether a shared prefix or a re-sent conversation gets
# cheaper, and how each engine ranks within this run. On the cpu profile they cannot tell how fast
# either engine is on a GPU. There a small model runs in float32 on the machine's CPU cores, which
# the benchmark client shares with the server (the profile, model and block sizes are printed
# above). The two engines do not run comparable code there either: SGLang runs without its CPU
# kernels (servelab's stand-in for `sgl_kernel` registers no op, so SGLang's AMX paths stay off and
# its torch fallbacks run), with the `torch_native` attention back end and one OpenMP thread, while
# vLLM runs its compiled CPU kernels; the command lines printed after the runs show both. So on cpu
# the engine-against-engine ratios rank these two set-ups, not the engines, and chapter 08's selection
# guide does not lean on them there. vLLM's CPU platform also uses 128-token KV blocks
# (`vllm/platforms/cpu.py`), larger than its GPU default (`CacheConfig.DEFAULT_BLOCK_SIZE`), and a
# prefix is cached only in whole blocks: that shapes the shared-prefix and multi-turn runs. On a GPU
# the CUDA kernels, CUDA graphs and overlap schedulers that decide the ranking are in play, and none
# of them is measured on cpu. The engines' Python front ends (HTTP, tokenization, streaming) cost a
# roughly fixed time per request and per token, whose share of a step is different on a GPU, where a
# step of the same model is much shorter. So the ratios above are this machine's, for this model, at
# these versions; the way to rank the engines for a deployment is to run this notebook with a GPU
# profile, where the same cells measure them on the GPU.
# :::
#

# %% [markdown]
# ## Deployment recipes
#
# A launch command helps only if the engine accepts it. This section gives the articles' commands and
# their corrected forms, and launch commands for one GPU, for four GPUs with tensor parallelism (every
# layer's weights split across the GPUs, which compute each layer together) and for two nodes (two
# machines serving one model). Every command was handed to its engine's own parser without starting
# anything: the next cell prints each verdict, and the check after it demands that every recipe and
# corrected command is accepted. A corrected form is the
# smallest change the pinned engine accepts: today's entry point (`vllm serve`), today's flag and
# model names, and, where the engine rejected the articles' form, what its printed error asks for.
#
# :::{dropdown} How we know: multi-node launches and the parser check
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
# models it cannot read here are given a stand-in config with their shape;
# `servelab/engines/flags.py`). The ledger rows these commands settle:
# `vllm-articles-command-valid`, `vllm-tp-flag`, `vllm-ray-multinode`, `sglang-tp-dp` and
# `sglang-no-multinode-docs`.
# :::
#

# %%
book = recipes.load()
verdicts = recipes.table(book)
results.save("deployment_recipes", verdicts, prof)
gpus = {r.id: r.gpu for r in book.recipes}


def show(rows):
    """Each command's verdict, then the command on its own lines."""
    for _, row in rows.iterrows():
        where = f", {gpus[row.id]}" if row.form == "recipe" else ""
        error = row["engine's error"]
        print(f"[{row.engine}, {row.setting}{where}, {row.id}, {row.form}] accepted: {row.accepted} "
              f"({row['checked with']})\n  {row.command}" + (f"\n  error: {error}" if error else "") + "\n")


print("The articles' commands and their corrected forms:\n")
show(verdicts[verdicts.form != "recipe"])

# %%
print("vLLM recipes:\n")
show(verdicts[(verdicts.form == "recipe") & verdicts.engine.eq("vllm")])

# %%
print("SGLang recipes:\n")
show(verdicts[(verdicts.form == "recipe") & verdicts.engine.eq("sglang")])

# %%
# NBVAL_CHECK_OUTPUT
recipe_rows = verdicts[verdicts.form == "recipe"]
# every recipe is accepted by its engine's parser
print(bool(recipe_rows.accepted.all()), len(recipe_rows) == len(book.recipes))
# every corrected article command is accepted; the articles' removed vLLM flags and SGLang arguments
# are not
print(bool(verdicts[verdicts.form == "corrected"].accepted.all()),
      not verdicts.loc[verdicts.id.eq("vllm-removed-speculative-flags") & verdicts.form.ne("corrected"),
                       "accepted"].any())
# every flag in every command shown is explained below
print(recipes.unexplained(book) == [])

# %% [markdown]
# :::{dropdown} How we know: the Ray cluster start
# Two-node recipes also need what runs before them; the Ray recipe's cluster start is shown here,
# not parsed, since it is Ray's command, not vLLM's.
# :::

# %%
for r in book.recipes:
    if r.before:
        print(f"{r.id}:", *r.before, sep="\n  ")
    print(f"{r.id}: {r.note}")

# %% [markdown]
# ### Every flag, and what it trades
#
# Two flags look alike and are not:
#
# - vLLM's `--gpu-memory-utilization 0.9` says: *this process may use 90% of the GPU's total memory,
#   for everything*. The weights come first, then the working memory of a trial pass and of CUDA
#   graphs, and the KV cache gets the rest.
# - SGLang's `--mem-fraction-static 0.9` says: *keep 10% of the memory that was free before the
#   weights were loaded as slack* for working memory; the KV cache gets what is free after the
#   weights, minus that slack. Its own docstring, printed below, describes it otherwise.
#
# The next cell reads both defaults from the engines' own classes and source.
#
# :::{dropdown} How we know: what each memory flag computes
# Two flags are often read as the same thing and are not. vLLM's `--gpu-memory-utilization` is
# a share of the GPU's *total* memory: the instance may use total memory times the fraction
# (`vllm/v1/worker/utils.py`, `request_memory`) for weights, activations, CUDA graphs and the KV
# cache, which gets what is left after a profiling run. SGLang's `--mem-fraction-static` is
# described in its own docstring as (model weights + KV cache pool) / GPU memory capacity, printed
# below, but its code computes something else: the KV pool gets the memory free once the weights
# are loaded, minus (1 - fraction) times the memory that was free before they were loaded, after
# distributed start-up, the minimum over ranks (`_profile_available_bytes` in
# `sglang/srt/mem_cache/kv_cache_configurator.py`; `measure_pre_model_load_memory` in
# `sglang/srt/distributed/bootstrap.py`). The fraction sets the slack left for activations and
# CUDA graph buffers, of the memory free before loading, not of the total. The defaults are read
# here from the engines' own classes and source.
# :::
#

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

# %% [markdown]
# A parser accepts a command whatever the model's size. Whether a recipe can start depends on its
# GPU, so each recipe names one, and the next cell computes, per GPU, the model's weights and the KV
# cache of one request of the full context length, against the share of that GPU's memory the recipe
# gives its engine. On several GPUs both are split: tensor parallelism splits every layer, pipeline
# parallelism gives each group of GPUs a stage of consecutive layers. A recipe fits when the weights
# plus that KV cache stay within the share. The two-node recipes serve a model that does not fit one
# node of the same GPUs, as the line printed first shows.
#
# :::{dropdown} How we know: what the fit check does and does not test
# A parser accepts a command whatever the model's size. Whether a recipe can start depends on its
# GPU, so each recipe names one, and the next cell computes, per GPU, the model's weights (its
# parameters in bfloat16, split over tensor and pipeline parallelism), the KV cache of one request
# of the full context length (its layers split by the pipeline, its KV heads by tensor
# parallelism), and the share the recipe gives its engine of that GPU's nominal memory. The shapes
# come from `servelab/data/model_shapes.toml`. A recipe fits when weights plus that KV cache stay
# within the share: necessary, not sufficient, since activations and CUDA graphs come on top,
# hence the headroom column. For SGLang the fraction applies to the memory free before loading, at
# most the total, so the test is looser for it still. The two-node recipes serve a model whose
# weights and one full-length request take more than the share on one node of the same GPUs, as
# the line printed first shows.
# :::
#

# %%
fits = recipes.memory_fit(book)
results.save("deployment_memory_fit", fits, prof)
two_node = next(r for r in book.recipes if r.id == "vllm-2node-mp-rank0")
alone = recipes.refit(book, two_node.id, tp=4, pp=1)
print(f"{two_node.id} on one node of {two_node.gpu} (tensor parallel {alone['tp']}, no pipeline): weights "
      f"{alone['weights_gib']:.1f} GiB + KV {alone['kv_gib']:.1f} GiB per GPU against a share of "
      f"{alone['budget_gib']:.1f} GiB; fits: {alone['fits']}")
fits.round(2)

# %%
# NBVAL_CHECK_OUTPUT
# every recipe's weights and one full-length request fit the share it gives its engine on the GPU it
# names
print(bool(fits.fits.all()))
# the two-node recipes' model does not fit one node of the same GPUs at the same share
print(not alone["fits"])

# %% [markdown]
# `--max-num-seqs`
# (SGLang: `--max-running-requests`) caps the requests running at once: the more run, the fewer
# tokens each can hold before the scheduler must queue or preempt (chapter 03). `--max-model-len`
# (SGLang: `--context-length`) caps one request; vLLM allocates KV blocks as tokens arrive, so it
# does not change how many typical requests fit, only the start-up check that the pool holds one
# request of that length. The Llama 3.1 models are gated on the Hugging Face hub: accept the licence
# there and set `HF_TOKEN` before the first start.
#
# :::{dropdown} How we know: vLLM's default batch cap
# vLLM's default `--max-num-seqs` for `vllm serve` depends on the GPU, as printed above from its own
# `get_batch_defaults`.
# :::

# %%
for _, row in recipes.explanations(book).iterrows():
    print(f"{row.engine} {row.flag}: {row['what it does']}")

# %% [markdown]
# ## What to remember
#
# - **Compare engines with one client.** Same prompts, arrival times and latency code, the engines
#   taking turns over several rounds: then a ratio between them is a measurement, with a range.
# - **More requests in flight buy throughput and cost waiting.** The line after the ratio tables
#   printed, per engine, what going from the fewest to the most requests in flight did to throughput
#   and median TTFT: weigh both when you set `--max-num-seqs` (SGLang: `--max-running-requests`).
# - **Rank engines on the hardware you will serve on.** On the cpu profile the ratios rank two CPU
#   set-ups, not the engines; run the same cells with a GPU profile before you choose.
# - **The same memory number means different things.** vLLM's `--gpu-memory-utilization` is a share
#   of total GPU memory; SGLang's `--mem-fraction-static` leaves one minus the fraction of the memory
#   free before loading as slack. To give both engines the same KV cache, give it in tokens.
# - **Check a launch command before you rent the GPU.** Hand it to the engine's own parser, and check that
#   the weights plus one full-length request fit its share of your GPU.

# %% [markdown]
# ## Exercises
#
# 1. (10 min, no engine) From the saved head-to-head table, compute each engine's scaling
#    efficiency (throughput ratio over concurrency ratio) between neighbouring points of the
#    concurrency sweep. Where is it lowest?
# 2. (10 min, parser, no server) Write SGLang's two-node recipe with tensor parallelism over all
#    eight GPUs (`--tp-size 8`, no pipeline), check it with SGLang's own parser, and compare what
#    each GPU holds in the two layouts with `recipes.refit`.
# 3. (10 min, no engine) Does either engine win every run? Count, per metric, the runs where the
#    median round favours vLLM, name the run whose throughput ratio is farthest from even, and count,
#    per metric, the runs where every round favoured the same engine (`rounds_range`, above). Then say
#    why, on the cpu profile, this does not tell you which engine is faster on your GPU.
#
# Fill in each stub, then run its check; solutions are hidden below.

# %%
# Exercise 1: your answer. `sweep` holds the sweep's rows: engine, concurrency, output_throughput, ...
from servelab.book import exercise_check
from servelab.measure.exercises import choosing_and_deploying as answers


def scaling_efficiency(engine: str, lower: int, upper: int) -> float:
    """`engine`'s throughput ratio from `lower` to `upper` requests in flight, over upper / lower."""
    raise NotImplementedError


# %%
exercise_check.check(scaling_efficiency, answers.efficiency_cases(sweep), title="Exercise 1")

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
below = eff[eff.efficiency < 1]
print(f"Answer: the efficiency is below 1 in {len(below)} of {len(eff)} steps (throughput grows less than the "
      f"requests in flight there); the lowest is {worst.efficiency:.2f}, for {worst.engine} from {worst['from']} to "
      f"{worst.to} requests in flight, where throughput grows x{worst['throughput x']:.2f} for "
      f"x{worst.to / worst['from']:.0f} the requests.")


def scaling_efficiency(engine: str, lower: int, upper: int) -> float:
    row = eff[(eff.engine == engine) & (eff["from"] == lower) & (eff.to == upper)].iloc[0]
    return float(row.efficiency)


exercise_check.check(scaling_efficiency, answers.efficiency_cases(sweep), title="Solution 1")

# %%
# Exercise 2: your answer, the command as a list of arguments. Start from the recipe's own command:
#   two_node_sglang = next(r for r in book.recipes if r.id == "sglang-2node-rank0")
#   list(two_node_sglang.command)   # its arguments, ["sglang", "serve", "--model-path", ...]
# and try yours with SGLang's parser before the check: flags.check("sglang", tp8_command).ok (and .error).
tp8_command: list[str] = ...  # ["sglang", "serve", "--model-path", ...]

# %%
exercise_check.check(answers.recipe_facts(lambda: tp8_command), answers.recipe_cases(), title="Exercise 2")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2
two_node_sglang = next(r for r in book.recipes if r.id == "sglang-2node-rank0")
tp8 = list(two_node_sglang.command)  # the recipe's arguments, then: no pipeline, tensor parallel over all 8 GPUs
del tp8[tp8.index("--pp-size"):tp8.index("--pp-size") + 2]
tp8[tp8.index("--tp-size") + 1] = "8"
verdict = flags.check("sglang", tp8)
print(shlex.join(tp8))
print("accepted:", verdict.ok, verdict.error or "")
layouts = {"tp 8": recipes.refit(book, "sglang-2node-rank0", tp=8, pp=1),
           "tp 4 x pp 2": recipes.refit(book, "sglang-2node-rank0", tp=4, pp=2)}
print(pd.DataFrame(layouts).T[["weights_gib", "kv_gib", "headroom_gib"]].astype(float).round(2).to_string())
same = all(abs(layouts["tp 8"][k] - layouts["tp 4 x pp 2"][k]) < 1e-9 for k in ("weights_gib", "kv_gib"))
print(f"Answer: SGLang's parser {'accepts' if verdict.ok else 'rejects'} it ({verdict.checked_with}); each GPU "
      f"holds {'the same' if same else 'a different'} share of weights and KV cache in both layouts, since both split "
      "the model eight ways. What differs is the traffic between the nodes: with --tp-size 8 every layer ends with an "
      "all-reduce across them, which needs a fast network between the nodes; with two pipeline stages only the "
      "activations cross, once per stage.")
tp8_command = tp8
exercise_check.check(answers.recipe_facts(lambda: tp8_command), answers.recipe_cases(), title="Solution 2")

# %%
# Exercise 3: your answer. `ratio` is vLLM over SGLang per run (rows) for p50_ttft_ms, p50_itl_ms and
# output_throughput, from each run's median round.


def runs_favouring_vllm(metric: str) -> int:
    """How many runs favour vLLM on `metric`: "TTFT p50" (`ratio.p50_ttft_ms` below 1), "ITL p50"
    (`ratio.p50_itl_ms` below 1) or "throughput" (`ratio.output_throughput` above 1)."""
    raise NotImplementedError


# %%
exercise_check.check(runs_favouring_vllm, answers.wins_cases(ratio), title="Exercise 3")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3
favours = pd.DataFrame({"TTFT p50": ratio.p50_ttft_ms < 1, "ITL p50": ratio.p50_itl_ms < 1,
                        "throughput": ratio.output_throughput > 1})
print(favours.to_string())
far = (ratio.output_throughput - 1).abs().idxmax()
winner = {m: "vLLM" if col.all() else "SGLang" if (~col).all() else "neither" for m, col in favours.items()}
print(f"Answer: vLLM is ahead in {favours.sum().to_dict()} of {len(ratio)} runs per metric; the engine that "
      f"wins every run, per metric: {winner}; the throughput ratio farthest from even is "
      f"{ratio.output_throughput[far]:.2f}, in '{far}'.")


def runs_favouring_vllm(metric: str) -> int:
    return int(favours[metric].sum())


exercise_check.check(runs_favouring_vllm, answers.wins_cases(ratio), title="Solution 3")
agreed = (rounds_range["favoured in every round"] != "").groupby(level="metric").sum()
print(f"Every round favoured the same engine in {agreed.to_dict()} of {len(ratio)} runs per metric "
      f"({rounds} rounds each; by chance alone {chance_of_agreement(rounds):.0%} of runs with no real difference).")
# Why this does not rank the engines on your GPU: on the cpu profile SGLang runs torch fallbacks on one thread
# while vLLM runs compiled CPU kernels ("What these numbers can and cannot tell about GPUs"), so a win here is
# the set-up's. On a GPU profile the same cells compare the engines' CUDA paths.
