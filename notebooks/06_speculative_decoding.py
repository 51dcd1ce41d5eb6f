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
# # Speculative decoding: lossless in theory, measured in practice
#
# A model decodes one token per forward pass, and at small batch sizes that pass spends its time
# reading the weights from memory, not computing. Speculative decoding uses the idle arithmetic: a
# cheap draft proposes several tokens, the target model checks them all in one pass and keeps the
# longest prefix it agrees with, plus one of its own. A careful rejection rule keeps the output
# exactly the target's distribution (Leviathan, Kalman & Matias, 2023; Chen et al., 2023). vLLM
# turns it on with `--speculative-config`, SGLang with `--speculative-algorithm`.
#
# The source articles promise two to three times faster generation at no loss of quality. This
# chapter builds the theory and the sampler, then measures vLLM's gain here, and where it stops.

# %% tags=["parameters"]
profile = "auto"
seed = 0
k = 4                          # draft tokens per verification (vLLM's num_speculative_tokens)
lookup = (2, 4)                # n-gram method: shortest and longest context suffix it looks up
draft_costs = [0.02, 0.1, 0.3, 0.6]  # theory: one draft step's cost, in target steps (c)
k_max = 32                     # theory: the longest draft the search for the best k tries
gof_samples = 40_000           # from scratch: two-token continuations sampled per rule
significance = 0.001           # from scratch: the goodness-of-fit test's level
forward_tokens = [1, 2, 4, 8, 16, 32, 64, 128]  # new tokens in one forward pass, measured on the engine
forward_repeats = 3            # each pass size is measured this often; the fastest counts
task_tokens = 48               # longest greedy answer per task (at 32 the summary copies nothing)
plain_repeats = 2              # the plain server answers each task this often; its median rate counts
sweep_task = "edit code"       # the request every wave of the concurrency sweep repeats
sweep_tokens = 26              # tokens per request in the concurrency sweep; 1 + a multiple of k + 1
rounds = 3                     # every server answers the tasks and runs the sweep once per round, interleaved
concurrency = [1, 2, 4, 8, 16]  # requests decoding together in the sweep
draft_layers = None            # drafts cut from the model to run live; None: a quarter of its layers
kv_tokens = None               # KV budget per server, in tokens; None: six full-length sequences
rounding_dtype = "bfloat16"    # the 16-bit case for greedy equality

# %%
import numpy as np
import pandas as pd
from matplotlib import pyplot as plt
from matplotlib import ticker

from servelab.book import banner, plots, results
from servelab.book.diagrams_speculative import draw_token_strip
from servelab.sim import speculative as spec

prof = banner.start(profile)

# %% [markdown]
# ## The theory
#
# Suppose each drafted token is accepted with the same probability α, independently of the
# others, as Leviathan et al. do. A verification keeps the drafted tokens up to the first rejection
# and always adds one token of the target's own (the correction at the rejection, or a bonus token
# when all k were accepted), so it emits on average E = 1 + α + α² + … + α^k tokens. If one draft
# step costs c target steps and the verification one, k drafts and a verification take kc + 1
# steps, and the speedup is E / (kc + 1).
#
# So while verifying costs a plain step (a decode step, no speculation), the gain is at most k + 1,
# and a draft accepted less often than it costs (α ≤ c) never pays.
#
# :::{dropdown} How we know: the bound, and vLLM's acceptance rate
# Two things follow. As long as verifying costs at least one plain step, the gain is bounded by
# k + 1, reached only with a free, perfect draft; a verification that a machine runs faster than a
# single-token step (we will meet one) moves that bound up by the same factor. And a draft that is
# accepted less often than it costs (α ≤ c) can never pay. vLLM reports a "draft
# acceptance rate", accepted over drafted tokens, which is not α: drafted tokens after a rejection
# are counted but never checked, so that rate is lower than α.
# :::
#
# Eight verifications drawn under that assumption, one row each:

# %%
strip_alpha, strip_k = 0.7, 4
strip = spec.sample_accepted(strip_alpha, strip_k, 8, seed=seed)
ax = draw_token_strip(strip, strip_k)
ax.set_title(plots.label("{} verifications of k = {} drafts, α = {} (simulated)").format(len(strip), strip_k,
                                                                                           strip_alpha))
plt.show()
print(f"{len(strip)} verifications emitted {int((strip + 1).sum())} tokens; the mean E predicts "
      f"{len(strip) * spec.expected_tokens(strip_alpha, strip_k):.1f}; plain decoding takes one step per token")

# %%
alphas = np.round(np.linspace(0, 1, 101), 2)
ks = [1, 2, 4, 8]
curves = pd.DataFrame([{"alpha": a, "k": kk, "tokens per verification": spec.expected_tokens(a, kk),
                        "vLLM acceptance rate": spec.draft_acceptance_rate(a, kk)}
                       for a in alphas for kk in ks])
best = pd.DataFrame([{"alpha": a, "c": c, "best k": spec.optimal_k(a, c, k_max=k_max),
                      "speedup at best k": max(1.0, *[spec.speedup(a, kk, c) for kk in range(1, k_max + 1)])}
                     for a in alphas for c in draft_costs])
results.save("speculative_theory", curves, prof)
results.save("speculative_best_k", best, prof)

fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 4))
plots.axes("Tokens per verification", "acceptance probability α", "tokens emitted per verification (E)", ax=left)
plots.axes("What vLLM reports", "acceptance probability α", "accepted / drafted tokens", ax=middle)
for kk, rows in curves.groupby("k"):
    left.plot(rows.alpha, rows["tokens per verification"], label=plots.label("k = {}").format(kk))
    if kk > 1:  # for k = 1 the rate is α itself: the dotted line
        middle.plot(rows.alpha, rows["vLLM acceptance rate"], label=plots.label("k = {}").format(kk))
middle.plot([0, 1], [0, 1], color="grey", ls=":", lw=2, zorder=5, label=plots.label("α itself (= k = 1)"))
left.legend()
middle.legend()
plots.axes("The best speculation length", "acceptance probability α", "", ax=right)
right.set_ylabel(plots.label("k that maximises the speedup (searched up to {})").format(k_max))
for c, rows in best.groupby("c"):
    right.step(rows.alpha, rows["best k"], where="post", label=plots.label("c = {}").format(c))
right.legend(title=plots.label("draft cost"))
plt.tight_layout()
plt.show()

# %% [markdown]
# Left: E for each k; at α = 0.5 even unlimited drafts give at most two tokens per verification.
# Middle: vLLM's "draft acceptance rate" (accepted over drafted tokens) also counts drafts after a
# rejection, never checked, so for k above 1 it is below α. Right: the best k grows with α and
# shrinks as the draft gets dearer. The table lists the best k per α and draft cost c.
#
# :::{dropdown} How we know: reading the panels, and the search's bound on k
# On the left, E for each k: with α = 0.5 even unlimited drafts give at most two tokens per
# verification. In the middle, vLLM's rate for the same α: it equals (E − 1)/k, which is α only
# for k = 1 and falls further below α the longer the draft. On the right, the best k grows with α
# and shrinks as the draft gets dearer; an almost free draft (c = 0.02) wants long drafts as
# soon as α is high, and k = 0 means that no draft length pays.
#
# The search tries k up to `k_max`, a bound of this chapter's, not of the engines: for the methods
# this chapter runs, vLLM asks only that `num_speculative_tokens` be positive
# (`vllm/config/speculative.py`), and SGLang's parser puts no bound on `--speculative-num-steps`
# (`sglang/srt/arg_groups/fields/spec.py`).
# Where the best k found is `k_max` itself, the bound decides, not the theory. At α = 1 that is
# so for every c below 1, since every longer draft is then better; the line under the table lists
# every α and c of the grid where it happens. The speedups at those best k:
# :::

# %%
capped = best[best["best k"] == k_max].groupby("c").alpha.agg(list)  # where the search's bound decides
print(f"best k = k_max = {k_max} (the bound decides) at: "
      + "; ".join(f"c = {c}: α = {', '.join(f'{a:.2f}' for a in alphas_c)}" for c, alphas_c in capped.items()))
table = best[best.alpha.isin([0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0])]
table.pivot(index="alpha", columns="c", values=["best k", "speedup at best k"]).round(2).astype(
    {("best k", c): int for c in draft_costs}).rename(columns={"best k": f"best k (at most {k_max})"})

# %% [markdown]
# ## Why verifying k tokens costs about one step
#
# The theory charges one target step for checking k + 1 tokens. That holds while a forward pass is
# bound by memory bandwidth ([chapter 01](01_serving_basics.ipynb)): one token reads every weight
# once for two operations per weight. A pass over n tokens reads the same weights once and does n
# times the arithmetic, so its time stays flat until the arithmetic catches up with the reading.
#
# :::{dropdown} How we know: what NumPy measures
# Two numbers from this machine, measured with NumPy in this kernel
# (`servelab/measure/speculative/verification.py`): memory bandwidth (best of several passes that sum a
# 512 MiB array, one thread) and matrix-multiply throughput (float32, all BLAS threads). Both are
# the host's. On a GPU profile the weights live in GPU memory, whose bandwidth NumPy cannot see,
# so there the roofline lines and columns below are left out (`host_roofline`).
# :::

# %%
from servelab.measure.speculative.verification import (
    decode_roofline,
    forward_seconds_bound,
    matmul_flops,
    memory_bandwidth,
)

host_roofline = prof.device != "cuda"  # the engine computes where NumPy does

bandwidth = memory_bandwidth()
flops = matmul_flops()
machine = {"read bandwidth (GB/s)": bandwidth.read_gb_s, "copy bandwidth (GB/s)": bandwidth.copy_gb_s,
           "matmul (GFLOP/s)": flops / 1e9}
results.save("speculative_machine", machine, prof)
pd.Series(machine).round(1)

# %% [markdown]
# Now the engine: a plain vLLM server and one per way of drafting. **Prompt lookup** (vLLM's `ngram`
# method) needs no draft model: it finds the last few tokens earlier in the context and proposes what
# followed them there. By vLLM's default a **draft model** must share the target's tokenizer; none is
# smaller than the cpu profile's SmolLM2-135M, so there the drafts are cut from it: its first L
# layers, or the whole **model as its own draft**.
#
# :::{dropdown} How we know: the tokenizer rule and SmolLM2's family
# By default a draft model must share the target's tokenizer: vLLM checks that the vocabulary sizes
# match and then runs the draft with the target's tokenizer (`vllm/config/speculative.py`). With
# `use_heterogeneous_vocab` set, the draft keeps its own tokenizer and `DraftModelProposer` builds a
# `VocabMapping` that confines its logits to the tokens both vocabularies share
# (`vllm/v1/spec_decode/draft_model.py`); that works only with the `draft_model` method and greedy
# drafting (`draft_sample_method = "greedy"`). This chapter's cpu servers leave it off. On a GPU
# profile the draft is the profile's own draft model. On the cpu profile the model is
# SmolLM2-135M, the smallest of its family: no smaller model shares its tokenizer (SmolLM2-360M
# and 1.7B do, but are larger), so the drafts come from the model itself.
# :::
#
# :::{dropdown} How we know: how the servers start
# Now the engine. We start every vLLM server this chapter times at once: the plain one, one with
# the n-gram method and one per draft (on the cpu profile the drafts are cut from the model itself,
# which takes a moment the first time; a GPU profile names its own draft model). Their starts
# overlap, and each waits idle while another is measured. On a GPU profile, where each server
# claims most of the GPU's memory, they start one at a time instead (`servelab/measure/lineup.py`).
# :::

# %%
from concurrent.futures import ThreadPoolExecutor

from servelab.measure.chapter_servers import c06
from servelab.measure.kv_memory.capacity import engine_capacity
from servelab.measure.lineup import Lineup, side_by_side
from servelab.measure.rounds import chance_of_agreement, one_side
from servelab.measure.setup.check import compare, exact_expected, smallest_margins
from servelab.measure.speculative import gpu as gpu_runs_
from servelab.measure.speculative import live, load, setups
from servelab.measure.speculative.verification import model_parameters

