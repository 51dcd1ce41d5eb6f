"""Chapter 02, KV-cache memory: the pools both engines build from a budget.

Modules: ``capacity``.
"""
