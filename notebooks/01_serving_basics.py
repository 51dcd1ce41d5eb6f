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
# # How an engine serves requests: prefill, decode and continuous batching
#
# A serving engine has one model and many users. Each user sends a prompt and waits for an answer that
# arrives token by token. The engine's job is to keep the GPU busy with everyone's work at once while
# each user still sees the first word quickly and the rest at reading speed. Every later chapter (the KV
# cache, paging, prefix caching, chunked prefill, speculative decoding) is a way of doing that job
# better, so this chapter shows the job itself: how one request is computed, why generating tokens is
# limited by memory rather than arithmetic, and how an engine runs many requests in one batch. We build
# the scheduler small, then load both real engines and read their latency against their load.

# %% tags=["parameters"]
profile = "auto"
prompt_fractions = [1 / 64, 1 / 8, 3 / 8]  # prefill-run prompt lengths, as fractions of the context window
prefill_requests = 2                       # requests per prompt length, one at a time
output_tokens = 16                         # tokens every measured request generates
batches = [1, 2, 4, 8]                     # requests in flight for the decode runs
batch_prompt_tokens = 64                   # prompt of each decode-run request
waves = 1                                  # a batch of b sends b x waves requests
batch_cap = 8                              # the most requests each server runs at once
load_fractions = [0.5, 1.5, 4.0]           # offered request rates, as fractions of the measured capacity
load_requests = 16                         # requests per offered rate
sim_requests = 12                          # simulated requests
seed = 0

# %%
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, diagrams_serving, plots, results

prof = banner.start(profile)

# %% [markdown]
# ## One request: prefill, then decode
#
# A language model turns a sequence of tokens into a prediction of the next token. Each run of the model
# over some tokens is a *forward pass*; an engine runs one forward pass after another, and we call each
# one a *step*. A request is computed in two phases:
#
# - **Prefill**: the first step reads the whole prompt in one forward pass. All prompt tokens are
#   computed in parallel, and the step ends with the first output token.
# - **Decode**: every later step computes one new token per request, from the token before it.
#
# To predict the next token, attention needs a key and a value vector of every earlier token, in every
# layer. Recomputing them at every step would make each new token cost as much as the whole prefill,
# so the engine keeps them: that store is the *KV cache*, and chapter 02 measures how large it gets.
# The picture shows one request of five prompt tokens that generates four tokens. Row *output k* is
# output token k fed back as input: the decode step computes its key and value and predicts token
# k + 1. The last token is never fed back, so it has no row.

# %%
diagrams_serving.draw_prefill_decode(prompt_tokens=5, output_tokens=4)
plt.show()

# %% [markdown]
# Two times describe what a user feels, and two numbers what the operator gets:
#
# - **TTFT**, time to first token: from sending the request to its first token. It includes waiting in
#   the engine's queue and the prefill.
# - **ITL**, inter-token latency: the gap between two consecutive tokens of one answer. **TPOT**, time
#   per output token, is their mean over an answer: (E2EL − TTFT) / (tokens − 1), where E2EL, the
#   end-to-end latency, runs from sending to the last token. It says how fast the answer streams.
# - **Throughput**: tokens (or requests) the whole server completes per second.
# - **Goodput**: requests per second that met the latency objectives (a TTFT and a TPOT limit). A
#   server can raise its throughput while its goodput falls.
#
# Latencies vary from request to request, so they are reported as percentiles: p50 is the median, p90
# the value that 90 % of requests beat.
#
# The later chapters use these words as defined here.
#
# ## Many requests: static against continuous batching
#
# A decode step of one request does little arithmetic, but it reads every weight of the model from
# memory. If the step computes the next token of eight requests instead of one, it reads the weights
# once for all eight: a *batch*. Batching is how an engine gets its throughput. The question is when
# requests may join and leave the batch.
#
# *Static batching* forms a batch from the waiting requests and runs it until its longest answer is
# done; a request that arrives meanwhile waits for the whole batch, and a short answer leaves its slot
# empty. *Continuous batching* (Orca, OSDI 2022, called iteration-level scheduling there) decides at
# every step: finished requests leave, waiting ones join, and every running request gets its next
# token. Both vLLM and SGLang schedule this way.
#
# The simulator below (`servelab/sim/batching`) runs both on the same random arrivals, with answers of
# different lengths, and the same cost per step: 20 ms, plus 0.2 ms per prompt token the step
# prefills, plus 2 ms per request it decodes. These costs are made up for the picture; exercise 2 fits
# them to this machine.