cut_drafts = prof.model.startswith("local:")  # drafts cut from the model itself (cpu); else the profile's draft
layers = setups.target_layers(prof) if cut_drafts else None
draft_layers = (draft_layers or [layers // 4]) if cut_drafts else []
methods = setups.methods(prof, k, lookup, draft_layers)
together = side_by_side(prof)  # every server's memory is bounded: they can run side by side
# every server this chapter starts (`python -m servelab plan` lists them), these first: plain and one per method
servers = c06.servers(prof, k=k, lookup=lookup, rounding_dtype=rounding_dtype, kv_tokens=kv_tokens,
                      draft_layers=draft_layers or None)
kv_tokens = servers["plain"].options["kv_cache_tokens"]
lineup = Lineup({name: servers[name].server(prof) for name in ["plain", *(m.name for m in methods)]},
                together=together)
plain = lineup.take("plain")
block_size = engine_capacity(plain)["block_size"]
print("plain: no speculative config")
for m in methods:  # each server's speculative config in full, one line each
    print(f"{m.name}: {m.config}")

# %% [markdown]
# **One forward over n tokens.** A verification is one pass over k + 1 new tokens after a context held
# in the KV cache (the attention keys and values kept for every token so they need not be recomputed).
# We time such passes for several n; the dashed roofline is the larger of reading the weights once and
# doing their arithmetic.
#
# :::{dropdown} How we know: the forward-pass measurement
# **One forward over n tokens.** We send a prompt of two whole KV blocks once, so the prefix cache
# holds it, then the same prefix followed by n new tokens, asking for one output token. The engine
# then runs one forward over exactly those n tokens, with the prefix as context, which is what a
# verification does. The time is the engine's own: its `vllm:request_prefill_time_seconds`
# histogram, from scheduling the request to its first token, so the HTTP round trip is left out.
# Each size is measured `forward_repeats` times and the fastest counts: on a shared machine the
# slower repeats measure whatever else was running. (Only the last position gets logits here,
# while a verification needs them at all k + 1, so this slightly understates a verification.)
# The dashed line is the roofline: the larger of reading the weights once at the measured
# bandwidth and doing their arithmetic at the measured FLOP/s. It is a reference, not a bound:
# NumPy's one-thread bandwidth is below what the memory can deliver, so the true roofline lies at
# or below this line.
# :::

# %%
if (sweep_tokens - 1) % (k + 1):  # a whole number of verifications after the first token (see the sweep)
    raise ValueError(f"sweep_tokens must be 1 + a multiple of k + 1 = {k + 1} (e.g. {1 + 5 * (k + 1)}), "
                     f"got {sweep_tokens}")
if max(concurrency) * (k + 2) > max(forward_tokens):  # the concurrency sweep's largest pass must be measured
    raise ValueError(f"forward_tokens must reach max(concurrency) * (k + 2) = {max(concurrency) * (k + 2)} tokens, "
                     f"got up to {max(forward_tokens)}")
sweep_prompts = [setups.TASKS[sweep_task]]  # the request every wave of the concurrency sweep repeats
live.warm_up(plain, setups.TASKS, task_tokens, sweep_prompts, concurrency[0], sweep_tokens)
warm = {"plain": plain.proc}  # per server, the start its warm-up ran on
costs = live.forward_costs(plain, block_size, forward_tokens, repeats=forward_repeats, seed=seed)
results.save("speculative_forward_costs", costs, prof, block_size=block_size)
fastest = costs.groupby("tokens").seconds.min()  # the repeat least disturbed by anything else running
verify_cost = spec.verify_cost_from_times(fastest.to_dict())  # v(n): the measured curve, dips included
weights = model_parameters(plain.model.source)
roof = pd.Series([forward_seconds_bound(n, weights, prof.dtype, bandwidth.read_gb_s, flops) if host_roofline
                  else np.nan for n in fastest.index], index=fastest.index)

fig, (ax, per_token) = plt.subplots(1, 2, figsize=(12, 4))
plots.axes("One forward pass over n new tokens (vLLM, measured)", "new tokens in the pass", "engine time (ms)", ax=ax)
ax.plot(costs.tokens, 1000 * costs.seconds, ".", color="grey", alpha=0.5, label=plots.label("each request"))
ax.plot(fastest.index, 1000 * fastest, "o-", label=plots.label("fastest of the repeats"))
if host_roofline:
    ax.plot(roof.index, 1000 * roof, "--", label=plots.label("roofline from NumPy's bandwidth and FLOP/s"))
ax.axvline(k + 1, color="grey", ls=":", label=plots.label("one verification (k + 1 tokens)"))
ax.set_ylim(bottom=0)
ax.legend(fontsize=8)
plots.axes("The same, per token", "new tokens in the pass", "engine time per token (ms)", ax=per_token)
per_token.plot(fastest.index, 1000 * fastest / fastest.index, "o-", label=plots.label("fastest of the repeats"))
if host_roofline:
    per_token.plot(roof.index, 1000 * roof / roof.index, "--", label=plots.label("roofline"))
per_token.set_xscale("log", base=2)
per_token.set_yscale("log")
per_token.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))  # 1-2-5 steps: a label on every tick
per_token.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
per_token.yaxis.set_minor_formatter(ticker.NullFormatter())
per_token.set_xticks(forward_tokens, [str(n) for n in forward_tokens])
per_token.legend(fontsize=8)
plt.tight_layout()
plt.show()
pd.DataFrame({"fastest (ms)": 1000 * fastest, "cost in one-token passes": fastest / fastest.loc[1],
              "roofline (ms)": 1000 * roof}).round(2).T

# %%
# NBVAL_CHECK_OUTPUT
print((costs.cached_tokens == costs.prefix_tokens).all(), verify_cost(k + 1) < 1.5)

# %% [markdown]
# The time grows far more slowly than the tokens: a pass over k + 1 tokens costs far less than k + 1
# passes over one.
#
# :::{dropdown} How we know: the checks, the dip and the gap to the roofline
# The first check says every measured request found its whole prefix in the cache (so it really
# ran only its n new tokens); the second, that a pass over k + 1 tokens costs less than one and a
# half passes over one token, v(k + 1) < 1.5: checking k drafts costs little more than the step
# plain decoding takes anyway, the premise everything below rests on. On the left the time is
# linear in n: flat for the first few tokens, then a
# straight climb, where a pass costs about as much per token as a prompt does in prefill. On the
# right the same per token, on log axes: the cost of a token falls as n grows until the climb.
#
# At small n the measured times need not be monotone: on some runs a pass over a few tokens comes
# out faster than one over a single token (where the table's "cost in one-token passes" falls
# below 1; on runs where it does not, there is no dip). The chapter takes the curve as measured,
# dips included: v(n) is the fastest time over n tokens divided by the fastest over one, linear in
# between. Where a dip shows, the plain server's decode steps in the concurrency sweep below, with
# b requests in one step, say whether it is real (the table "plain step in the sweep" there).
# Smoothing it away, say by never counting a pass as cheaper than one over fewer tokens, would
# make every verification near a dip dearer than the engine finds it, and every prediction below
# too low.
#
# Where the measured time at small n lies above the table's roofline, the gap is the part of a step
# that is neither reading weights nor arithmetic (attention over the context, sampling,
# scheduling, Python), large next to a model this small; compare the two rows of the table.
# :::
#
# **Decoding against the roofline**, one task at a time:
#
# :::{dropdown} How we know: what the decode table holds
# **Decoding against the roofline.** At batch size 1 every generated token reads every weight,
# plus the keys and values of the tokens before it. Below is the plain engine's decode rate on the
# chapter's tasks, one request at a time, next to the rate the measured bandwidth would allow, and
# the bandwidth the engine actually used: weights and KV read per token, times tokens per second.
# :::

# %%
base = live.answer_tasks(plain, setups.TASKS, task_tokens, repeats=plain_repeats)
roofline = decode_roofline(plain.model.source, prof.dtype, bandwidth.read_gb_s)
context = [int(len(p) + n / 2) for p, n in zip(base.prompts, base.table.tokens, strict=True)]
decode = base.table.assign(**{
    "roofline (tokens/s)": [roofline.tokens_per_s(c) if host_roofline else np.nan for c in context],
    "engine's bandwidth (GB/s)": base.table["decode tokens/s"] * [roofline.bytes_per_token(c) / 1e9 for c in context],
    "answer": [a.text[:60].replace("\n", " ⏎ ") for a in base.answers]})
results.save("speculative_plain_tasks", decode, prof)
decode[["task", "tokens", "decode tokens/s", "roofline (tokens/s)", "engine's bandwidth (GB/s)", "answer"]].round(1)

# %%
weight_read_ms = 1000 * roofline.weight_bytes / (bandwidth.read_gb_s * 1e9)
pd.Series({"one-token step, measured (ms)": 1000 * fastest.loc[1],
           "reading the weights once at NumPy's bandwidth (ms)": weight_read_ms if host_roofline else np.nan,
           "engine's bandwidth / NumPy's": (decode["engine's bandwidth (GB/s)"].median() / bandwidth.read_gb_s
                                            if host_roofline else np.nan)}).round(2)

# %% [markdown]
# Compare the small table's first two rows, measured apart: the engine's one-token step and NumPy
# reading the weights once (a rough reference). If they are close, the
# step is bound by memory bandwidth, as on a GPU serving a large model; if the step is several times
# longer, a fixed cost per pass dominates. Either way a pass over k + 1 tokens shares that cost.
#
# :::{dropdown} How we know: medians, warm-up, copying answers and per-step overhead
# The decode rates are medians of `plain_repeats` answers per task, after the plain server's
# untimed warm-up (a server's first requests pay for work done once, and would make one task look
# slow).
# The answers (their beginnings above) copy from the prompt in the first three tasks and not in
# the fourth; that is what the n-gram method below feeds on.
#
# Read with the small table, the decode table says what makes a verification cheap on this
# machine, and the answer depends on the host: on hosts of the same kind a one-token step has taken
# from about the time of reading the weights once at NumPy's bandwidth (the engine then moves about
# that bandwidth per token: the step is bound by memory, as on a GPU serving a large model) to
# several times longer (then it is dominated by per-step overhead, a fixed cost per forward pass
# whatever its size). Both costs are what a pass over k + 1 tokens shares, so either way
# verification is about as cheap as one step while the pass stays small; the small table says which
# holds on this run.
# :::
#
# ## Speculative sampling from scratch
#
# The rule that makes speculation lossless (`servelab/sim/speculative/sampling.py`): the draft q
# proposes x; the target p accepts it with probability min(1, p(x)/q(x)); at the first rejection
# the target's token is drawn from the residual max(0, p − q), normalised; if all k are accepted,
# one bonus token is drawn from p. Every emitted token is then distributed exactly as p.
#
# A chi-square test on two toy "language models" over six tokens must pass this rule and reject two
# broken ones.
#
# :::{dropdown} How we know: the goodness-of-fit test
# We check that claim as a statistician would. Two toy "language models" over six tokens are
# bigram tables (the next token's distribution depends on the last token), so acceptance varies
# with the context as it does in real models. Each rule generates `gof_samples` two-token
# continuations, and Pearson's chi-square test compares their counts over all 36 possible pairs
# with the exact probabilities of the target alone (`servelab/sim/speculative/chisquare.py`, which
# computes its own p-values). Two broken rules must fail the same test: resampling a rejected
# token from q instead of the residual, and accepting every draft token.
# :::
#
# The whole rule, as `speculative_step` implements it for many sequences at once:

# %%
import inspect

print(inspect.getsource(spec.speculative_step))

# %% [markdown]
# One verification, worked through on the toy models:
#
# :::{dropdown} How we know: the worked example, step by step
# One verification, worked through: the toy target and draft below, a context token, the k tokens
# the draft proposes, and for each its probability under both models and the chance min(1, p/q)
# of being kept. The verification keeps the drafts up to the first rejection and adds one token of
# the target's: a correction drawn from the residual where a draft was rejected, or a bonus token
# drawn from p when all k were kept.
# :::

# %%
rng = np.random.default_rng(seed)
V = 6
target = spec.softmax(rng.normal(size=(V, V)) * 1.5, 1.0)
draft = spec.softmax(np.log(target) + rng.normal(size=(V, V)), 1.0)
one = spec.speculative_step(target, draft, np.array([0]), k, np.random.default_rng(seed + 7))
before_each = [0, *one.drafted[0, :-1]]
worked = pd.DataFrame({"follows token": before_each, "drafted token": one.drafted[0],
                       "p (target)": [target[b, x] for b, x in zip(before_each, one.drafted[0], strict=True)],
                       "q (draft)": [draft[b, x] for b, x in zip(before_each, one.drafted[0], strict=True)]})
worked["kept with probability min(1, p/q)"] = np.minimum(1, worked["p (target)"] / worked["q (draft)"])
worked["kept"] = worked.index < one.accepted[0]
print(f"context token 0; drafted {one.drafted[0].tolist()}; kept {int(one.accepted[0])}; emitted "
      f"{one.tokens[0, :one.emitted[0]].tolist()}, the last one "
      f"{'a bonus token from p' if one.accepted[0] == k else 'a correction from the residual max(0, p - q)'}")
worked.round(3)

# %%
exact_pairs = spec.sequence_probabilities(target, 2)
rows = []
for variant in spec.VARIANTS:
    sampled = spec.generate(target, draft, k, gof_samples, 2, seed=seed, variant=variant)
    test = spec.chi_square_gof(spec.sequence_counts(sampled, V), exact_pairs)
    first_token = np.bincount(sampled[:, 0], minlength=V) / gof_samples
    rows.append({"rule": variant, "chi-square": test.statistic, "degrees of freedom": test.df,
                 "log10 p-value": test.log10_p, f"rejected at {significance}": test.rejects(significance),
                 "first token: largest error": np.abs(first_token - target[0]).max()})
gof = pd.DataFrame(rows)
results.save("speculative_goodness_of_fit", gof, prof, samples=gof_samples, k=k,
             mean_acceptance=float(spec.acceptance_probability(target, draft).mean()))
gof.round(4)

# %%
# NBVAL_CHECK_OUTPUT
verdict = gof.set_index("rule")[f"rejected at {significance}"]
print(not verdict["exact"], verdict["resample_from_q"], verdict["accept_all"])

