"""Integer helpers every layer uses: ceiling division and a checked integer argument."""

from __future__ import annotations

import operator


def ceil_div(a, b):
    """``ceil(a / b)`` for positive ``b``, exact for ints and elementwise for numpy integer arrays."""
    return -(-a // b)


def int_at_least(name: str, value: object, minimum: int, what: str = "") -> int:
    """``value`` as an int >= ``minimum`` (numpy integers welcome, bools not), or one ValueError naming it."""
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = None
    if number is None or isinstance(value, bool) or number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{f' ({what})' if what else ''}, got {value!r}")
    return number