# %%
from servelab.book.i18n import N_
from servelab.sim.batching import continuous, poisson_arrivals, static, summarize
from servelab.sim.chunked_prefill.cost import CostModel

# an illustrative step cost, not measured: 20 ms per step, 0.2 ms per prompt token, 2 ms per decoding request
cost = CostModel(step_s=0.020, prefill_token_s=0.0002, decode_s=0.002, context_token_s=0.0)
arrivals = poisson_arrivals(4.0, sim_requests, prompt_tokens=200, output_tokens=(4, 40), seed=seed)
simulated = {N_("static batching"): static(arrivals, cost, max_batch=4),
             N_("continuous batching"): continuous(arrivals, cost, max_batch=4)}
diagrams_serving.draw_batching({plots.label(k): v for k, v in simulated.items()})
plt.show()
slo = {"ttft_slo_s": 0.5, "tpot_slo_s": 0.05}
sim_summary = pd.DataFrame({k: summarize(v, **slo) for k, v in simulated.items()}).T
results.save("serving_basics_sim", sim_summary.reset_index(names="scheduler"), prof,
             cost=str(cost), requests=sim_requests, seed=seed, **slo)
sim_summary.round(3)

# %% [markdown]
# Grey is waiting, orange the prefill step, blue decoding. Under static batching a request that arrives
# while a batch runs waits until the batch's longest answer is done; under continuous batching it joins
# at the next step. The table shows what that does: a lower TTFT and more requests within both
# objectives (`met_slo`: a TTFT under 0.5 s and a TPOT under 50 ms), for about the same tokens per
# second (below its capacity a server finishes what arrives, however it schedules). Each request's
# TPOT is a little higher under continuous batching, because its steps also carry other requests'
# prefills.
#
# :::{dropdown} How we know: what the simulator leaves out
# The simulator (`servelab/sim/batching`, its docstring lists this too) never splits a prompt across
# steps (chunked prefill is chapter 05's), never runs out of KV cache (no preemption: chapter 03's),
# lets every request generate exactly its number of tokens, charges each step what the linear cost
# model says, and lets a request reach the scheduler the moment it arrives (no HTTP or tokenizer
# time). The cost model also has a term per token of context a decode reads (`context_token_s`), left
# at 0 here. A step mixes prefills and decodes, as vLLM's do; SGLang by default runs a prefill batch as
# a step of its own (`enable_mixed_chunk` is off), so there the decodes wait for it instead.
# :::

# %%
# NBVAL_CHECK_OUTPUT
s, c = sim_summary.loc["static batching"], sim_summary.loc["continuous batching"]
print(c.ttft_p90_s < s.ttft_p90_s, c.met_slo > s.met_slo, c.output_tokens_per_s > 0.95 * s.output_tokens_per_s)

# %% [markdown]
# ## The real engines
#
# Now both engines, on this machine's model. vLLM's benchmark client, `vllm bench serve`, sends the
# same random prompts to each, with a fixed answer length; one client for both means the same requests
# and the same clock. Three sweeps per engine:
#
# 1. one request at a time, with short, medium and long prompts: TTFT and ITL against prompt length;
# 2. 1, 2, 4 and 8 requests at a time (each new request sent when one finishes, the client's
#    `--max-concurrency`): the server's tokens per second against the batch;
# 3. requests arriving at random at a fixed average rate, however many are already in flight, at
#    rates from half to four times what the slower server managed in sweep 2: latency against load.
#
# Both servers run with their batch capped at `batch_cap` (8) requests, so that past its capacity a
# server queues new requests instead of taking them all into one ever larger batch.
#
# :::{dropdown} How we know: how the servers run and what the client sends
# On the `cpu` profile both servers run side by side (each has a fixed KV budget) and are measured one
# after the other; on a GPU each claims most of the card, so they run one at a time and each is started
# twice, once per phase (`servelab/measure/chapter_servers/c01.py` declares it, and
# `python -m servelab plan` lists it). The client is vLLM's own `vllm bench serve`
# (`vllm/benchmarks/serve.py`), speaking only the OpenAI-compatible HTTP API to either server, with
# `--ignore-eos` so that every answer has exactly `output_tokens` tokens. Each run has a seed of its
# own, so no run can be served from another's prefix cache (`servelab/measure/batching/serving.py`). A
# short warm-up run goes first on each server and is not reported. With `--request-rate` the client
# draws exponential gaps (`get_request` in `vllm/benchmarks/serve.py`, burstiness 1) and then rescales
# them so that the last request goes out at exactly requests / rate: a Poisson process conditioned on
# its length, where the simulator's `poisson_arrivals` is not rescaled. Both servers' batch cap comes
# after the profile's own `--max-num-seqs` / `--max-running-requests` on the command line, and the
# engines' argument parsers keep the last.
# :::