# %% [markdown]
# The exact rule passes; both broken rules are rejected.
#
# :::{dropdown} How we know: α in the toys, and the test of E
# The exact rule passes and both broken rules are rejected, by the same test with the same number
# of samples. The acceptance probability of these toys varies from row to row: the theory's α is
# an average. With identical rows it is exactly Σ min(p, q), and then the sampler's mean tokens
# per verification is the theory's E, which `tests/test_sim_speculative.py` checks.
# :::
#
# Greedy decoding (temperature 0) is the limit where p puts all its mass on the target's argmax: a
# draft token is kept exactly when it is that argmax, so greedy speculative decoding must reproduce
# greedy decoding token for token.
#
# :::{dropdown} How we know: the greedy limit, and how each engine verifies greedy requests
# Greedy decoding (temperature 0) is the limit where p puts all its mass on the target's argmax,
# whatever q is. The rule then keeps a draft token exactly when it is that argmax, and at the first
# rejection the residual max(0, p − q) leaves only the argmax to emit. So greedy speculative
# decoding must reproduce greedy decoding token for token. That is what we can check on the real
# engine.
#
# Both engines verify greedy requests by that comparison alone, without the draft's
# probabilities. vLLM's `rejection_greedy_sample_kernel` (`vllm/v1/sample/rejection_sampler.py`)
# writes the target's argmax at each position up to and including the first where the draft
# differs, and the bonus token only if none did. SGLang's `eagle_sample`
# (`sglang/srt/speculative/eagle_utils.py`, for EAGLE, STANDALONE and NGRAM) takes the argmax of
# the target's logits and walks the draft tree with `verify_tree_greedy`, following the child
# that equals it. On the CPU and XPU, SGLang takes this greedy path for every request, sampled or
# not (`_verify_uses_greedy` there).
#
# vLLM implements the same rule in `vllm/v1/sample/rejection_sampler.py`, with one difference in
# the draft: by default it drafts greedily (`draft_sample_method = "greedy"`, printed from vLLM's
# own config further below) and treats the draft's distribution as one-hot. With q(x) = 1 the rule
# keeps a drafted token with probability p(x) and otherwise draws from p with x removed: still
# exactly p, only accepted less often than with the draft's own distribution. The n-gram method's
# proposals are one-hot in the same way.
# :::
#
# ## The real engine
#
# Each server answers the chapter's tasks greedily, one at a time (three that repeat much of their
# prompt, one open-ended), then waves of b identical requests for each b in `concurrency`.
#
# :::{dropdown} How we know: the tasks and the sweep
# Each speculative server answers the chapter's tasks (`servelab/measure/speculative/setups.py`),
# greedy, one request at a time, exactly as the plain server did above: three repetition-heavy
# tasks (editing code, extracting quotes, summarising with citations) and one open-ended control.
# Then every server, the plain one included and every draft, gets one wave of b identical
# requests at once (the `sweep_task`) for each b in `concurrency`, each answer forced to
# `sweep_tokens` tokens.
# :::
#
# All of it runs `rounds` times. A speedup is a method's rate over the plain server's in the same
# round, called faster or slower only where every round agrees.
#
# :::{dropdown} How we know: rounds, warm-ups, verdicts and the engine's timers
# All of that, the tasks and the sweep, runs `rounds` times, round by round: each round measures
# every server once, in turn, so a stretch where something else slows the machine falls on all
# servers alike (`Lineup.in_rounds` in `servelab/measure/lineup.py`). Round r starts at server r
# mod n, so each server's place in the round changes from round to round: the plain one is not
# always first (the order itself only rotates). On a GPU, where one server fits at a
# time, every round starts each server afresh, in the same turns, so a drift of the machine lands
# on every server there too; the price is a start per server and round.
#
# Before its first timed round every server has a warm-up, untimed and not recorded
# (`live.warm_up`): it answers the tasks once, as a round asks them, and runs one wave of the
# sweep at the smallest concurrency. The plain server's is the one before the forward costs; a
# server is warmed up only once per start, so on a GPU every later start is warmed up again. A
# server's first requests pay for work done once, which would otherwise fall on its first round
# alone.
#
# A speedup is taken within one round: the method's rate over the plain server's in that same
# round (`round_speedups`). The chapter states the median of the rounds. It reads a speedup as
# faster or slower only where every round agrees, the lowest and the highest round on the same
# side of 1 (`spread_verdict`); otherwise the speedup is "not resolved with" that many rounds.
#
# Every round agreeing is a weak test with few rounds. Suppose a method had no effect at all: each
# round would then land above or below 1 by chance, like a coin. All R rounds land on the same
# side with probability 2 · (1/2)^R: 25 % for R = 3, printed with the sweep below for this run's
# `rounds`. So "faster" means "every round agreed", not "proven faster".
#
# The sweep task's prompt is longer than one KV block (its length is printed with the KV
# capacities below), so the prefix cache holds its full blocks (each server has answered it in its
# warm-up) and a wave spends little time in prefill.
# Times are the engine's own
# (`vllm:request_decode_time_seconds`, from each request's first token to its last), and so are
# the speculative counters: `vllm:spec_decode_num_drafts`, `…num_draft_tokens`,
# `…num_accepted_tokens` and, per draft position, `…num_accepted_tokens_per_pos`, read before and
# after each answer and each set of waves. Each server also reports the KV cache it built
# (`engine_capacity`).
# :::

# %%
capacity = {}


def warmed(name, server):  # before a server's first timed round (on a GPU: after each of its starts)
    if warm.get(name) is not server.proc:  # not warm yet: its warm-up has not run on this start
        live.warm_up(server, setups.TASKS, task_tokens, sweep_prompts, concurrency[0], sweep_tokens)
        warm[name] = server.proc
    capacity[name] = {"server": name, **engine_capacity(server)}


def one_round(name, server, r):
    return (live.answer_tasks(server, setups.TASKS, task_tokens),
            live.sweep(server, sweep_prompts, concurrency, sweep_tokens, repeats=1))


done = lineup.in_rounds(rounds, one_round, prepare=warmed)
answers = {name: got for r, name, (got, _) in done if r == 0 and name != "plain"}  # greedy: each round the same
task_rounds = [got.table.assign(method=name, round=r) for r, name, (got, _) in done]
sweep_rounds = [swept.assign(method=name, round=r) for r, name, (_, swept) in done]
capacity = list(capacity.values())
lineup.stop()
# Nothing is timed from here on, so what the later sections need starts now, in the background:
# servers in `rounding_dtype`, SGLang's argument resolution and vLLM's own speculative defaults.
rounding_method = next((m for m in methods if m.draft_layers == layers), None) if cut_drafts else None
run_rounding = rounding_method is not None and rounding_dtype != prof.dtype
rounding_lineup = Lineup({name: servers[f"{name}, {rounding_dtype}"].server(prof)
                          for name in ("plain", rounding_method.name)},
                         together=together, background=True) if run_rounding else None
background = ThreadPoolExecutor(2)
sglang_targets = {prof.model: plain.model.source, setups.QWEN_7B: setups.QWEN_7B, setups.LLAMA_8B: setups.LLAMA_8B}
sglang_resolution = background.submit(setups.sglang_defaults, sglang_targets, env_name=prof.sglang_env,
                                      articles_call_on=setups.LLAMA_8B)
vllm_defaults = background.submit(setups.vllm_spec_defaults, prof.vllm_env)

task_rounds = pd.concat(task_rounds, ignore_index=True)
sweep_rounds = pd.concat(sweep_rounds, ignore_index=True)
task_per_round = load.round_speedups(task_rounds, ["task"], "decode tokens/s")  # each round's speedups
sweep_per_round = load.round_speedups(sweep_rounds, ["concurrency"], "decode tokens/s per request")
task_speedups = load.over_rounds(task_per_round, ["task"])  # their median, lowest and highest
sweep_speedups = load.over_rounds(sweep_per_round, ["concurrency"])
results.save("speculative_rounds", pd.concat([task_rounds, sweep_rounds], ignore_index=True), prof, k=k,
             rounds=rounds, interleaved=together)
first_round = task_rounds[(task_rounds["round"] == 0) & (task_rounds.method != "plain")]
tasks = (first_round.drop(columns=["round", "decode tokens/s"])
         .merge(task_speedups.rename(columns={"lowest": "speedup lowest", "highest": "speedup highest"}),
                on=["method", "task"], validate="one_to_one")
         .assign(c=lambda t: t.method.map({m.name: m.cost for m in methods})))


accepted_tokens = ((tasks["tokens per verification"] - 1) * tasks.drafts).fillna(0)
v = verify_cost(k + 1)
tasks["predicted speedup"] = [live.predicted_speedup(n, d, a, k, c, v)
                              for n, d, a, c in zip(tasks.tokens, tasks.drafts, accepted_tokens, tasks.c, strict=True)]
tasks["free-draft bound"] = [live.predicted_speedup(n, d, a, k, 0.0, v)
                             for n, d, a in zip(tasks.tokens, tasks.drafts, accepted_tokens, strict=True)]
tasks["c that fits"] = [live.fitted_cost(n, d, a, k, v, s) for n, d, a, s in
                        zip(tasks.tokens, tasks.drafts, accepted_tokens, tasks.speedup, strict=True)]
# the sweep's counters from the first round (the same requests every round), its rates the rounds' medians
median_rate = sweep_rounds.groupby(["method", "concurrency"], sort=False)["decode tokens/s per request"].median()
sweep = (sweep_rounds[sweep_rounds["round"] == 0].drop(columns=["round", "decode tokens/s per request"])
         .merge(median_rate.reset_index(), on=["method", "concurrency"], validate="one_to_one")
         .merge(sweep_speedups.rename(columns={"lowest": "speedup lowest", "highest": "speedup highest"}),
                on=["method", "concurrency"], how="left", validate="one_to_one"))
plain_rate = sweep[sweep.method == "plain"].set_index("concurrency")["decode tokens/s per request"]
results.save("speculative_tasks", tasks, prof, k=k, lookup=list(lookup), rounds=rounds)
results.save("speculative_concurrency", sweep, prof, k=k, tokens=sweep_tokens, task=sweep_task, rounds=rounds)
tasks[["method", "task", "tokens", "drafts", "acceptance rate", "tokens per verification", "c", "speedup",
       "speedup lowest", "speedup highest", "predicted speedup", "c that fits"]].round(2)

# %% [markdown]
# One row per method and task: `drafts` counts verifications, `acceptance rate` is vLLM's,
# `speedup` is over the plain server. The prediction charges a verification
# k c + v(k + 1) plain steps, v(n) being the measured cost of a pass over n tokens and c the draft's
# (0 for prompt lookup). `c that fits` would make prediction and measurement agree (rough; noise can
# push it below 0).
#
# :::{dropdown} How we know: the prediction, and the c that fits
# The prediction counts each verification as k c + v(k + 1) target steps, with v measured above,
# and each step without a draft as one step (`predicted_speedup`); with a draft at every step that
# is the papers' E / (kc + v) with the measured tokens per verification in place of E. The draft
# cost c is 0 for prompt lookup; for a draft it is the share of the target's weights the draft
# reads per step (`draft_cost_ratios`), the cost where reading weights is all that counts. The
# column "c that fits" is the c that would make the prediction equal the measurement.
# :::
#
# ### Prompt lookup
#
# :::{dropdown} How we know: the n-gram method's settings and short drafts
# vLLM's `ngram` method needs no draft model: it looks for the last few tokens of the context
# earlier in the context and proposes the tokens that followed them there
# (`vllm/v1/spec_decode/ngram_proposer.py`). `lookup` sets `prompt_lookup_min` and
# `prompt_lookup_max`; what vLLM fills in when neither is given is printed from its own config in
# "Is it lossless here?" below. When nothing matches there is no draft, and the step is an
# ordinary one; a match close to the end of the context can also give fewer than k tokens, so the
# n-gram method's drafts need not all have k tokens (the survival table below says whether they
# did).
# :::

# %%
ngram_name = methods[0].name
by_task = tasks[tasks.method == ngram_name].set_index("task")
ax = plots.axes("Prompt lookup, one request at a time", "", "decode speedup over plain vLLM")
x = np.arange(len(by_task))
ax.bar(x - 0.2, by_task.speedup, 0.4, label=plots.label("measured (median of the rounds)"),
       yerr=[by_task.speedup - by_task["speedup lowest"], by_task["speedup highest"] - by_task.speedup],
       capsize=4, error_kw={"label": plots.label("lowest to highest round")})
ax.bar(x + 0.2, by_task["predicted speedup"], 0.4, label=plots.label("theory, from the counters"))
ax.axhline(1, color="grey", lw=1)
ax.set_xticks(x, [plots.label(t) for t in by_task.index], rotation=10)
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
rates = by_task["acceptance rate"].fillna(0)
per_verification = by_task["tokens per verification"].fillna(1)
rank_correlation = per_verification.rank().corr(by_task.speedup.rank())  # Spearman's, over the four tasks
print(rates[list(setups.REPETITIVE)].min() > rates[setups.CONTROL],
      per_verification.idxmax() == by_task.speedup.idxmax() and rank_correlation > 0.5)

