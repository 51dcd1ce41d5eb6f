"""Layer 2, measurements: live experiments and workloads on the real engines, next to `sim`'s predictions.

Imports `machine`, `engines` and `sim`. One module per chapter.
"""
