"""Chapter 01, how an engine serves requests: prefill and decode, batches, load and the batch knobs.

Modules: ``serving``.
"""