# %% [markdown]
# Repetition-heavy tasks accept more draft tokens than the control, and the gain follows what was
# accepted.
#
# :::{dropdown} How we know: what the checks test, and timing noise in c
# Every repetition-heavy task accepts more draft tokens than the control, where almost nothing
# repeats (the first check). The second: the task with the most tokens per verification is the
# one prompt lookup speeds up most, and across the four tasks the speedups are ranked like the
# tokens per verification (Spearman's rank correlation above 0.5; two tasks whose gains are both
# within timing noise of 1 may swap places): the gain follows what the counters say was accepted.
# Prompt lookup's "c that fits" gathers whatever the prediction leaves out one request at a time:
# the lookup, the extra bookkeeping per step, and timing noise. It is small, and it can come out
# negative: the speedup is the median of a few rounds, each pairing two answers timed apart
# (one after the other on the cpu profile, whole server runs apart on a GPU), so a few percent of
# timing noise on a shared machine is a c of that size; the error bars (lowest to highest round)
# and the control task, where almost nothing was accepted, show how
# large that noise is in this run.
# :::
#
# ### A draft model made from the target
#
# **The model as its own draft** has every draft accepted, yet gains nothing at best: each draft token costs a
# full pass of the same model. Per verification, vLLM's draft first runs one pass over k + 2 tokens
# (the k + 1 just verified and a slot for the next), then k − 1 passes of one token, and the target
# verifies k + 1: about v(k + 2) + k − 1 + v(k + 1) steps for k + 1 tokens.
# **Its first L layers** cost less per pass, but were never trained to stop early.
#
# :::{dropdown} How we know: the two drafts
# - **the model as its own draft.** Every drafted token is the target's own choice, so everything
#   is accepted, and the draft costs what the target costs. vLLM's draft-model proposer runs its
#   first pass over the k + 1 tokens just verified plus one extra slot per request
#   (`needs_extra_input_slots`, `set_inputs_first_pass` in
#   `vllm/v1/spec_decode/llm_base_proposer.py`; `DraftModelProposer` passes no hidden states to
#   the draft), then k − 1 one-token passes. With c = 1 the theory's speedup is
#   (k + 1)/(v(k + 2) + k − 1 + v(k + 1)) (`load.batch_costs`), about 1 at best: the overhead, with no
#   gain; the c that fits says how close the draft's real cost comes to the target's. The verdict
#   is "faster" or "slower" only where every round of the task mean is on the same side of 1.
# - **its first L layers**, followed by its own final norm and LM head
#   (`servelab/machine/draft_models.py` writes such a copy). Cheaper per step, but never trained
#   to stop early.
# :::

# %%
own_draft = next((m.name for m in methods if m.draft_layers == layers), None) if cut_drafts else None
if own_draft:
    own = tasks[tasks.method == own_draft]
    draft_step, verification = load.batch_costs(k, 1.0, 1, verify_cost)  # per draft token, and per verification
    own_mean = load.over_rounds(  # the mean over the tasks, one per round
        task_per_round[task_per_round.method == own_draft]
        .groupby(["method", "round"], sort=False).speedup.mean().reset_index(), []).iloc[0]
    print(f"the model as its own draft: acceptance rate {own['acceptance rate'].min():.2f} at the least; "
          f"predicted with c = 1, (k + 1) / (v(k + 2) + k - 1 + v(k + 1)) = "
          f"{(k + 1) / (k * draft_step + verification):.2f}; measured, mean over the tasks: "
          f"{own_mean.speedup:.2f} (rounds {own_mean.lowest:.2f} to {own_mean.highest:.2f}): "
          f"{load.spread_verdict(own_mean.lowest, own_mean.highest, rounds)}")
else:
    print(f"no model as its own draft: profile {prof.name} drafts with {prof.draft_model}")

# %% [markdown]
# A draft also keeps its own KV cache, inside the same memory budget:
#
# :::{dropdown} How we know: the KV budget
# A draft costs memory too. servelab gives each server the same KV budget, `kv_tokens` times the
# target's KV bytes per token (`kv_budget_flags` sets vLLM's `kv_cache_memory_bytes`), and a
# draft model keeps its own KV cache inside that budget, so every draft layer takes tokens away
# from the target's. What each server built:
# :::

# %%
capacity_table = pd.DataFrame(capacity).set_index("server")
capacity_table["tokens / plain's"] = capacity_table.tokens / capacity_table.loc["plain", "tokens"]
results.save("speculative_kv_capacity", capacity_table.reset_index(), prof, kv_tokens=kv_tokens)
capacity_table[["block_size", "blocks", "tokens", "tokens / plain's"]].round(3)

# %%
# NBVAL_CHECK_OUTPUT
with_draft = [m.name for m in methods[1:]]  # every method after prompt lookup runs a draft model
plain_tokens = capacity_table.loc["plain", "tokens"]
print(bool(with_draft) and bool((capacity_table.loc[with_draft, "tokens"] < plain_tokens).all()),
      capacity_table.loc[methods[0].name, "tokens"] == plain_tokens)

# %% [markdown]
# A draft model shrinks the target's KV cache; prompt lookup does not. Does the sweep's largest wave
# still fit? The last column answers: the blocks it needs against the blocks each server can hand
# out. Where it fits, memory does not explain a slowdown.
#
# :::{dropdown} How we know: the checks, SGLang's cap and the fit of the largest wave
# Every server with a draft model holds fewer tokens of KV cache than the plain server in the
# same memory, and prompt lookup, which has no model of its own, holds the same (the checks). On a
# GPU the draft's weights come out of the same memory as well. SGLang pays in another currency:
# with every algorithm this chapter resolves (EAGLE, EAGLE3, STANDALONE, NGRAM) it caps the running
# requests unless they are given (the cap is in the SGLang section below), where the plain server
# would admit many more. Not every algorithm does: UNO sets no such cap.
#
# A smaller cache matters for the concurrency sweep below only if its largest wave does not fit.
# Per server: the blocks it can hand out, the blocks the largest wave would hold at its end if no
# block were shared (`sweep_blocks`: each request's prompt, its `sweep_tokens` and the slots vLLM
# reserves beyond them, `reserved_slots`: none for the plain server, k for the drafted tokens with
# prompt lookup, and with a draft model k more, the lookahead slots its draft passes write,
# `num_lookahead_tokens` in `vllm/config/vllm.py`), and what the engine did during the sweep: the requests it
# preempted (`vllm:num_preemptions`) and the mean time a request of the largest wave waited before
# it was scheduled (`vllm:request_queue_time_seconds`). A request that found no free blocks would
# wait there for a whole wave to finish, or be preempted.
# :::

# %%
sweep_prompt_tokens = len(base.prompts[list(setups.TASKS).index(sweep_task)])
largest = sweep[sweep.concurrency == max(concurrency)].set_index("method")
configs = {m.name: m.config for m in methods}  # the plain server has none
sweep_fit = pd.DataFrame({
    "blocks it can hand out": capacity_table.usable // capacity_table.block_size,
    f"blocks {max(concurrency)} requests need (none shared)": [
        load.sweep_blocks(sweep_prompt_tokens, sweep_tokens, load.reserved_slots(configs.get(name), k), size,
                          max(concurrency)) for name, size in capacity_table.block_size.items()],
    "preemptions in the sweep": sweep.groupby("method").preemptions.sum(),
    f"queue time per request at {max(concurrency)} (ms)": 1000 * largest["queue seconds per request"]},
    index=capacity_table.index)
sweep_fit["fits"] = sweep_fit.iloc[:, 1] <= sweep_fit.iloc[:, 0]
results.save("speculative_sweep_fit", sweep_fit.reset_index(names="server"), prof, prompt_tokens=sweep_prompt_tokens,
             tokens=sweep_tokens, requests=max(concurrency))
queued = sweep_fit[~sweep_fit.fits | (sweep_fit["preemptions in the sweep"] > 0)]
print(f"sweep task: {sweep_prompt_tokens} prompt tokens + {sweep_tokens} generated; "
      + ("every server holds the largest wave without sharing a block, and none preempted a request"
         if queued.empty else f"the largest wave does not fit, or was preempted, on: {', '.join(queued.index)}"))
sweep_fit.round(2)

# %% [markdown]
# A survival curve: per draft position i (from 0), the share of verifications whose first i + 1 draft
# tokens were all accepted. Dotted, α^(i+1) under independent (i.i.d.) acceptances, α fitted by
# maximum likelihood, not to the shape: all-or-nothing drafts start below it and end above it.
#
# :::{dropdown} How we know: the fit
# Per draft position, the counters form a survival curve: the share of verifications whose first
# i + 1 draft tokens were all accepted. Under the theory's i.i.d. assumption it is α^(i+1); the
# dotted lines are that model, fitted to each method's counters over its four answers.
# :::

# %%
curves = []
for name, got in answers.items():
    fit = got.counts.iid_fit()
    verdict = ("no test (too few kinds of outcome)" if fit.test is None
               else "rejected" if fit.test.rejects(0.01) else "not rejected")
    for i, s in enumerate(got.counts.survival()):
        curves.append({"method": name, "position": i + 1, "survival": s, "i.i.d. fit": fit.alpha ** (i + 1),
                       "drafts": got.counts.drafts, "every draft had k tokens": got.counts.full_drafts,
                       "alpha (fitted)": fit.alpha, "i.i.d. model at 1%": verdict})
survival = pd.DataFrame(curves)
results.save("speculative_survival", survival, prof)
ax = plots.axes("Acceptance by draft position (vLLM's counters)", "draft position",
                "share of verifications accepted up to here")
for name, rows in survival.groupby("method", sort=False):
    ax.plot(rows.position, rows.survival, "o-", label=plots.label(name))
    ax.plot(rows.position, rows["i.i.d. fit"], ":", color=ax.lines[-1].get_color())
ax.plot([], [], ":", color="grey", label=plots.label("i.i.d. model, fitted"))
ax.set_xticks(range(1, k + 1))
ax.set_ylim(0, 1.05)
ax.legend(fontsize=8)
plt.show()
survival.groupby("method", sort=False)[["drafts", "every draft had k tokens", "alpha (fitted)",
                                        "i.i.d. model at 1%"]].first().round(3)

# %% [markdown]
# Prompt lookup need not follow the i.i.d. model: once an answer copies, it keeps copying.
#
# :::{dropdown} How we know: the i.i.d. test and short drafts
# Prompt lookup need not behave like the i.i.d. model: once the answer is copying, it keeps
# copying, so a draft whose first token is accepted usually gets the rest accepted too, and its
# survival curve tends to flatten where the fitted α^(i+1) keeps falling. The table says whether the
# chi-square test finds the difference significant for this many drafts, and "no test" where too
# few kinds of outcome are left to test (accepted lengths pooled until each is expected often
# enough, say every draft accepted in full, or none): a test needs a degree of freedom left after
# the total and the fitted α (`TooFewCells` in `servelab/sim/speculative/chisquare.py`). The
# i.i.d. fit assumes every draft
# had k tokens, which the column before it checks: where it is False (prompt lookup can propose
# fewer), the fitted α is an approximation.
# :::
#
# ### Drafts cut from the model, at every depth
#
# Every depth can be tried without an engine: one pass of the full model keeps every layer's output,
# and replaying vLLM's greedy verification gives each depth's counters.
#
# :::{dropdown} How we know: the replay, and where it runs
# This part runs where the drafts are cut from the model itself (the cpu profile); on a GPU
# profile it is skipped, and its check prints "n/a n/a" (not applicable), which only a GPU profile's run
# may print.
#
# The live runs tried a few depths; every depth can be tried without an engine. A draft made of
# the first L layers computes exactly the target's hidden state after layer L, then the target's
# own final norm and LM head. So one forward pass of the full model over each plain answer,
# keeping every layer's output, tells which token a draft of each depth would have proposed at
# each position (`servelab/engines/engine_side/layer_agreement.py`, run with transformers in
# vLLM's venv). Replaying vLLM's greedy verification over those choices (`greedy_verifications`)
# gives the counters each depth would have produced; for the depths that ran live they must match
# the engine's, verification by verification. Each depth's predicted speedup uses its c and the
# measured v, at the chapter's k and at the k ≥ 1 that suits it best (with the i.i.d. α fitted to
# its replayed counters).
# :::

# %%
if cut_drafts:
    depths = live.depth_sweep(prof, base.prompts, base.generated)
    by_depth = depths.table(k)
    by_depth["c"] = by_depth["draft layers"].map(setups.draft_cost_ratios(setups.model_config(prof)))
    by_depth[f"predicted speedup, k = {k}"] = (by_depth["tokens per verification"]
                                               / (k * by_depth.c + verify_cost(k + 1)))
    best_k = [max(range(1, 9), key=lambda kk, a=a, c=c: spec.speedup(a, kk, c, verify_cost(kk + 1)))
              for a, c in zip(by_depth["alpha (i.i.d. fit)"], by_depth.c, strict=True)]
    by_depth["best k"] = best_k
    by_depth["predicted speedup, best k"] = [spec.speedup(a, kk, c, verify_cost(kk + 1)) for a, c, kk in
                                             zip(by_depth["alpha (i.i.d. fit)"], by_depth.c, best_k, strict=True)]
    results.save("speculative_depth_sweep", by_depth, prof, k=k, target_agrees=depths.target_agrees)
    replayed = by_depth.set_index("draft layers")
    ran = []
    for m in (m for m in methods if m.draft_layers):
        engine, again = answers[m.name].counts, live.replay_counts(depths.matches[m.draft_layers], k)
        ran.append({"draft layers": m.draft_layers, "verifications, engine": engine.drafts,
                    "verifications, replayed": again.drafts,
                    "accepted per position, engine": [int(a) for a in engine.accepted_per_pos],
                    "accepted per position, replayed": [int(a) for a in again.accepted_per_pos],
                    "agree (one per answer)": live.counts_agree(engine, again, len(base.answers)),
                    "engine": engine.acceptance_rate, "replayed": again.acceptance_rate,
                    "measured speedup": tasks[tasks.method == m.name].speedup.mean()})
    ran = pd.DataFrame(ran)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    plots.axes("Drafts made of the model's first L layers", "", "acceptance", ax=top)
    top.plot(by_depth["draft layers"], by_depth.agreement, label=plots.label("agrees with the target, per token"))
    top.plot(by_depth["draft layers"], by_depth["acceptance rate"],
             label=plots.label("vLLM's acceptance rate, replayed"))
    top.plot(ran["draft layers"], ran.engine, "kx", markersize=10,
             label=plots.label("vLLM's acceptance rate, measured"))
    top.set_ylim(0, 1.05)
    top.legend(fontsize=8)
    plots.axes("", "draft layers L", "decode speedup, one request", ax=bottom)
    bottom.plot(by_depth["draft layers"], by_depth[f"predicted speedup, k = {k}"],
                label=plots.label("predicted, k = {}").format(k))
    bottom.plot(by_depth["draft layers"], by_depth["predicted speedup, best k"], ls="--",
                label=plots.label("predicted, best k for that depth"))
    bottom.plot(ran["draft layers"], ran["measured speedup"], "kx", markersize=10,
                label=plots.label("measured, k = {}").format(k))
    bottom.axhline(1, color="grey", lw=1)
    bottom.set_ylim(bottom=0)
    bottom.legend(fontsize=8)
    plt.show()