# %%
from servelab.measure.batching import serving as sb
from servelab.measure.chapter_servers import c01
from servelab.measure.deploying.head_to_head import measure, warm_up
from servelab.measure.lineup import Lineup, side_by_side

servers = {name: launch.server(prof) for name, launch in c01.servers(prof, batch_cap=batch_cap).items()}
prompt_lengths = [max(16, int(f * prof.max_model_len)) for f in prompt_fractions]
phase_one = (sb.prefill_runs(prompt_lengths, requests=prefill_requests, seed=seed)
             + sb.batch_runs(batches, input_tokens=batch_prompt_tokens, waves=waves, seed=seed))
warm = warm_up(phase_one)
lineup = Lineup(servers, together=side_by_side(prof))
summaries, per_request = [], []
try:
    for name in servers:
        summary, requests = measure(lineup.take(name), phase_one, output_tokens=output_tokens, warm=warm)
        summaries.append(summary)
        per_request.append(requests)
except BaseException:
    lineup.stop()
    raise
summary_one, requests_one = pd.concat(summaries, ignore_index=True), pd.concat(per_request, ignore_index=True)
results.save("serving_basics_runs", summary_one, prof, output_tokens=output_tokens, seed=seed)
results.save("serving_basics_requests", requests_one, prof, output_tokens=output_tokens, seed=seed)
prefill = sb.prefill_decode(requests_one)
results.save("serving_basics_prefill_decode", prefill, prof)
prefill.round(2)

# %%
diagrams_serving.engine_panels(prefill, "prompt_tokens", [("ttft_ms", N_("Time to first token"), N_("ms")),
                                                           ("itl_ms", N_("Gap between later tokens"), N_("ms"))],
                               N_("prompt (tokens)"))
plt.show()

# %% [markdown]
# The prefill grows with the prompt: the first token of a long prompt comes many times later than
# that of a short one (`ttft_vs_shortest`). Computing the prompt in parallel is not free: the step
# still does the arithmetic of every prompt token. The gap between later tokens grows far less
# (`itl_vs_shortest`), because each decode step computes one token whatever the prompt was; it only
# reads a longer KV cache.

# %%
# NBVAL_CHECK_OUTPUT
longest = prefill.groupby("engine").last()
print((longest.ttft_vs_shortest > 2).all(), (longest.ttft_vs_shortest > 2 * longest.itl_vs_shortest).all())

# %% [markdown]
# ## Why decode is limited by memory
#
# A decode step does little arithmetic for the bytes it reads: at one request, it reads every weight
# once to produce one token. The step cannot be
# shorter than the time the memory needs to deliver those bytes, so the memory's bandwidth (bytes per
# second) divided by the bytes read per token bounds the decode rate: the *roofline*. With a batch of
# b requests the weights are read once for all b tokens, and each request adds only its KV cache; the
# bound grows almost b-fold. The cell measures the bandwidth of the memory that holds the weights (host
# memory here, GPU memory on a GPU) with the engine's own PyTorch, and sets the bound beside what the
# engines delivered. In the table, `server_tok_s` is all output tokens over the run's duration, first
# tokens and idle moments included; `request_tok_s` is 1 / median ITL, how fast one answer streams
# once it has started.

# %%
from servelab.measure.speculative.verification import decode_roofline

