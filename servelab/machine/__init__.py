"""Layer 0, this machine: paths, data files, the hardware probe, profiles, engine venvs, models.

Imports nothing from the other layers. Notebooks do not import it directly: a chapter gets its
profile from `servelab.book.banner.start` and everything else through `engines` and `measure`.
"""