else:
    ran = pd.DataFrame(columns=["draft layers", "agree (one per answer)"])
    print(f"skipped: profile {prof.name} serves {prof.model}, not a local model to cut drafts from")
ran.drop(columns=["engine", "replayed"], errors="ignore").round(2)

# %%
# NBVAL_CHECK_OUTPUT
print(*((all(depths.target_agrees) or not exact_expected(prof.dtype), bool(ran["agree (one per answer)"].all()))
        if cut_drafts else ("n/a", "n/a")))  # no cut drafts (a profile with its own draft): not applicable

# %% [markdown]
# The shallow cut with the best predicted speedup, at the k that suits it:
#
# :::{dropdown} How we know: what the checks test, and which cut is shown
# The first check: the full model, run by transformers, reproduces every token the engine
# answered (claimed in float32 only). The second: for every depth that ran live, the engine's
# number of verifications and its accepted count at each draft position are the replayed ones,
# give or take one per answer (the replay leaves out an answer's last verification where the
# answer's end cut it). On a profile that drafts with its own draft model there are no cut drafts,
# and both print "skipped". The shallow cut (fewer layers than the model) with the best predicted
# speedup, at the k that suits it; if even that is below 1, no cut pays on this machine, and the
# least harmful one is simply the cheapest:
# :::

# %%
if cut_drafts:
    shallow = by_depth[by_depth["draft layers"] < layers]
    best_depth = shallow.loc[shallow["predicted speedup, best k"].idxmax()]
    best_shallow = best_depth[["draft layers", "agreement", "alpha (i.i.d. fit)", "c", "best k",
                          "predicted speedup, best k"]].round(3)
else:
    best_shallow = pd.Series(dtype=float, name="skipped (no drafts cut from the model)")
best_shallow

# %% [markdown]
# A cut is accepted rarely until it is nearly the whole model, and then it costs nearly as much:
# early layers were never trained to predict the next token. Useful drafts are trained for it: a small model of
# the same family, or a head trained on the target's hidden states (EAGLE-3).
#
# The articles' pair, Qwen2.5-0.5B for Qwen2.5-72B, is of the first kind, but vLLM's defaults refuse
# it: their vocabulary sizes differ.
#
# :::{dropdown} How we know: the articles' pair and the GPU profiles
# The articles' pair is of the first kind. Their words (the Japanese, German, Korean and Spanish
# versions say the same): "Ein schnelles Draft Model (z. B. Qwen2.5-0.5B) schlägt mehrere
# Token-Kandidaten vor, die in einem einzigen Durchlauf vom primären Target Model (z. B.
# Qwen2.5-72B) verifiziert werden" (source article 001, section 2). This chapter's GPU runs use
# Qwen2.5-7B as the target instead, which fits the 24 GB the smallest GPU profile has. Either way
# the pair does not work with vLLM's defaults: the small Qwen2.5 models pad their vocabulary to
# fewer rows than the large ones (`config.json`, `vocab_size`), and vLLM's `draft_model` refuses
# different vocabulary sizes unless `use_heterogeneous_vocab` is set, which in turn works only with
# greedy drafting (`draft_sample_method = "greedy"`, the default; `vllm/config/speculative.py`).
# The `gpu-80g` profile, whose 14B shares the 7B's vocabulary, sets it (`gpu-24g` serves the 3B, which
# shares the 0.5B's):
# :::

# %%
pd.DataFrame([{"model": name, "vocab_size (config.json)": size} for name, size in setups.VOCAB_SIZES.items()]
             + [{"model": "gpu-80g profile's vLLM draft config", "vocab_size (config.json)":
                 str(gpu_runs_.profile_draft_config("gpu-80g"))}])

# %% [markdown]
# ### Speedup against concurrency
#
# With b requests decoding together, a verification is a forward over b × (k + 1) tokens: once that
# reaches the part where the cost climbs, every rejected draft token costs arithmetic. The dashed
# lines predict this from the forward costs. Where a line's whole error bar lies below 1, turn
# speculation off from that b on (vLLM: `num_speculative_tokens_per_batch_size`); elsewhere, watch
# how fast the gain shrinks.
#
# :::{dropdown} How we know: how the prediction prices a batch, and throughput against latency
# With b requests decoding together, a plain step is a forward over b tokens and a verification
# one over b × (k + 1). The forward-cost curve says what happens then: while b × (k + 1) tokens
# still cost about one pass, speculation keeps its gain; once they reach the part where the cost
# climbs, every rejected draft token is paid for in arithmetic. A draft model's passes grow with b
# too: vLLM's draft first runs over the b × (k + 1) tokens the target verified plus one slot per
# request (`set_inputs_first_pass` in `vllm/v1/spec_decode/llm_base_proposer.py`), then k − 1
# times over b tokens. `batch_costs` prices both from the measured forward costs, in plain steps
# over b tokens: a verification costs v(b(k + 1))/v(b), a draft step c (v(b(k + 2))/v(b) + k − 1)/k,
# with c the draft's share of the target's weights as before. The dashed lines put these costs
# into `predicted_speedup` with the sweep's own counters per request: its verifications, its
# accepted tokens, and the steps where prompt lookup found nothing to propose, one plain step
# each. The prediction stands in a pass over b × (k + 1) tokens of one sequence for a verification
# of b sequences, and a prefill of b tokens for a decode step of b sequences, which attend to
# different contexts; and it leaves out what speculation costs besides the passes: the rejection
# sampler's bookkeeping, the lookup, and the logits a verification computes at all b × (k + 1)
# positions, where the measured pass computed them at one. Read it for its trend, not to the
# decimal. Each wave repeats the `sweep_task` b times, `sweep_tokens` tokens each: an answer that
# copies most of its prompt (the function, with one name changed), so prompt lookup finds something
# to propose in long stretches of it, not everywhere (the counters below say how much was
# accepted). The tokens after the first are a whole number of verifications of k + 1 tokens, so a
# draft that is always accepted ends exactly on the last token; otherwise its last verification
# would run past the end and pay for tokens that are thrown away.
#
# These are per-request rates with b requests in flight on both sides, so the same ratio is also
# the throughput ratio at that load; one request at a time, it is the latency ratio. The articles
# speak of throughput ("verdoppelt den Durchsatz"), the papers of one sequence at a time.
# :::

# %%
spec_sweep = sweep[sweep.method != "plain"].copy()
spec_sweep["c"] = spec_sweep.method.map({m.name: m.cost for m in methods})
priced = [load.batch_costs(k, c, b, verify_cost) for c, b in zip(spec_sweep.c, spec_sweep.concurrency, strict=True)]
spec_sweep["draft step / plain step"], spec_sweep["verification / plain step"] = zip(*priced, strict=True)
per_request = spec_sweep.drafts / (spec_sweep.requests * spec_sweep.waves)  # identical requests: the same counts
accepted_per_request = ((spec_sweep["tokens per verification"] - 1) * per_request).fillna(0)
spec_sweep["predicted speedup"] = [
    live.predicted_speedup(sweep_tokens, d, a, k, cb, vb) for d, a, cb, vb in
    zip(per_request, accepted_per_request, spec_sweep["draft step / plain step"],
        spec_sweep["verification / plain step"], strict=True)]
results.save("speculative_concurrency_predicted", spec_sweep, prof, k=k)

ax = plots.axes("Speculation against concurrency (vLLM)", "requests decoding together",
                "decode speedup over plain vLLM", ax=plt.subplots(figsize=(9, 4.5))[1])
for name, rows in spec_sweep.groupby("method", sort=False):
    drawn = ax.errorbar(rows.concurrency, rows.speedup, fmt="o-", capsize=3, label=plots.label(name),
                        yerr=[rows.speedup - rows["speedup lowest"], rows["speedup highest"] - rows.speedup])
    ax.plot(rows.concurrency, rows["predicted speedup"], "s--", mfc="none", color=drawn.lines[0].get_color())
ax.plot([], [], "s--", mfc="none", color="grey", label=plots.label("predicted from the forward costs"))
ax.errorbar([], [], yerr=[], fmt="none", ecolor="grey", capsize=3, label=plots.label("lowest to highest round"))
ax.axhline(1, color="grey", lw=1)
ax.set_xscale("log", base=2)
ax.set_xticks(concurrency, [str(b) for b in concurrency])
ax.set_ylim(bottom=0)
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))  # outside: no line runs under it
plt.tight_layout()
plt.show()
per_b = spec_sweep.drop_duplicates("concurrency").set_index("concurrency")["verification / plain step"]
pass_ms = pd.Series(1000 * np.interp(concurrency, fastest.index, fastest.to_numpy()), index=concurrency)
pd.concat([spec_sweep.pivot(index="concurrency", columns="method", values="speedup"),
           spec_sweep.pivot(index="concurrency", columns="method", values="predicted speedup")
           .add_prefix("predicted: "), per_b,
           spec_sweep.pivot(index="concurrency", columns="method", values="draft step / plain step")
           .add_prefix("draft step / plain step: "),
           (1000 / plain_rate).rename("plain step in the sweep (ms)"),
           pass_ms.rename("one pass over b tokens, fastest (ms)")], axis=1).T.round(2)

# %% [markdown]
# :::{dropdown} How we know: reading the rounds and the crossovers
# The last two rows set the plain server's decode step in the sweep (each request's decode time
# over its tokens after the first, with b requests sharing every step) beside the fastest single
# pass over b tokens measured earlier: where the two have the same shape, the dip at a few tokens
# included, the forward-cost curve is the engine's own at these sizes.
#
# Each point of the sweep is the median of `rounds` waves, each paired with the plain server's wave
# of the same round; the error bars run from the lowest to the highest round. A point reads
# "faster" or "slower" only where every round is on the same side of 1 (`spread_verdict`), and
# "not resolved with" that many rounds where they straddle 1. The first line below gives the chance
# that a method with no effect still gets every round on one side.
#
# With a few rounds this is a range seen in one run, not a confidence interval: a second run can
# land elsewhere inside it or a little outside. A method's measured speedup over its prediction is
# no noise estimate either: a prediction can miss systematically. Whether prompt lookup's does,
# round by round, is printed with the tables below.
#
# Where each method turns into a slowdown: the smallest b from which every round decodes slower
# than plain vLLM, at that b and at every larger b of the sweep (`first_slowdown` of the highest
# round: a sustained slowdown, so a slow point followed by an unresolved one does not count),
# measured and predicted, by how many doublings of b the prediction places it late, and at the
# measured one (where there is none, at the largest b) what a verification carries against what
# it costs. A verification yields its tokens per verification; it costs a verification pass plus
# k draft steps, in plain steps over the same b, and the steps without a draft cost one each.
# For a draft model, speculation is a slowdown where that cost outgrows the yield. For prompt
# lookup, read the last two columns: where the prediction at its measured crossover still says
# faster, the priced cost is not what tips it, and the slowdown is the gap between measurement and
# prediction examined below.
# :::

# %% tags=["hide-output"]
print(f"{rounds} rounds, {'interleaved' if together else 'interleaved, each server restarted every round'}; a method "
      f"with no effect puts "
      f"all {rounds} on one side of 1 with probability {chance_of_agreement(rounds):.0%}; widest spread of a "
      f"speedup (highest / lowest round): {(spec_sweep['speedup highest'] / spec_sweep['speedup lowest']).max():.2f}")
slowdown = []
for name, rows in spec_sweep.groupby("method", sort=False):
    rows = rows.set_index("concurrency")
    at = load.first_slowdown(rows["speedup highest"])
    predicted_at = load.first_slowdown(rows["predicted speedup"])
    there = rows.loc[at] if at is not None else rows.iloc[-1]
    none = f"none sustained up to {max(concurrency)}"
    slowdown.append({"method": name, "sustained slowdown from b, measured": at or none,
                     "predicted": predicted_at or none,
                     "prediction late by (doublings)": (np.log2(predicted_at / at) if at and predicted_at
                                                        else np.nan),
                     "at b": there.name, "tokens per verification": there["tokens per verification"],
                     "verification (plain steps)": there["verification / plain step"],
                     "k draft steps (plain steps)": k * there["draft step / plain step"],
                     "speedup there": there.speedup, "predicted there": there["predicted speedup"]})
slowdown = pd.DataFrame(slowdown).set_index("method")
results.save("speculative_slowdown", slowdown.reset_index().astype({"sustained slowdown from b, measured": str,
                                                                   "predicted": str}), prof, k=k, rounds=rounds)
slowdown.round(2)

# %% [markdown]
# :::{dropdown} How we know: the gap and the logits row
# Point by point: each measured speedup against 1 across its rounds, then the measurement over the
# prediction, and the gap between them as a cost: measured minus predicted decode time per request,
# in plain steps per verification (`steps_gap`; positive where the engine spent more than
# predicted). The last row is one part the prediction leaves out, estimated: the forward passes it
# is built from computed logits at one position, while a verification of b requests computes them
# at b (k + 1) positions and a plain step at b. Priced at the measured FLOP/s (2 × vocabulary ×
# hidden size operations per position), those rows change the verification's cost by this many
# plain steps (`logits_gap`; left out on a GPU, where NumPy's FLOP/s say nothing about the engine).
# :::

