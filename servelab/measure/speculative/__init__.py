"""Chapter 06, speculative decoding: verification cost, live runs, load sweeps, GPU set-ups.

Modules: ``gpu``, ``live``, ``load``, ``setups``, ``verification``.
"""
