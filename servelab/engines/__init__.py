"""Layer 1, the real engines as servers: launch commands, lifecycle and guard, client, metrics, flag checks.

Imports only `servelab.machine`. The engine-side scripts (`engine_side/`) and the SGLang stand-in
(`sgl_kernel_stand_in/`) run inside the engines' own venvs and import nothing from servelab.
"""