# %% tags=["hide-output"]
spec_sweep["measured / predicted"] = spec_sweep.speedup / spec_sweep["predicted speedup"]


def gap_at(speedups):  # measured minus predicted, in plain steps per verification, from these speedups
    return [load.steps_gap(sweep_tokens, d, s, p) if d > 0 else np.nan
            for d, s, p in zip(per_request, speedups, spec_sweep["predicted speedup"], strict=True)]


spec_sweep["gap (plain steps per verification)"] = gap_at(spec_sweep.speedup)
spec_sweep["gap, fastest round"] = gap_at(spec_sweep["speedup highest"])
spec_sweep["gap, slowest round"] = gap_at(spec_sweep["speedup lowest"])
spec_sweep["against 1"] = [load.spread_verdict(lo, hi, rounds)
                            for lo, hi in zip(spec_sweep["speedup lowest"], spec_sweep["speedup highest"], strict=True)]
target_config = setups.model_config(prof) if host_roofline else {}
row_s = 2 * target_config["vocab_size"] * target_config["hidden_size"] / flops if host_roofline else np.nan


def seconds_at(n):  # the fastest measured pass over n tokens, linear in between
    return float(np.interp(n, fastest.index, fastest.to_numpy()))


logits = pd.Series([load.logits_gap(b, k, seconds_at(b * (k + 1)), seconds_at(b), row_s) if host_roofline
                    else np.nan for b in concurrency], index=concurrency,
                   name="logits the proxy leaves out (plain steps per verification)")
results.save("speculative_sweep_gap", spec_sweep, prof, k=k, rounds=rounds)
lookup_sweep = spec_sweep[spec_sweep.method == ngram_name]
each_round = [*(lookup_sweep["speedup lowest"] / lookup_sweep["predicted speedup"]),
              *(lookup_sweep["speedup highest"] / lookup_sweep["predicted speedup"])]
side = one_side(each_round)  # every round's measured / predicted, at every b
print(f"prompt lookup's measured / predicted, each of the {rounds} rounds at every b: "
      + (f"{side} 1 in every round at every b" if side != "both sides" else "on both sides of 1"))
spread = (spec_sweep["gap, slowest round"] - spec_sweep["gap, fastest round"]).dropna()
kept = spec_sweep[np.sign(spec_sweep["gap, slowest round"]) == np.sign(spec_sweep["gap, fastest round"])]
print(f"the rounds' spread moves the gap by {spread.median():.2f} plain steps per verification at the median point, "
      f"{spread.max():.2f} at most (slowest round minus fastest); the gap has one sign in every round at "
      + ("; ".join(f"{m}: b = {', '.join(map(str, rows.concurrency))}"
                   for m, rows in kept.groupby("method", sort=False)) or "no point"))
lookup_row = slowdown.loc[ngram_name]
late = lookup_row["prediction late by (doublings)"]
if np.isfinite(late):
    from_b = int(lookup_row["sustained slowdown from b, measured"])
    print(f"prompt lookup is slower than plain in every round at every b from {from_b} on, measured, and "
          f"from b = {int(lookup_row['predicted'])} on, predicted: the prediction is "
          + ("the same b" if late == 0 else f"{abs(late):.0f} doubling(s) {'late' if late > 0 else 'early'}"))
pd.concat([spec_sweep.pivot(index="concurrency", columns="method", values=col).add_prefix(f"{col}: ")
           for col in ("against 1", "measured / predicted", "gap (plain steps per verification)", "gap, slowest round",
                       "gap, fastest round")]
          + [logits], axis=1).T.round(2)

# %% [markdown]
# :::{dropdown} How we know: what a gap can and cannot be
# Where the gap row is positive, the engine spent more per verification than predicted; where it
# is negative, less. The rounds' spread moves the gap too: the gap rows of the slowest and the
# fastest round bound it, and the second line above says by how much they differ and where all
# rounds give the gap one sign. A gap's sign means something only there.
#
# Where a gap appears says what it can be. A gap shared by methods with and without a draft
# model is not the draft's cost, and one shared by methods with and without a lookup is not the
# lookup's: it
# belongs to the verification itself. One part of what every verification costs and the
# prediction leaves out is estimated in the last row: the logits at the positions the proxy did
# not compute. The rest of a shared gap is what the proxy's passes do differently from a
# verification of b sequences (each request attends to its own context, the rejection sampler
# runs over b (k + 1) positions).
#
# Where prompt lookup's gap keeps a positive sign, this chapter does not identify where it comes
# from; it measures only its size. The lookup itself
# is an unlikely source, read from the installed source rather than measured: `NgramProposer`
# (`vllm/v1/spec_decode/ngram_proposer.py`, its constructor and `batch_propose`) searches each
# request's tokens with a numba kernel on one thread: below `num_tokens_threshold` tokens in the
# batch, far more than a wave of the sweep holds (its prompt length is printed above), it sets one
# thread, and above it the cap `num_numba_thread_available`, min(1, CPU count // 2), allows no
# more. A search through the integers of a wave's tokens is small next to a forward pass. The
# candidates that remain are costs every method pays in a
# verification and the prediction leaves out: the logits at all b (k + 1) positions (the last
# row), attention over b separate contexts where the proxy measured one, and the rejection
# sampler's bookkeeping. The draft models do not rule them out: their gaps also contain the draft
# passes, which the prediction overprices (below), and that can hide a verification cost the
# three methods share. A negative gap for a draft model says its passes cost less than the
# prediction counts: it prices each draft pass as a pass of the target over as many tokens,
# measured as a whole request with the engine's per-step overhead in it, while vLLM runs the k
# draft passes inside one engine step (`propose` in `vllm/v1/spec_decode/llm_base_proposer.py`),
# so they plausibly share that overhead with the verification. A prediction that counts a
# verification as cheaper than the engine finds
# it places the crossover late, or at the same b where the sweep's doublings are too coarse to
# show it: the line above says which for prompt lookup (where it has a crossover within the sweep,
# measured and predicted).
# :::
#
# A method's change is its speedup at the largest b over that at the smallest, read off a line
# through one round's points (log speedup against log b). Its trend is "as predicted" where every
# round's change goes the predicted way (below 0.9 where the predicted change is below 0.8) and
# "contradicted" where none does; a contradiction fails the check.
#
# :::{dropdown} How we know: the trend test's zones
# The check below compares each method's measured trend with its own prediction, from one request
# to the largest wave (`trend_test`, `trend_holds`, `trend_verdict`); it can fail in either
# direction. Each change is a line's value at the largest b over its value at the smallest
# (`sweep_change`): the line runs through log speedup against log b, fitted by least squares to one
# round's points, and the prediction is read the same way. A line uses every b, and its ends weigh
# most, so a change that happens only at the largest b still shows. The rounds are then judged as
# this chapter judges a speedup: a trend is "as predicted" where every round's change passes the
# test, "contradicted" where every round's fails it, and not resolved where they disagree. Earlier
# readings of this check were less steady: the medians at the two ends use two points of five, and
# on a slow host that reading once failed for the model as its own draft; one line through all
# rounds at once lets one round's slow stretch pull it. Every method's speedup in a round divides by
# the same plain waves, so one slow plain wave at the largest b lifts every method's speedup there
# in that round: it can leave their trends unresolved, and a large enough one contradicts them and
# fails the check on a host that noisy.
#
# Where the prediction falls by more than a fifth, the measured speedup must fall by more than a
# tenth. Where the prediction stays within a tenth of flat (a GPU whose passes stay flat over these
# sizes), the measured speedup must not move by a fifth. Where it rises by more than a fifth, the
# measured one must rise by a tenth.
#
# A prediction between those zones is too weak to test a direction; it "leans" down or up, and the
# measured speedup must only not move the other way by more than a tenth. The cell prints three
# values: whether no method with a clear prediction (falls, flat, rises) was contradicted, whether no
# method whose prediction only leans was, and whether at least one method's trend was resolved as
# predicted (one with a clear prediction, where there is one), so that the check cannot pass
# without showing a direction where one is predicted. Every method is in one of the two
# groups; a group that is empty on a profile prints True, and the table's `test` column says which
# group each method is in. A trend the rounds do not resolve is not tested on that run, and the
# table says so.
#
# A shallow draft that is already a slowdown one request at a time is held to the same test: its
# prediction falls further with b, because its draft passes and the verification both grow. The
# table gives each method's test, the lowest and highest of its rounds' changes, and its verdict.
# The check tests direction, not size: a measured fall twice as steep as predicted passes it.
# :::

# %%
trends = []
for name, rows in spec_sweep.groupby("method", sort=False):
    predicted_change = load.sweep_change(rows.assign(round=0, speedup=rows["predicted speedup"]))
    test = load.trend_test(predicted_change)
    changes = [load.sweep_change(one) for _, one in sweep_per_round[sweep_per_round.method == name].groupby("round")]
    trends.append({"method": name, "predicted change": predicted_change, "test": test,
                   "lowest round": min(changes), "highest round": max(changes),
                   "verdict": load.trend_verdict(test, changes)})
trends = pd.DataFrame(trends).set_index("method")
results.save("speculative_trends", trends.reset_index(), prof, k=k, rounds=rounds)
trends.round(2)

# %%
# NBVAL_CHECK_OUTPUT
clear = trends.test.isin(load.DECISIVE)  # every method is in one of the two groups
contradicted = trends.verdict.eq("contradicted")
shown = trends.verdict[clear] if clear.any() else trends.verdict  # a leaning test alone shows no direction
print(not contradicted[clear].any(), not contradicted[~clear].any(), shown.eq("as predicted").any())

# %% [markdown]
# Acceptance does not depend on the load; a verification's cost does:
#
# :::{dropdown} How we know: the same requests at every b
# Tokens per verification and vLLM's acceptance rate, per method and concurrency: the same
# requests at every b, so what the draft gets accepted does not depend on the load; what a
# verification costs does.
# :::

# %%
pd.concat([spec_sweep.pivot(index="concurrency", columns="method", values=v).add_prefix(f"{v}: ")
           for v in ("tokens per verification", "acceptance rate")], axis=1).T.round(2)

# %% [markdown]
# ### Is it lossless here?
#
# In exact arithmetic greedy speculative decoding gives the target's greedy tokens. In floating point
# a verification sums in another order, which can move a result by up to a rounding step of the
# dtype:
#
# :::{dropdown} How we know: the rounding step
# In exact arithmetic greedy speculative decoding gives the target's greedy tokens. In floating
# point, a verification computes the same logits with other matrix shapes (k + 1 rows instead of
# one), so sums are rounded in another order. How large such a difference can be, relative to the
# numbers summed, is set by the dtype's significand (`setup_check.MANTISSA_BITS`):
# :::

# %%
from servelab.measure.setup import check as setup_check

pd.DataFrame([{"dtype": d, "significand bits (stored)": setup_check.MANTISSA_BITS[d],
               "relative rounding step 2^-bits": 2.0 ** -setup_check.MANTISSA_BITS[d]}
              for d in ("float32", rounding_dtype)])

# %% [markdown]
# In float32 that step is far below the usual gap between the best two tokens; in a 16-bit dtype it is
# tens of thousands of times larger, and a near tie (the best two tokens almost equally likely) can go either
# way. Each answer against the plain server's, token by token:
#
# :::{dropdown} How we know: "within hardware numerics" and the near-tie rule
# In float32 that step is far below the usual gap between the best token and the runner-up, and
# the tokens are the same. In a 16-bit dtype the step is tens of thousands of times larger, and
# wherever the best two tokens are that close, the two computations can choose differently; from
# there on the texts differ. Chen et al. say it precisely: their rule preserves the target's
# distribution "within hardware numerics" (quoted in full at the end of the chapter). Below,
# every answer of every method is compared with the plain server's, token by token: identical
# tokens are claimed only where the dtype is float32; elsewhere each divergence must be a near
# tie, as `setup_check` defines it:
# :::

# %%
print(f"near tie: each side's token among the other's best {setup_check.NEAR_TIE_RANK} candidates "
      f"(NEAR_TIE_RANK) and within {setup_check.NEAR_TIE_NATS} nats of the other's choice (NEAR_TIE_NATS)")
greedy = compare(list(setups.TASKS), {"plain": base.answers, **{n: a.answers for n, a in answers.items()}},
                 exact=exact_expected(prof.dtype))
results.save("speculative_greedy_equality", greedy.table, prof, dtype=prof.dtype)
greedy.table[["question", "compared", "same tokens", "first divergence", "tokens there", "near tie"]]

# %% [markdown]
# Now in 16 bits: a plain server and the model as its own draft answer in `rounding_dtype`.
#
# :::{dropdown} How we know: the 16-bit servers, and why the model as its own draft can differ
# Now a 16-bit case. On the cpu profile, where everything above ran in float32, two more servers
# started in the background when the measurements ended: a plain one and the model as its own
# draft, both in `rounding_dtype`. On a GPU profile the chapter already ran in a 16-bit dtype, so
# the comparison above is that case, and this part is skipped.
#
# The model as its own draft is not plain decoding in disguise. vLLM's draft runs its first pass
# over all the tokens the last verification added, several at once
# (`set_inputs_first_pass` in `vllm/v1/spec_decode/llm_base_proposer.py`), and only its k − 1
# later passes over one token each; the verification runs k + 1 tokens at once; plain decoding
# runs one. So a verification that stops before the k-th token shows that the draft's computation
# and the verification's disagreed; whether the answer left what plain decoding writes is what the
# comparison with the plain 16-bit server says.
# :::

