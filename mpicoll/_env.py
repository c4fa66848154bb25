"""Environment variables that batch jobs set: read and checked in one way."""

from __future__ import annotations

import os
from typing import Callable

__all__ = ["positive_int", "Settings", "settings", "reload", "on_change", "changed",
           "ALGORITHM_ENV", "CODEC_ENV", "SEGMENT_ENV", "TUNING_ENV", "AUTO_ENV",
           "DEFAULT_SEGMENT_BYTES"]

ALGORITHM_ENV = "MPICOLL_ALGORITHM"
CODEC_ENV = "MPICOLL_CODEC"
SEGMENT_ENV = "MPICOLL_TREE_SEGMENT"
TUNING_ENV = "MPICOLL_TUNING"
AUTO_ENV = "MPICOLL_AUTO"
DEFAULT_SEGMENT_BYTES = 256 * 1024


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


class Settings:
    """The variables calls consult, read once: a call must not pay ``os.environ`` (a
    microsecond each). ``mpicoll.reload_environment()`` reads them again."""

    __slots__ = ("algorithm", "codec", "segment_bytes", "tuning", "auto")

    def __init__(self) -> None:
        self.algorithm = os.environ.get(ALGORITHM_ENV, "auto")
        self.codec = os.environ.get(CODEC_ENV) or None
        self.segment_bytes = positive_int(SEGMENT_ENV, DEFAULT_SEGMENT_BYTES)
        self.tuning = os.environ.get(TUNING_ENV) or None
        self.auto = os.environ.get(AUTO_ENV) or "measure"
        if self.auto not in ("measure", "once", "model"):
            raise ValueError(f"{AUTO_ENV}={self.auto!r}: expected 'measure' (auto tries its "
                             "shortlist in real calls, and again where its choice slows "
                             "down), 'once' (tries, then keeps its choice) or 'model' (the "
                             "cost model's pick)")


_settings: Settings | None = None


def settings() -> Settings:
    """The variables as read at the first call since the last :func:`reload`."""
    global _settings
    if _settings is None:
        _settings = Settings()
    return _settings


def reload() -> None:
    """Read the variables again at the next call; what was derived from them is dropped."""
    global _settings
    _settings = None
    changed()


_listeners: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever what a call must do may have changed: the environment was
    read again, timing records began or ended, the watchdog started, a communicator forgot its
    verified kinds or was freed. Layers above keep what they derived from those (the fast
    path's shortcuts) and drop it here; the layers below only say that it changed."""
    _listeners.append(listener)


def changed() -> None:
    """Tell every :func:`on_change` listener that what a call must do may have changed."""
    for listener in _listeners:
        listener()
