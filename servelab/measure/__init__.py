"""Layer 2, measurements: live experiments and workloads on the real engines, next to `sim`'s predictions.

Imports `machine`, `engines` and `sim`. One subpackage per mechanism, as `sim` has: `setup` (chapter 00),
`batching` (01), `kv_memory` (02), `paging` (03), `prefix_cache` (04), `chunked_prefill` (05), `speculative` (06)
and `deploying` (07); beside them what several chapters share: `lineup` (servers one after the other or side by
side, in rounds), `rounds` (what every round agrees on), `workloads` (the prompts) and `chapter_servers` (the
servers each chapter starts, as data).
"""
