"""Chapter 00, setting up: the checks both engines pass and a launch by hand.

Modules: ``by_hand``, ``check``. What SGLang's frontend programs leave in its cache is
``servelab.measure.prefix_cache.frontend_cache``.
"""
