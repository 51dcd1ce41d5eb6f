"""Chapter 05's simulator: a step-level scheduler with a token budget per step, and what it costs.

A serving engine runs one forward pass (a *step*) after another. Each step has a token budget: vLLM's
``max_num_batched_tokens``, SGLang's ``chunked_prefill_size``. Running requests decode one token per
step; a new prompt must be prefilled before its first token. With chunked prefill a long prompt is cut
into pieces that fit the budget, so the steps stay short and the running streams keep receiving
tokens, at the price of a later first token for the long prompt. Without it, one step holds the whole
prompt and every stream stalls for it.

What is mirrored, and from where (vLLM 0.32.0, SGLang 0.5.23, read from the installed sources):

* vLLM V1, ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``): one budget shared by all
  requests; RUNNING requests first, in admission order (so streams already decoding are served before
  the later chunks of a long prompt admitted after them), then WAITING requests first come first
  served; each takes ``min(what it needs, long_prefill_token_threshold, budget left)``; the threshold
  only when more than one request is running or waiting; with chunked prefill off a prompt that does
  not fit the budget left waits (``break``). Defaults from ``vllm/config/scheduler.py``.
* SGLang, ``srt/managers/scheduler.py`` (``get_next_batch_to_run``, ``_get_new_batch_prefill_raw``) and
  ``srt/managers/schedule_policy.py`` (``PrefillAdder.add_chunked_req``, ``add_one_req``): a step is a
  prefill batch or a decode batch, prefill first; the chunked request continues before waiting
  requests; at most one chunked request; decodes join a prefill batch only with
  ``--enable-mixed-chunk``, and then take their count off the chunk budget.

Simplifications (a chapter using this must state them):

* No preemption and no KV-cache limit: memory is never short, nothing is evicted or recomputed.
* No prefix caching: every prompt token is computed.
* Requests reach the scheduler only at step boundaries (a request arriving mid-step waits for the
  step to end), and a step's tokens reach the client at its end, with no streaming delay.
* The cost of a step is a fixed linear function of its contents (``cost``), the same all run long:
  no warm-up, no noise, no other process competing; a prefill chunk costs the same wherever it lies
  in its prompt; the per-request overhead is one constant delay before the scheduler.
* vLLM's scheduler is synchronous (as on CPU, where ``platforms/cpu.py`` turns async scheduling off):
  a step is planned after the previous one finished. No speculative decoding, no multimodal inputs, no
  ``long_prefill_token_threshold_adaptive``; SGLang's page size is 1 and its memory checks always pass.
* Every request emits exactly its ``output_tokens`` (no early end of sequence).

Modules, one concept each: ``policies`` (who gets which tokens of a step, per engine), ``cost``
(the step cost model and its fit), ``simulate`` (the step loop and its timeline), ``latency`` (ITL
statistics over a window, shared with the measurements), ``scenario`` (streams plus one long prompt,
and the TTFT/ITL trade-off over budgets).
"""

from servelab.sim.chunked_prefill.cost import COEFFICIENTS, TERMS, CostModel, FitReport, StepSample, fit_cost_model
from servelab.sim.chunked_prefill.latency import SUMMARY_KEYS, gaps_in_window, itl_summary
from servelab.sim.chunked_prefill.policies import SchedulerConfig, plan_sglang, plan_vllm
from servelab.sim.chunked_prefill.scenario import LONG, Scenario, run_scenario, stream_name, tradeoff, window_stats
from servelab.sim.chunked_prefill.simulate import Request, SimResult, simulate

__all__ = ["COEFFICIENTS", "LONG", "SUMMARY_KEYS", "TERMS", "CostModel", "FitReport", "Request", "Scenario",
           "SchedulerConfig", "SimResult", "StepSample", "fit_cost_model", "gaps_in_window", "itl_summary",
           "plan_sglang", "plan_vllm", "run_scenario", "simulate", "stream_name", "tradeoff", "window_stats"]
