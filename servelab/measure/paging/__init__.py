"""Chapter 03, paging: KV pressure, preemption and retraction, parallel sampling, block sizes.

Modules: ``block_size``, ``parallel_sampling``, ``pressure``, ``retraction``.
"""
