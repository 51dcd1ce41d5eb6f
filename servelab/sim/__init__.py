"""Layer 1, simulators: the mechanisms built small, in the papers' vocabulary. Pure and typed.

Imports only `servelab.machine` (data files) and itself, never the engines: every result here can
be computed without a server. One module (or package) per chapter.
"""