bandwidth = sb.device_bandwidth(prof)
roofline = decode_roofline(servers["vLLM"].model.source, prof.dtype, bandwidth["read_gb_s"])
scaling = sb.decode_scaling(summary_one)
context = batch_prompt_tokens + output_tokens // 2  # the mean context a decode step reads
scaling["decode_tok_s"] = scaling.batch * scaling.request_tok_s
scaling["roofline_tok_s"] = [sb.batch_roofline(roofline, int(b), context) for b in scaling.batch]
results.save("serving_basics_decode_scaling", scaling, prof, bandwidth=bandwidth,
             weight_bytes=roofline.weight_bytes, context_tokens=context)
one = scaling[scaling.batch == 1].set_index("engine")
print(f"{bandwidth['device']} read bandwidth {bandwidth['read_gb_s']:.0f} GB/s; weights "
      f"{roofline.weight_bytes / 1e9:.2f} GB; batch-1 bound {roofline.tokens_per_s(context):.0f} tokens/s; measured "
      + ", ".join(f"{e} {r.decode_tok_s:.0f} ({r.decode_tok_s / r.roofline_tok_s:.0%} of it)"
                  for e, r in one.iterrows()))
scaling.round(2)

# %%
ax = plots.axes("Decode: tokens/s of the whole batch", "requests in the batch", "tokens/s")
for engine, rows in scaling.groupby("engine", sort=False):
    ax.plot(rows.batch, rows.decode_tok_s, marker="o", label=f"{engine}, {plots.label('measured decode')}")
bound = scaling.drop_duplicates("batch")
ax.plot(bound.batch, bound.roofline_tok_s, "k--", label=plots.label("memory-bandwidth bound"))
ax.set_xscale("log", base=2)
ax.set_xticks(batches, [str(b) for b in batches])
ax.set_yscale("log")
ax.legend()
plt.show()

# %% [markdown]
# Both axes are logarithmic, so that the bound, which grows almost in proportion to the batch, and the
# measured rates stay readable together. The server's tokens per second grow with the batch while each
# request slows far less than the batch grows (`request_speed_vs_batch_1`): the batch shares the cost
# of a step.
# That is why engines batch, and why the scheduler's limits on the batch matter.
#
# The measured line is the decode rate: batch / median ITL, first tokens left out. The bound is a
# ceiling; how close the engines come to it depends on the machine, and the cell above prints it.
# Near the bound, reading the weights is what a step costs. Far below it, something else takes most
# of a step (this chapter does not measure what), and the batch shares that cost too.
#
# :::{dropdown} How we know: how exact the bound is, and what the check allows
# The bandwidth is measured with one simple read (PyTorch's sum over a large tensor, best of five
# passes), while the engine reads its weights with its own matrix kernels, which may stream memory a
# little faster, and a busy machine lowers the measurement. So the bound is an estimate: on some
# hosts of the same kind a batch-1 decode rate sits just below it, on others far below. The check
# allows a measured rate up to a quarter above the estimate; a rate beyond that would mean the
# bytes read per token are counted wrong, which is what the check is for. With one run per batch size
# these columns are noisy: a request speed above 1 at some batch is noise.
# :::

# %%
# NBVAL_CHECK_OUTPUT
top = scaling.groupby("engine").last()
print((top.server_gain_vs_batch_1 > 2).all(), bool((scaling.decode_tok_s <= 1.25 * scaling.roofline_tok_s).all()))

# %% [markdown]
# ## Latency against load
#
# A closed-loop test like sweep 2 sends the next request only when one finishes, so it can never
# overload the server. Real users do not wait for each other: requests arrive at some rate whatever
# is in flight, an *open loop*. Below the server's capacity, latency stays close to that of a single
# request; past it, requests arrive faster than they finish, the queue grows, and so does every
# request's TTFT. The rates below are fractions of the capacity that the slower engine reached with
# the largest batch, so both engines get the same load.

