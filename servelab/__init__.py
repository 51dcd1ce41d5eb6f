"""servelab: the code behind the lab book's notebooks (no narrative lives here)."""

__version__ = "0.1.0"
