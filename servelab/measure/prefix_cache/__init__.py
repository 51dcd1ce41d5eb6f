"""Chapter 04, prefix caching (and chapter 00's frontend programs): workloads, the engines' hits, referees,
bursts, salts, scheduling policies, SGLang's frontend programs and their fork.

Modules: ``agent_fork``, ``analysis``, ``burst``, ``frontend_cache``, ``live``, ``policies``, ``referees``, ``salt``,
``scenarios``, ``workloads``.
"""