# %%
reached = summary_one[summary_one.run == f"batch {max(batches)}"].set_index("engine").request_throughput
capacity = float(reached.min())
rates = sb.rates_from_capacity(capacity, load_fractions)
phase_two = sb.rate_runs(rates, prompts=load_requests, input_tokens=batch_prompt_tokens, seed=seed)
load_runs, running = [], {}
try:
    for name in servers:
        server = lineup.take(name)  # on a GPU, after the other one stopped
        again = None if lineup.together else warm  # a server started afresh for this phase is warmed again
        load_runs.append(measure(server, phase_two, output_tokens=output_tokens, warm=again)[0])
        running[server.engine] = sb.running_batch_knobs(server)
finally:
    lineup.stop()
load = pd.concat(load_runs, ignore_index=True)
results.save("serving_basics_load_runs", load, prof, capacity_req_s=capacity, rates=rates)
curve = sb.load_curve(load)
results.save("serving_basics_load_curve", curve, prof, capacity_req_s=capacity)
curve.round(2)

# %%
left, right = diagrams_serving.engine_panels(
    curve, "offered_req_s", [("achieved_req_s", N_("Throughput against load"), N_("achieved (requests/s)")),
                             ("p90_ttft_ms", N_("Time to first token against load"), N_("p90 TTFT (ms)"))],
    N_("offered (requests/s)"))
offered = sorted(set(curve.offered_req_s))
left.plot(offered, offered, "k:", label=plots.label("as offered"))
for i, value in enumerate(reached):
    left.axhline(value, color=f"C{i}", linestyle="--", linewidth=1)
left.set_ylim(0, 1.15 * max(reached.max(), curve.achieved_req_s.max()))  # every engine's line and capacity shown
left.legend()
plt.show()

# %% [markdown]
# On the left, throughput follows the offered load and then flattens near the server's capacity (the
# dashed lines: what each engine reached in sweep 2); on the right, TTFT stays low and then climbs
# steeply: the *knee*. A server run near its knee has the most throughput but the least margin, so
# operators size a server for a load below it and watch p90 TTFT. On the cpu profile the two curves
# rank two CPU builds, not the engines.
#
# :::{dropdown} How we know: how to read these few points
# The achieved rate is requests over the run's duration, which includes finishing the last answers,
# so a short run reads a little below what it was offered even under its capacity. With 16 requests
# per rate, p90 is about the second-slowest request, so a single point is noisy; more requests per
# rate, and more rates near the capacity, draw the knee more finely at the price of minutes.
# :::
#
# The client's command line for one of these runs is printed below: the same sweep on your own server
# is this command with your URL and model.

# %%
command = " ".join(["vllm bench serve", *phase_two[-1].args(servers["vLLM"], output_tokens)])
print(command.replace(servers["vLLM"].url, "$URL").replace(servers["vLLM"].model.source, "$TOKENIZER"))

# %%
# NBVAL_CHECK_OUTPUT
low, high = curve.groupby("engine").first(), curve.groupby("engine").last()
print((high.p90_ttft_ms > 2 * low.p90_ttft_ms).all(), (high.achieved_req_s < 0.9 * high.offered_req_s).all())

# %% [markdown]
# ## The knobs that bound the batch
#
# Each engine caps its batch with a few scheduler settings. The table reads their defaults from each
# engine's own code on this machine, and what this chapter's servers ran with (the cap of 8 set
# above). A larger cap raises the
# throughput the knee allows but lengthens each step, so every request's ITL grows; a cap on prompt
# tokens per step keeps a long prompt from stalling everyone else's decode (chapter 05).

# %%
pd.set_option("display.max_colwidth", 90)
knobs = sb.batch_knobs(sb.engine_batch_defaults(prof, kv_tokens=running["sglang"]["max_total_num_tokens"]), running)
results.save("serving_basics_knobs", knobs, prof)
knobs

# %% [markdown]
# ## What to remember
#
# - A request is one prefill step over its whole prompt, then one decode step per output token. TTFT
#   grows with the prompt; the gap between later tokens barely does.
# - A decode step reads all the weights for little arithmetic, so memory bandwidth sets a ceiling on
#   decode speed. Batching shares that read, and every other fixed cost of a step: the server's
#   tokens per second grow with the batch while each request slows far less.
# - Continuous batching lets requests join and leave at every step, which is why an engine can keep a
#   large batch and still answer a new request quickly.
# - Under an open-loop load, latency stays flat until the server's capacity and then climbs steeply;
#   size a server below its knee and watch p90 TTFT.
# - `--max-num-seqs` (vLLM) and `--max-running-requests` (SGLang) cap the batch: a larger cap gives
#   more throughput at the knee and slower tokens for each request. Choose the largest cap whose p50
#   TPOT stays within your objective, then find the knee with an open-loop sweep like the one above.

