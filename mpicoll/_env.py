"""Environment variables that batch jobs set: read and checked in one way."""

from __future__ import annotations

import os

__all__ = ["positive_int"]


def positive_int(name: str, default: int = 0) -> int:
    """``$name`` as a positive integer, ``default`` when unset (0: "not set"); ValueError naming
    the variable for anything else."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"{name}={value!r}: expected a positive integer")
    return number
