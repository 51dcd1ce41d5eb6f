"""Chapter 03's simulator. Where KV memory goes: a request-level simulator of three ways to reserve KV cache.

Every policy below serves the same seeded workload with the same scheduler: first come, first served,
iteration-level ("continuous") batching, one new token per running request per step, memory freed the
moment a request finishes. Only the way KV memory is reserved differs:

``max_len``
    One contiguous chunk of ``max_len`` tokens per request, reserved at admission. What servers did
    before paging (FasterTransformer, Orca-style systems; the paper's "Orca (Max)"): the output length
    is unknown, so reserve the worst case.
``exact``
    One contiguous chunk of exactly ``prompt + output`` tokens: an oracle that knows the output length
    in advance (the paper's "Orca (Oracle)"; impossible in practice). Chunks differ in size, so they are
    placed by a first-fit allocator over a token-addressed memory and the holes between them are real.
``paged:<block_size>``
    vLLM's PagedAttention, through :class:`~servelab.sim.paging.block_pool.BlockAllocator`: blocks are taken
    one at a time as the sequence grows. When the pool runs dry the most recently admitted request is
    preempted (its blocks freed, its KV recomputed when it is readmitted), as vLLM does.

Each step, every token slot of the KV capacity is in exactly one of six states, and the summary reports
their time averages (tokens), which add up to the capacity:

``used``                 holds the KV of a token.
``reserved_for_future``  reserved by a running request, empty now, filled before it finishes.
``never_used``           reserved by a running request and never filled (over-reservation).
``external_frag``        free while the next request in line is refused although the total free memory
                         would hold it: the free memory is cut into holes too small for it. Paging has
                         none by construction: any free block fits anywhere.
``stranded``             free while the next request is refused because the total free memory is too
                         small for it (plus, for paging, the ``capacity % block_size`` slots no block
                         can use). With ``max_len`` it is the tail that no whole chunk fits in.
``idle``                 free with nobody waiting: spare capacity, not waste.

``internal_frag = reserved_for_future + never_used`` (reserved inside a request but not holding KV) and
``wasted = internal_frag + external_frag``. The paper's Fig. 2 splits memory the same way ("token
states", "reservation", "internal frag.", "external frag. & others"); see
:data:`servelab.book.quoted_figures.PAPER_FIGURES`.

Averaged over a whole run these include the start and the drain at the end, when nobody waits and
memory sits idle. ``<component>_pct_saturated`` averages only the steps in which a request was waiting
for memory. Reading the paper's Fig. 2 ("average percentage of memory wastes ... during the experiment")
as this saturated regime is our interpretation, not the paper's stated method.

Simplifications, on purpose: a step is one decoding iteration and costs the same whatever is in it, so
prefill is free and so is the recomputation of a preempted request (which therefore costs memory, never
time: the simulator preempts freely); the point is memory, not latency. Arrivals come faster than any
policy serves them, so the queue is a backlog; the spread of the lengths (``sigma``) is our choice.
Run ``python -m servelab.sim.paging`` for the default scenario.

Modules, one concept each: ``block_pool`` (vLLM's block allocator), ``requests`` (the workload),
``policies`` (reservation policies), ``contiguous`` and ``paged`` (the two ways to serve), ``trace`` (what a
run leaves behind), ``accounting`` (where every token slot went), ``compare`` (policies side by side).
"""

from servelab.sim.paging.accounting import COMPONENTS, SimResult, expected_last_block_waste_pct
from servelab.sim.paging.block_pool import BlockAllocator, CopyOnWrite, OutOfBlocks
from servelab.sim.paging.compare import SUMMARY_COLUMNS, Comparison, compare_policies, default_scenario, simulate
from servelab.sim.paging.parallel_sampling import parallel_sampling_blocks
from servelab.sim.paging.policies import Policy, parse_policy
from servelab.sim.paging.requests import (
    DEFAULT_CAPACITY,
    DEFAULT_MAX_LEN,
    DEFAULT_POLICIES,
    DEFAULT_SIGMA,
    sample_requests,
)

__all__ = ["COMPONENTS", "DEFAULT_CAPACITY", "DEFAULT_MAX_LEN", "DEFAULT_POLICIES", "DEFAULT_SIGMA",
           "SUMMARY_COLUMNS", "BlockAllocator", "Comparison", "CopyOnWrite", "OutOfBlocks", "Policy", "SimResult",
           "compare_policies", "default_scenario", "expected_last_block_waste_pct", "parallel_sampling_blocks",
           "parse_policy", "sample_requests", "simulate"]
