"""The serving-basics chapter's simulator: static against continuous (iteration-level) batching.

An engine runs one forward pass, a *step*, after another. A request's prompt is computed in one step
(its *prefill*, which gives its first token); after that it gains one token per step it takes part in
(*decode*). The two schedulers differ in when requests may join and leave the running batch:

* **static** batching forms a batch from the requests waiting when the last batch finished and runs
  it until its longest request ends; a request that finishes early leaves its slot empty, and a
  request that arrives meanwhile waits for the whole batch;
* **continuous** batching (Orca, OSDI 2022: iteration-level scheduling) decides at every step:
  finished requests leave, waiting ones join (up to ``max_batch`` running requests and
  ``max_prefill_tokens`` prompt tokens per step), and every running request decodes.

What is left out, on purpose: the prompt is never split across steps (no chunked prefill: that is
chapter 05's), the KV cache never runs out (no preemption: chapter 03's), every request generates
exactly its ``output_tokens`` (no early stop), prefill and decodes of one step cost what
``CostModel.step_seconds`` says (a linear model, fitted or given), and requests reach the scheduler
the moment they arrive (no HTTP or tokenizer time).
"""

from servelab.sim.batching.arrivals import Request, poisson_arrivals
from servelab.sim.batching.schedule import Served, continuous, static
from servelab.sim.batching.summary import summarize

__all__ = ["Request", "Served", "continuous", "poisson_arrivals", "static", "summarize"]