# %%
if run_rounding:
    rounded = {name: live.answer_tasks(rounding_lineup.take(name), setups.TASKS, task_tokens)
               for name in ("plain", rounding_method.name)}
    rounding_lineup.stop()
    rounding = compare(list(setups.TASKS), {name: got.answers for name, got in rounded.items()}, exact=False)
    agree = []
    for dtype, counts in ((prof.dtype, answers[rounding_method.name].counts),
                          (rounding_dtype, rounded[rounding_method.name].counts)):
        agree.append({"dtype": dtype, "verifications": counts.drafts,
                      "stopped before the k-th token": counts.drafts - counts.accepted_per_pos[-1],
                      "acceptance rate": counts.acceptance_rate})
    agreement_by_dtype = pd.DataFrame(agree)
    results.save("speculative_rounding", agreement_by_dtype, prof, method=rounding_method.name)
    results.save("speculative_rounding_equality", rounding.table, prof, dtype=rounding_dtype)
    shown = rounding.table[["question", "compared", "same tokens", "first divergence", "tokens there",
                            "margin (nats)", "near tie"]]
else:
    rounding, agreement_by_dtype = greedy, pd.DataFrame()
    shown = pd.Series({"skipped": f"profile {prof.name} already runs in {prof.dtype}; the comparison above is it"})
print(agreement_by_dtype.round(3).to_string() if len(agreement_by_dtype) else "")
shown

# %% [markdown]
# Above, an answer that leaves the plain one shows where; "stopped before the k-th token" counts
# verifications where draft and target disagreed. A text can part only at a near tie. The nearest
# ties in the plain 16-bit answers, in nats (a difference of log-probabilities):
#
# :::{dropdown} How we know: exact ties
# What makes a disagreement possible is a near tie: a position where the best and the
# second-best token are almost equally likely. Per `rounding_dtype` answer of the plain server:
# the smallest such gap, in nats (a difference of log-probabilities), and how many positions have
# a gap below `NEAR_TIE_NATS`. A gap of exactly 0 is an exact tie in the dtype: both logits
# rounded to the same number. Such a tie is no danger by itself: every computation that arrives
# at the same two rounded numbers breaks it the same way (by the lower token id), and the texts
# part only where a different summation order rounds one of the two differently, which takes a
# gap of about one rounding step and a computation that lands on the other side of it.
# :::

# %%
if run_rounding:
    plain16 = rounded["plain"].answers
    gaps = [[c[0][1] - c[1][1] for c in a.candidates if len(c) >= 2] for a in plain16]
    margins = pd.DataFrame({"task": list(setups.TASKS), "smallest gap (nats)": smallest_margins(plain16),
                            f"positions with a gap below {setup_check.NEAR_TIE_NATS} nats":
                            [sum(g < setup_check.NEAR_TIE_NATS for g in gs) for gs in gaps],
                            "exact ties (gap 0)": [sum(g == 0 for g in gs) for gs in gaps],
                            "positions": [len(gs) for gs in gaps]})
    results.save("speculative_rounding_margins", margins, prof, dtype=rounding_dtype)
else:
    margins = pd.DataFrame(columns=["task"])
margins.round(3)

# %%
# NBVAL_CHECK_OUTPUT
print(greedy.holds, rounding.holds)

# %% [markdown]
# A text changed by rounding is no worse: both are greedy answers of the same model.
#
# :::{dropdown} How we know: what the checks cover, and sampling
# The first check: every speculative answer has the plain answer's tokens where the dtype is
# float32 (and elsewhere a near tie at every divergence). The second: in the 16-bit case, every
# place where the speculative answer leaves the plain 16-bit answer is a near tie (on a GPU
# profile that is the first comparison again). A text changed by rounding is not a worse text:
# both are greedy answers of the same model, computed in different orders.
#
# **Sampling.** Greedy decoding tests the rule only where p is one-hot. The sampled case
# (temperature 1, where the claim is about distributions) is not tested against the engine here:
# only the from-scratch sampler's goodness-of-fit test above covers it.
# :::
#
# **Lossless unless you ask otherwise.** Both engines have settings that trade the guarantee for
# speed. Their values here:
#
# :::{dropdown} How we know: what each setting does
# **Lossless unless you ask otherwise.** Both engines have settings that trade the guarantee for
# speed. vLLM's `rejection_sample_method` can be "synthetic" (drafts accepted with a chosen
# probability, whatever the models say) or "block" (Sun et al.'s block verification); SGLang's
# `speculative_accept_threshold_single` accepts a draft token whose target probability exceeds
# it, and `speculative_accept_threshold_acc` raises a token's acceptance probability from p to
# min(1, p / threshold). For greedy requests, like this chapter's, SGLang's thresholds do nothing
# with EAGLE, STANDALONE or NGRAM: `eagle_sample`, which verifies all three, compares with the
# argmax on its greedy path and reads them only on the sampling path. vLLM's "synthetic" mode
# reaches greedy requests too (`rejection_greedy_sample_kernel`).
#
# Their values here, from each engine's own configuration (vLLM's `SpeculativeConfig`; SGLang's
# resolved arguments, below in the SGLang section):
# :::

# %%
defaults = vllm_defaults.result()
pd.DataFrame({"field default": defaults["field defaults"],
              "ngram, k = 4, nothing else given": defaults["ngram, k = 4, nothing else given"]}).astype(str)

# %% [markdown]
# With vLLM's defaults and SGLang's thresholds at 1.0, the rule is the lossless one.
#
# :::{dropdown} How we know: the defaults table
# With vLLM's defaults ("standard" rejection sampling) and SGLang's thresholds at 1.0, the rule
# is the lossless one; only setting them otherwise gives that up. The table also shows what vLLM
# fills in for the n-gram method when neither lookup length is given.
# :::
#
# ## SGLang
#
# Here SGLang's choices are read, not timed. It names its methods with `--speculative-algorithm`
# (EAGLE, EAGLE3, STANDALONE for a separate draft model, NGRAM and more) and picks the draft's shape
# itself: "steps" are draft passes, "top-k" the candidates per pass, "draft tokens" what the target
# checks. What it fills in:
#
# :::{dropdown} How we know: SGLang's flags and their resolution
# SGLang names its methods with `--speculative-algorithm`: EAGLE, EAGLE3, NEXTN (an alias of
# EAGLE), STANDALONE (a separate draft model), NGRAM, DFLASH, DSPARK, UNO
# (`sglang/srt/arg_groups/fields/spec.py`). The draft is `--speculative-draft-model-path`; its
# shape is set by `--speculative-num-steps` (draft passes), `--speculative-eagle-topk` (candidates
# kept per pass; 1 is a chain, more is a tree) and `--speculative-num-draft-tokens` (tokens the
# target verifies). Given none of the three, SGLang chooses them itself
# (`_auto_choose_speculative_params` in `sglang/srt/arg_groups/speculative_hook.py`). Without
# `--speculative-num-steps` but with the top-k or the draft tokens, it stops with an assertion
# (both must then be unset); with top-k 1, a number of draft tokens other than steps + 1 is
# changed to steps + 1 with a warning. The articles' STANDALONE call gives only
# `speculative_num_draft_tokens=5`, so it runs into the assertion: the last row below, with the
# error SGLang raises. Here is what SGLang's own resolution pipeline fills in (`sglang_defaults`,
# started in the background above) for this profile's model and two GPU models; nothing is
# started, the GPU models are resolved from their configuration alone, and every command says
# `--device cuda` (the device column), since on the CPU SGLang has no speculative path (below).
# For NGRAM the "top-k" is `speculative_ngram_max_bfs_breadth`, the breadth of the search through
# earlier text that builds its draft tree. The last columns are the thresholds that would make
# acceptance lossy (1.0: off) and whether SGLang's separate rejection-sampling option is on.
# :::

# %%
resolved = sglang_resolution.result()
results.save("speculative_sglang_defaults", resolved.table, prof, cpu_ops=resolved.cpu_ops)
resolved.table[["target", "algorithm", "steps", "top-k", "draft tokens", "max running requests", "decided by",
                "error", "device", "n-gram BFS breadth", "accept threshold single", "accept threshold acc",
                "rejection sampling"]]

# %% [markdown]
# Each of these algorithms caps the running requests unless they are given, a cost in concurrency the
# plain server does not pay. None runs on this machine's CPU, for lack of two kernel operators:
#
# :::{dropdown} How we know: the defaults, the caps and the CPU operators
# The defaults depend on the algorithm and the target's architecture: for EAGLE and EAGLE3 a
# Llama (SmolLM2 is one) gets a tree (top-k above 1: several candidates per step), and most other
# architectures a chain (top-k 1); STANDALONE is always a chain, and NGRAM drafts the most tokens
# of all (the columns above give every value). Each of these algorithms also caps the number of
# running requests unless it is given (the "max running requests" column): a cost in concurrency
# that the plain server does not pay. The cap is set per algorithm, by `_handle_eagle_family`
# (EAGLE, EAGLE3, STANDALONE), `_handle_ngram`, and the handlers of DFLASH, DSPARK and frozen-KV
# MTP (`sglang/srt/arg_groups/speculative_hook.py`); `_handle_uno` sets none, so UNO keeps the
# plain server's limit.
#
# None of these run on this machine's CPU. SGLang's CPU path builds and verifies its draft trees
# with two `sgl_kernel` operators (`sglang/kernels/ops/speculative/spec_tree.py`), which only a
# CPU build of `sgl_kernel` compiled from source registers with torch. In the installed one:
# :::

# %%
pd.Series(resolved.cpu_ops, name="in this SGLang venv")

# %% [markdown]
# ## On a GPU
#
# With a GPU profile, the cell below also measures the articles' draft model and, on `gpu-80g`,
# EAGLE-3 heads on both engines.
#
# :::{dropdown} How we know: the GPU runs and their scheduling
# With a GPU profile, the cells above run the n-gram method and the profile's draft model, and the
# cell below measures more runs against the same engine and target without speculation, one server
# at a time, each on the profiles whose GPUs it fits. Every round starts the plain server and the
# speculative one afresh, in turns that alternate, and warms each start up as above; the table gives
# the median of the rounds, the lowest and highest round and the verdict across them.
#
# On both GPU profiles: the articles' draft,
# Qwen2.5-0.5B, for Qwen2.5-7B (their 72B target does not fit the smallest GPU profile), on vLLM only,
# since SGLang's STANDALONE wants the target's own vocabulary (`_validate_vocab_compatibility` in
# `sglang/srt/speculative/standalone_worker_v2.py`) and the 0.5B's is smaller; and the 0.5B for
# Qwen2.5-3B, one vocabulary, on both engines. On `gpu-80g` also an EAGLE-3 head for
# Llama-3.1-8B-Instruct on each engine (the heads the installed engines name themselves). Llama is
# gated on the hub: without `HF_TOKEN` the runs that need it are skipped, and the cell prints which
# and why. On a GPU the methods also differ in scheduling: vLLM keeps
# asynchronous scheduling (the next step scheduled while the current one runs), on by default, with
# EAGLE-type heads, `draft_model` and `ngram_gpu` among others, but not with the `ngram` method this
# chapter runs: there it is off by default and an error if asked for (`vllm/config/vllm.py`, where
# `async_scheduling` is resolved). So a GPU run's prompt-lookup speedups, against a plain server
# that keeps it, include that loss; on the CPU, `vllm/platforms/cpu.py` turns it off for every
# server, plain included. Each profile's runs, with their commands; `python -m servelab plan` has
# both engines' own parsers, draft rules and memory formulas check every one of them:
# :::

# %%
gpu_runs_.gpu_commands(k)

# %%
gpu_runs = gpu_runs_.gpu_runs(prof, k)
gpu, skipped = gpu_runs_.measure_gpu_runs(gpu_runs, servers, prof, task_tokens, concurrency, sweep_tokens, rounds)
results.save("speculative_gpu_runs", gpu, prof, k=k, rounds=rounds, skipped=skipped)
print(f"{len(gpu_runs) - len(skipped)} of {len(gpu_runs)} GPU runs on profile {prof.name}", *skipped, sep="\n")
gpu.round(2)

# %% [markdown]
# ## What it means
#
# The numbers behind the sentences below, from the cells above:

# %%
repetitive = tasks[tasks.task.isin(setups.REPETITIVE)].groupby("method", sort=False)
accept_b = sweep.pivot(index="method", columns="concurrency", values="acceptance rate")
# one number per method and round, the mean over the four tasks, then its median and range over the rounds
task_mean = task_per_round.groupby(["method", "round"], sort=False).speedup.mean().reset_index()
stated = {"tasks one at a time": load.over_rounds(task_mean, []).set_index("method")}
for b in (concurrency[0], concurrency[-1]):
    stated[f"sweep task, {b} request{'s' if b > 1 else ''}"] = spec_sweep[spec_sweep.concurrency == b].set_index(
        "method").rename(columns={"speedup lowest": "lowest", "speedup highest": "highest"})
columns = {"acceptance rate, repetitive tasks": repetitive["acceptance rate"].mean(),
           "tokens per verification, repetitive tasks": repetitive["tokens per verification"].mean(),
           "predicted, tasks one at a time": tasks.groupby("method", sort=False)["predicted speedup"].mean(),
           f"acceptance rate, sweep task, {concurrency[0]} request": accept_b[concurrency[0]],
           f"acceptance rate, sweep task, {concurrency[-1]} requests": accept_b[concurrency[-1]]}
