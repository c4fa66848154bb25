"""Plugins: algorithms and codecs that other installed packages declare as entry points.

A package registers its own by declaring, in its metadata, an entry point in the group
``mpicoll.algorithms`` (naming an :class:`mpicoll.algorithm.Algorithm`) or ``mpicoll.codecs``
(naming a codec class), e.g. in its ``setup.cfg``::

    [options.entry_points]
    mpicoll.algorithms =
        pairwise = mypackage.pairwise:ALGORITHM

Each registry loads its group the first time it is asked for its contents (reading every
installed package's metadata takes ~30 ms, and importing the reader 20 ms more, which an
import of mpicoll need not pay).
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["load"]


def load(group: str, register: Callable[[Any], Any]) -> None:
    """``register`` what each entry point of ``group`` names."""
    from importlib.metadata import entry_points  # (20 ms to import: only when asked)
    for entry in entry_points(group=group):
        try:
            declared = entry.load()
        except Exception as error:
            raise ImportError(f"mpicoll: the plugin {entry.name!r} ({entry.value}, entry point "
                              f"group {group!r}) failed to load: {error}") from error
        register(declared)
