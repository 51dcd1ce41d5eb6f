"""Layer 3, book support: banner, provenance, results, plots, translations, quoted figures, running chapters.

May import every layer below. Chapters import `book`, `measure`, `sim` and `engines`; never `machine`.
"""