# %% [markdown]
# ## Exercises
#
# 1. (5 min, no engine) A 7-billion-parameter model in bfloat16 (2 bytes per weight) runs on a GPU
#    whose memory delivers 3.35 TB/s (an H100 SXM). What is the roofline bound on decode tokens per
#    second at batch 1, and at batch 32 if each request reads a KV cache of 1,000 tokens at 128 KiB
#    per token?
# 2. (20 min, no engine) The simulator used a made-up step cost. Fit one to vLLM from the
#    measurements above and run static and continuous batching again with it, at vLLM's measured
#    capacity. Does continuous batching still win on TTFT?
# 3. (15 min, no engine) What does a larger batch cap trade? Send 40 requests of the picture above
#    at 2, 4 and 8 per second to continuous batching with `max_batch` 2, 4 and 16; compare p90 TTFT
#    and TPOT.
#
# Fill in each stub, then run the check below it. The solutions are in the hidden cells.

# %%
# Exercise 1: your answer
from servelab.book import exercise_check
from servelab.measure.exercises import serving_basics as answers


def roofline_tokens_per_s(batch: int, context_tokens: int) -> float:
    """The whole server's decode tokens/s bound: `batch` requests, each reading `context_tokens` of KV."""
    raise NotImplementedError


# %%
exercise_check.check(roofline_tokens_per_s, answers.roofline_cases(), title="Exercise 1")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1
weights = 7e9 * 2
kv = 1000 * 128 * 1024


def roofline_tokens_per_s(batch: int, context_tokens: int) -> float:
    """Each step reads the weights once for the batch, and each request's KV, and makes `batch` tokens."""
    return batch * 3.35e12 / (weights + batch * context_tokens * 128 * 1024)


one, thirty_two = roofline_tokens_per_s(1, 0), roofline_tokens_per_s(32, 1000)
print(f"batch 1: at most {one:.0f} tokens/s; batch 32: at most {thirty_two:.0f} tokens/s for the whole server "
      f"({thirty_two / 32:.0f} per request): the KV cache of 32 requests ({32 * kv / 1e9:.1f} GB) now weighs "
      f"{32 * kv / weights:.0%} of the weights.")
exercise_check.check(roofline_tokens_per_s, answers.roofline_cases(), title="Solution 1")

# %%
# Exercise 2: your answer. Fit vLLM's step cost: the cost per prompt token from the TTFT of the shortest and the
# longest prompt (`prefill`), the cost per decoding request from the ITL at batch 1 and at the largest batch
# (`scaling.request_tok_s` is 1 / median ITL); the rest of the batch-1 ITL is the fixed step. Then simulate at
# vLLM's capacity (`reached["vllm"]`): `sim_requests` requests of `batch_prompt_tokens` tokens, answers of 4 to 40
# tokens, `max_batch=batch_cap`, objectives of ten times the batch-1 ITL for TTFT and twice the largest batch's
# ITL for TPOT.


def fit_cost(prefill: pd.DataFrame, scaling: pd.DataFrame) -> CostModel:
    """vLLM's step cost (context_token_s=0.0), from the rows of `prefill` and `scaling` whose engine is "vllm"."""
    raise NotImplementedError


# %%
exercise_check.check(fit_cost, answers.fit_cases(prefill, scaling), title="Exercise 2")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2


def fit_cost(prefill: pd.DataFrame, scaling: pd.DataFrame) -> CostModel:
    vllm_prefill = prefill[prefill.engine == "vllm"]
    slope_s = (vllm_prefill.ttft_ms.iloc[-1] - vllm_prefill.ttft_ms.iloc[0]) / 1000 / (
        vllm_prefill.prompt_tokens.iloc[-1] - vllm_prefill.prompt_tokens.iloc[0])
    vllm_scaling = scaling[scaling.engine == "vllm"]  # request_tok_s is 1 / median ITL
    itl_one, itl_top = 1 / vllm_scaling.request_tok_s.iloc[0], 1 / vllm_scaling.request_tok_s.iloc[-1]
    per_decode = max(0.0, (itl_top - itl_one) / (vllm_scaling.batch.iloc[-1] - 1))
    return CostModel(step_s=float(max(1e-4, itl_one - per_decode)), prefill_token_s=float(max(0.0, slope_s)),
                     decode_s=float(per_decode), context_token_s=0.0)


