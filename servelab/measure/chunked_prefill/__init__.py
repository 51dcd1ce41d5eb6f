"""Chapter 05, chunked prefill: timed streams, calibration and the servers of every budget.

Modules: ``live``, ``streams``.
"""
