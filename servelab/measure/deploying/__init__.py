"""Chapter 07, choosing and deploying: one load generator for both engines, deployment recipes.

Modules: ``head_to_head``, ``recipes``.
"""