for what, rows in stated.items():
    columns |= {f"speedup, {what}": rows.speedup, f"lowest round, {what}": rows.lowest,
                f"highest round, {what}": rows.highest,
                f"verdict, {what}": pd.Series([load.spread_verdict(lo, hi, rounds) for lo, hi in
                                                 zip(rows.lowest, rows.highest, strict=True)], index=rows.index)}
summary = pd.DataFrame({
    **columns,
    "slower than plain in every round from this concurrency on, measured":
        slowdown["sustained slowdown from b, measured"].astype(str),
    "slower than plain from this concurrency on, predicted": slowdown["predicted"].astype(str),
}).drop(index="plain", errors="ignore")
results.save("speculative_summary", summary.reset_index(names="method"), prof, rounds=rounds, sweep_tokens=sweep_tokens)
summary.round(2).T

# %% [markdown]
# Speculative decoding is lossless by construction, and faster only where drafts are accepted often
# and a verification stays cheap. The articles' "two to three times faster" is the papers' range, on
# large models with trained drafts, one request at a time: not a property of the feature.
#
# :::{dropdown} How we know: the summary in full, the papers and vLLM's answer
# Speculative decoding is lossless by construction, and the from-scratch sampler shows it: the
# exact rule's output passes a goodness-of-fit test that catches both broken rules. On the engine,
# greedy answers with and without speculation are the same tokens in float32; in a 16-bit dtype a
# verification's different arithmetic can flip a near tie, which changes the text without making
# it a worse sample of the model. Lossless holds with the engines' defaults: both offer settings that
# trade it away.
#
# Whether it is faster is a separate question with two halves. The first is acceptance, which
# depends on the draft and on the text: prompt lookup accepts often where the answer copies the
# prompt and almost never on free writing, and a draft cut from the model is accepted rarely at any
# depth that would be cheap. The second is cost: verifying k + 1 tokens costs about one step only
# while a pass stays in the flat part of the forward-cost curve. On a GPU that is where a pass is
# bound by memory bandwidth; on the cpu profile the small table after the decode table says whether
# bandwidth or per-step overhead dominates on this run. With more requests in flight the
# verifications leave the flat part, and a
# draft model's passes grow with them: the summary gives, per method, the concurrency of the sweep
# from which on it decodes slower than plain vLLM in every round, at that b and every larger one,
# measured and predicted from the forward costs (the concurrency section says by how much the
# prediction misses, per method, and, where prompt lookup turns into a slowdown within the sweep,
# whether the priced cost or the miss does it), and the check there fails where every round's line goes against a
# method's own prediction (a method whose rounds disagree is left untested on that run): direction,
# not size. A
# draft that is already a slowdown one request at a time, like the shallow cut, only loses more as
# its passes and the verification get dearer. The model as its own draft is the control: everything
# accepted, and its speedup one request at a time is what the draft's full cost leaves of that; its
# draft passes grow with b as the target's do, so wherever a pass over more tokens costs more, it
# falls further.
#
# The articles' "two to three times faster" is the papers' range, measured on large models on
# accelerators, one request at a time, with drafts trained for the job: Leviathan et al. report
# 2X-3X on T5-XXL, Chen et al. 2-2.5x on Chinchilla 70B (quoted below). It is not a property of
# the feature. The vLLM team's own measurements say the same as this chapter's sweep: a gain at
# low load that shrinks as the load grows, in theirs down to a slowdown. That is why vLLM lets the
# speculation length depend on the
# batch size (`num_speculative_tokens_per_batch_size` in `vllm/config/speculative.py`: ranges of
# batch sizes, each with its own k, where 0 stops drafting; a draft model still runs one pass per
# step to keep its KV cache in sync, `vllm/v1/spec_decode/llm_base_proposer.py`).
# :::

# %%
from IPython.display import Markdown

from servelab.book.quoted_figures import quote_markdown

Markdown(quote_markdown("spec_leviathan_t5", "spec_chen_chinchilla", "spec_chen_numerics", "spec_vllm_low_qps",
                        "spec_vllm_high_qps"))

# %%
pd.DataFrame([
    {"source": "source article 001 (German), section 2",
     "quote": "Dies beschleunigt die Generierung um das 2- bis 3-fache."},
    {"source": "source article 001 (German), section 4",
     "quote": "Speculative Decoding verdoppelt bei beiden Engines den Durchsatz ohne Qualitätsverlust."},
])

# %% [markdown]
# ## What to remember
#
# - Speculation pays only while verifying k + 1 tokens costs about one plain step: measure your
#   forward-cost curve first.
# - Acceptance sets the gain: prompt lookup wins where answers copy the prompt; a useful draft is
#   trained to predict the target, not cut from it.
# - Under load, verifications leave the flat part of the curve and the gain shrinks or turns into a
#   slowdown: check the batch sizes you serve.
# - vLLM's acceptance rate is not α: it counts drafted tokens that were never checked.
# - Lossless holds with the defaults: greedy answers matched in float32, parting only at near ties in
#   16 bits.

# %% [markdown]
# ## Exercises
#
# 1. (10 min, no engine) How high would the cheapest draft's acceptance probability α have to be, at
#    the chapter's k, to break even on this machine? Compare with its measured α.
# 2. (30 min, take-home, no engine) With this machine's forward costs, which k up to the chapter's k
#    maximises prompt lookup's speedup at each concurrency of the sweep? The stub says how to count.
# 3. (5 min, no engine) From the depth sweep: how many layers does a cut need before it agrees with
#    the target on half the tokens, and what would it gain if it ran for free?
#
# Fill in each stub, then run its check; solutions are hidden below.

# %%
# Exercise 1: your answer. `methods` lists the drafts with their relative cost `c` (`.cost`); `verify_cost(n)` is
# a verification of n tokens in plain steps; `spec.expected_tokens(alpha, k)` the tokens a verification emits.
from servelab.book import exercise_check
from servelab.measure.exercises import speculative_decoding as expected


def break_even_alpha() -> float:
    """The smallest alpha at which the cheapest draft emits as many tokens as its k drafts and one verification
    cost."""
    raise NotImplementedError


# %%
cheapest = min((m for m in methods if m.cost > 0), key=lambda m: m.cost)
exercise_check.check(break_even_alpha, expected.break_even_cases(cheapest.name, k, cheapest.cost, verify_cost),
                     title="Exercise 1")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1: solve E(alpha, k) = k c + v(k + 1) for alpha on a fine grid (E grows with alpha).
half = min((m for m in methods if m.cost > 0), key=lambda m: m.cost)
need = k * half.cost + verify_cost(k + 1)
grid = np.linspace(0, 1, 100_001)
even = grid[np.argmax(spec.expected_tokens(grid, k) >= need)] if spec.expected_tokens(1.0, k) >= need else None
measured = answers[half.name].counts.iid_fit().alpha
if even is None:
    print(f"Answer: {half.name} cannot break even at k = {k} even if every token were accepted "
          f"(it would need {need:.2f} tokens per verification); its measured alpha is {measured:.3f}.")
else:
    print(f"Answer: {half.name} would need alpha >= {even:.3f} at k = {k} to break even; it measured "
          f"alpha = {measured:.3f}.")


def break_even_alpha() -> float | None:
    return float(even) if even is not None else None


exercise_check.check(break_even_alpha, expected.break_even_cases(cheapest.name, k, cheapest.cost, verify_cost),
                     title="Solution 1")

# %%
# Exercise 2: your answer. Use prompt lookup's counters on the four tasks (`answers[ngram_name].counts`: `.drafts`
# verifications, `.accepted` tokens, `.survival()`), not the sweep, which repeats one copying task. For each k' <= k:
#   1. E(k') = 1 + the sum of the first k' survival values (the i.i.d. model need not fit prompt lookup).
#   2. The lookup drafts the same stretches whatever k' is: the tokens from verifications (accepted plus one bonus
#      each) stay fixed, so there are (those tokens) / E(k') verifications; every other decode step is plain.
#   3. Price them at b requests: `load.batch_costs(k', 0.0, b, verify_cost)[1]` is a verification in plain steps;
#      `live.predicted_speedup(steps + 1, verifications, accepted, k', 0.0, that cost)` the speedup.


def best_k(b: int) -> int:
    """The k' <= k with the best predicted speedup for prompt lookup with `b` requests (0 if none gains)."""
    raise NotImplementedError


# %%
lookup_counts = answers[ngram_name].counts
lookup_steps = float((tasks[tasks.method == ngram_name].tokens - 1).sum())
exercise_check.check(best_k, expected.best_k_cases(lookup_steps, lookup_counts.drafts + lookup_counts.accepted,
                                                   lookup_counts.survival(), k, concurrency, verify_cost),
                     title="Exercise 2")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2: prompt lookup drafts only where it finds a match. Two assumptions pick k': the same
# stretches of the answers get drafted whatever k' is (the drafted tokens, verified ones plus their
# bonus tokens, are held fixed: D(k') = drafted tokens / E(k') verifications), and the steps where
# the lookup found nothing stay plain steps, one each. E(k') comes from the measured survival
# curve (k' <= k: the counters say nothing about longer drafts). At b requests a verification is a
# pass over b (k' + 1) tokens against a plain step over b (batch_costs); a lookup costs nothing
# (c = 0). predicted_speedup then prices every step, drafted or not. At b requests this prices the
# b requests as if they drafted in lockstep, b copies of one answer with its drafts at the same
# steps; and it inherits the prediction's miss for prompt lookup, printed from the sweep below.
counts = answers[ngram_name].counts
by_lookup = tasks[tasks.method == ngram_name]
steps = float((by_lookup.tokens - 1).sum())  # decode steps without speculation, the four answers together
drafted = counts.drafts + counts.accepted  # tokens from verifications: accepted ones plus one bonus each
survive = counts.survival()
e_of = {kk: 1 + float(survive[:kk].sum()) for kk in range(1, k + 1)}
print(f"decode steps {steps:.0f}: {counts.drafts:.0f} verifications gave {drafted:.0f} tokens, "
      f"{steps - drafted:.0f} steps had no draft; E(k') = "
      + ", ".join(f"{e:.2f}" for e in e_of.values()))
best_k_at = {}
for b in concurrency:
    gains = {}
    for kk, e in e_of.items():
        verifications = drafted / e
        gains[kk] = live.predicted_speedup(steps + 1, verifications, verifications * (e - 1), kk, 0.0,
                                           load.batch_costs(kk, 0.0, b, verify_cost)[1])
    top = max(gains, key=gains.get)
    best_k_at[b] = (top, gains[top]) if gains[top] > 1 else (0, 1.0)
print("Answer: on these four tasks the best k is "
      + "; ".join(f"{top} with {b} request{'s' if b > 1 else ''} (predicted {gain:.2f}x)"
                  for b, (top, gain) in best_k_at.items())
      + " (0: do not speculate at that load), holding fixed which stretches the lookup drafts.")
lookup_fit = spec_sweep[spec_sweep.method == ngram_name].set_index("concurrency")
later = [b for b in concurrency if b >= 4]
print(f"The sweep (prompt lookup at k = {k}, b copies of one copying request) measured "
      + ", ".join(f"{lookup_fit.speedup[b]:.2f}x at b = {b} ({lookup_fit['measured / predicted'][b]:.2f} of its "
                  "prediction)" for b in later))
unborne = [b for b in later if best_k_at[b][0] > 0 and best_k_at[b][1] * lookup_fit["measured / predicted"][b] <= 1]
print("Answer, caveat: scaled by the sweep's measured / predicted, the gain above "
      + (f"is not borne out at b = {', '.join(map(str, unborne))}" if unborne else "stays above 1 at b >= 4")
      + "; the solution prices the passes of b requests drafting in lockstep (b copies of one answer), "
      "not what the engine adds to them.")


def best_k(b: int) -> int:
    return best_k_at[b][0]


exercise_check.check(best_k, expected.best_k_cases(lookup_steps, lookup_counts.drafts + lookup_counts.accepted,
                                                   lookup_counts.survival(), k, concurrency, verify_cost),
                     title="Solution 2")

# %%
# Exercise 3: your answer. `shallow` is the depth sweep (columns "draft layers", agreement, ...), where the
# profile cuts drafts from its model (`cut_drafts`).


def layers_for_half() -> int:
    """The fewest draft layers whose cut agrees with the target on at least half the tokens."""
    raise NotImplementedError


# %%
exercise_check.check(layers_for_half, expected.half_agreement_cases(shallow if cut_drafts else None),
                     title="Exercise 3")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3: the first depth with agreement >= 0.5, and its speedup with c = 0.
halfway = shallow[shallow.agreement >= 0.5] if cut_drafts else pd.DataFrame()
if not cut_drafts:
    print("Answer: this profile cuts no drafts from its model, so the depth sweep did not run.")
elif halfway.empty:
    print("Answer: no cut short of the whole model agrees with it on half the tokens.")
else:
    row = halfway.iloc[0]
    free = row["tokens per verification"] / verify_cost(k + 1)
    print(f"Answer: {int(row['draft layers'])} of {layers} layers agree on {row.agreement:.0%} of the tokens; "
          f"free of cost it would give {free:.2f}x, but it reads {row.c:.0%} of the weights per draft step.")


def layers_for_half() -> int:
    return int(halfway.iloc[0]["draft layers"])


exercise_check.check(layers_for_half, expected.half_agreement_cases(shallow if cut_drafts else None),
                     title="Solution 3")