exercise_check.check(fit_cost, answers.fit_cases(prefill, scaling), title="Solution 2")
fitted = fit_cost(prefill, scaling)
vllm_scaling = scaling[scaling.engine == "vllm"]
itl_one, itl_top = 1 / vllm_scaling.request_tok_s.iloc[0], 1 / vllm_scaling.request_tok_s.iloc[-1]
vllm_capacity = float(reached["vllm"])
objectives = {"ttft_slo_s": 10 * itl_one, "tpot_slo_s": 2 * itl_top}
busy = poisson_arrivals(vllm_capacity, sim_requests, prompt_tokens=batch_prompt_tokens, output_tokens=(4, 40),
                        seed=seed)
again = {k: summarize(f(busy, fitted, max_batch=batch_cap), **objectives)
         for k, f in (("static", static), ("continuous", continuous))}
print(f"fitted: {fitted.step_s * 1e3:.1f} ms a step, {fitted.prefill_token_s * 1e3:.2f} ms a prompt token, "
      f"{fitted.decode_s * 1e3:.1f} ms a decoding request; {sim_requests} requests at {vllm_capacity:.2f} req/s; "
      f"objectives: TTFT {objectives['ttft_slo_s']:.2f} s, TPOT {objectives['tpot_slo_s'] * 1e3:.0f} ms")
print(pd.DataFrame(again).T[["ttft_p90_s", "tpot_p50_s", "output_tokens_per_s", "met_slo"]].round(3))
print("Continuous batching still has the lower p90 TTFT:", again["continuous"]["ttft_p90_s"]
      < again["static"]["ttft_p90_s"], "| At capacity the schedule changes throughput too (static batching leaves "
      "the slots of short answers empty):", again["continuous"]["output_tokens_per_s"]
      > again["static"]["output_tokens_per_s"])

# %%
# Exercise 3: your answer. Simulate with the chapter's `cost`, `slo` and `seed`: `poisson_arrivals(rate, 40,
# prompt_tokens=200, output_tokens=(4, 40), seed=seed)`, then `continuous(...)` and `summarize(...)`.


def cap_point(rate: float, cap: int) -> dict[str, float]:
    """{"ttft_p90_s": ..., "tpot_p50_s": ...} of 40 requests at `rate` per second with `max_batch=cap`."""
    raise NotImplementedError


# %%
exercise_check.check(cap_point, answers.cap_cases(cost, slo, seed), title="Exercise 3")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3


def cap_point(rate: float, cap: int) -> dict[str, float]:
    heavy = poisson_arrivals(rate, 40, prompt_tokens=200, output_tokens=(4, 40), seed=seed)
    return summarize(continuous(heavy, cost, max_batch=cap), **slo)


exercise_check.check(cap_point, answers.cap_cases(cost, slo, seed), title="Solution 3")
by_cap = pd.DataFrame([{"rate": rate, "cap": cap, **cap_point(rate, cap)} for rate in (2.0, 4.0, 8.0)
                       for cap in (2, 4, 16)])
print(by_cap.pivot(index="rate", columns="cap", values="ttft_p90_s").round(2).to_string(), "\n")
print(by_cap.pivot(index="rate", columns="cap", values="tpot_p50_s").round(3).to_string(), "\n")
top = by_cap[by_cap.rate == 8.0].set_index("cap")
print("At 8 requests/s a larger cap lowers p90 TTFT:", top.ttft_p90_s.is_monotonic_decreasing,
      "| raises each request's TPOT:", top.tpot_p50_s.is_monotonic_increasing)
print("A small cap makes requests queue (TTFT climbs) at a rate a larger cap still serves: the cap moves the knee to "
      "higher load, and pays for it with slower tokens for every request in the larger batch.")
