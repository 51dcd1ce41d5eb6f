"""Referee: SGLang's own scheduling policies ordering one waiting queue; one JSON document on stdout.

Runs inside SGLang's venv with no GPU, no model and no server. The prefix cache is the class a live
SGLang server builds for a plain decoder model (``UnifiedRadixCache`` with the FULL component only:
``default_radix_cache_factory`` in ``sglang/srt/mem_cache/registry.py``), holding the warm-up prompt's
tokens. Each waiting request is an SGLang ``Req`` that entered the queue in arrival order, and each
policy is ``SchedulePolicy(policy, tree_cache, ...)`` from ``sglang/srt/managers/schedule_policy.py``,
whose ``calc_priority`` sorts the queue in place, as the scheduler calls it once per scheduling round.

Imports SGLang first, then reads on stdin {"warm": [ids], "names": [...], "prompts": [[ids], ...], "page_size": n,
"max_new_tokens": n, "waited_tokens": n, "seed": n} and runs three cases:

- "burst": the queue as it arrived, the radix cache on;
- "padded": the same queue followed by short unrelated requests, one more waiting request in all
  than ``WAITING_QUEUE_PREFIX_MATCH_MAX`` (the order of the first requests is reported);
- "radix off": the queue, the cache built with ``disable=True`` (``--disable-radix-cache``).

``hrrn`` runs twice: as the burst arrives (every request entered the queue at the same count of
prefilled tokens, so none has waited for any) and "hrrn, waited", as if ``waited_tokens`` prefill
tokens had been processed since. Request ids are seeded random hex strings, as the server draws
``uuid.uuid4().hex``. Prints {"sglang", "import_s", "run_s", "tree", "constants", "names", "matched",
"runs": [{"case", "policy", "active", "order", "deprioritized", "error", "cause"}], "skipped"}
(``error``: the message of a policy SGLang refused; ``cause``: the first exception in its chain). Imports
nothing from servelab.
"""

from __future__ import annotations

import json
import random
import sys
import time
from array import array

SKIPPED = {
    "random": "shuffles the queue with random.shuffle on every round (unseeded in SGLang): no order to report",
    "routing-key": "sorts by routing keys of a running batch; with no running batch calc_priority leaves the "
                   "queue as it is",
}


class _Allocator:
    """What the tree asks of a KV allocator here: a device, and freeing (nothing to free)."""

    device = "cpu"

    def free(self, *args, **kwargs):
        return None

    def free_segment(self, *args, **kwargs):
        return None


def main() -> None:
    started = time.perf_counter()
    import sglang
    import torch
    from sglang.srt.managers import schedule_policy as sp
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.common import match_kv_cache
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.runtime_context import get_context
    from sglang.srt.sampling.sampling_params import SamplingParams

    # calc_priority reads the server's settings (get_disagg(), get_memory()); SGLang's own way to
    # publish the defaults without a model, as its tests do.
    get_context().override_server_args().install()

    imported = time.perf_counter() - started
    request = json.load(sys.stdin)  # after the imports: the caller may start this script before it has the input
    started = time.perf_counter()
    warm, names, prompts = request["warm"], list(request["names"]), [list(p) for p in request["prompts"]]
    if len(names) != len(prompts) or len(set(names)) != len(names):
        raise SystemExit(f"need one distinct name per prompt; got {len(names)} names for {len(prompts)} prompts")
    page = int(request.get("page_size", 1))
    max_new = int(request.get("max_new_tokens", 1))
    waited = int(request.get("waited_tokens", len(warm)))
    rng = random.Random(request.get("seed", 0))
    rids = {n: f"{rng.getrandbits(128):032x}" for n in names}

    class Recording(sp.SchedulePolicy):
        """SchedulePolicy that keeps the set its in-batch prefix check deprioritised this round."""

        deprioritized: set = set()

        def _compute_prefix_matches(self, waiting_queue, policy):
            self.deprioritized = super()._compute_prefix_matches(waiting_queue, policy)
            return self.deprioritized

    def tree(disable: bool):
        params = CacheInitParams(disable=disable, req_to_token_pool=None, token_to_kv_pool_allocator=_Allocator(),
                                 page_size=page, tree_components=(ComponentType.FULL,))
        cache = UnifiedRadixCache(params)
        whole = len(warm) // page * page  # the tree keeps whole pages
        cache.insert(InsertParams(key=RadixKey(array("q", warm[:whole])), value=torch.arange(whole)))
        return cache

    def queue(pad: int) -> list:
        reqs = []
        for i, (name, ids) in enumerate([*zip(names, prompts, strict=True),
                                         *((f"pad-{k}", [100 + k] * 8) for k in range(pad))]):
            r = Req(rids.get(name, f"{rng.getrandbits(128):032x}"), "", array("q", ids),
                    SamplingParams(max_new_tokens=max_new))
            r.name = name
            r.time_stats.set_wait_queue_entry_time(1.0 + i)
            r.arrival_processed_tokens = len(warm)  # the warm-up was prefilled, nothing since
            reqs.append(r)
        return reqs

    limit = sp.WAITING_QUEUE_PREFIX_MATCH_MAX
    policies = [p.value for p in sp.CacheAgnosticPolicy if p.value not in SKIPPED]
    policies += [p.value for p in sp.CacheAwarePolicy]
    cases = {"burst": (False, 0), "padded": (False, max(0, limit + 1 - len(names))), "radix off": (True, 0)}
    runs = []
    for case, (disable, pad) in cases.items():
        for policy in policies + ["hrrn, waited"]:
            name = policy.split(",")[0]
            row = {"case": case, "policy": policy, "active": None, "order": [], "deprioritized": [], "error": None,
                   "cause": None}
            try:
                chooser = Recording(name, tree(disable), False, False, False)
            except ValueError as error:
                cause = error
                while cause.__context__ is not None:  # the first error raised, under the ones that replaced it
                    cause = cause.__context__
                runs.append({**row, "error": str(error), "cause": str(cause)})
                continue
            waiting = queue(pad)
            row["active"] = chooser._determine_active_policy(waiting).value
            processed = len(warm) + (waited if policy == "hrrn, waited" else 0)
            chooser.calc_priority(waiting, None, processed_tokens=processed)
            row["order"] = [r.name for r in waiting if r.name in rids]
            row["deprioritized"] = [r.name for r in waiting if r.rid in chooser.deprioritized and r.name in rids]
            runs.append(row)
    cache = tree(False)
    matched = {}
    for r in queue(0):
        match_kv_cache(r, cache)
        matched[r.name] = int(r.num_matched_prefix_tokens)
    print(json.dumps({
        "sglang": sglang.__version__, "import_s": round(imported, 1), "run_s": round(time.perf_counter() - started, 2),
        "tree": f"{type(cache).__name__} ({type(cache.tree_core).__name__})",
        "constants": {k: getattr(sp, k) for k in ("WAITING_QUEUE_PREFIX_MATCH_MAX",
                                                  "IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD",
                                                  "IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD")},
        "names": names, "matched": matched, "runs": runs, "skipped": SKIPPED}))


if __name__ == "__main__":
    main()
