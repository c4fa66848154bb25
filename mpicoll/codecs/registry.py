"""Codecs by name (for users, config and spec strings) and by id (for frames).

Every codec is registered here: a new codec is a module with its
:class:`~mpicoll.codecs.abc.Codec` subclass and one ``register`` line at the end of this one.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .. import _plugins
from .abc import Codec
from .bf16 import BF16
from .feedback import ErrorFeedback
from .fp16 import FP16
from .int8 import Int8
from .sign import Sign
from .threshold import Threshold
from .topk import TopK
from .wire import CodecError

__all__ = ["UnknownCodecError", "available", "class_for_id", "codec_class", "from_config", "get",
           "parse", "register", "spec"]

_MAX_ID = 255  # frames hold the id in one byte
_NO_CODEC = ("", "none")
_FEEDBACK = "+ef"

_BY_NAME: dict[str, type[Codec]] = {}
_BY_ID: dict[int, type[Codec]] = {}
PLUGINS = "mpicoll.codecs"  # the entry point group other packages' codec classes are in
_plugins_loaded = False

CodecClass = TypeVar("CodecClass", bound=type[Codec])


class UnknownCodecError(ValueError):
    """No codec is registered under a name."""


def register(cls: CodecClass) -> CodecClass:
    """Register ``cls`` under its ``name`` and ``codec_id`` and return it (a class decorator).

    ValueError when either is taken (the name would shadow a codec, the id would make its frames
    decode as another codec's), when the id does not fit the frame's one byte, or when a spec
    string could not name the codec. Nothing is registered then.
    """
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise TypeError(f"codecs are Codec subclasses, not {cls!r}")
    if cls.name in _NO_CODEC or "+" in cls.name:
        raise ValueError(f"codec name {cls.name!r} would not read back from a spec string")
    if not 1 <= cls.codec_id <= _MAX_ID:
        raise ValueError(f"codec id must be in 1..{_MAX_ID}, not {cls.codec_id}")
    if cls.name in _BY_NAME:
        raise ValueError(f"codec name {cls.name!r} is taken by {_BY_NAME[cls.name].__qualname__}")
    if cls.codec_id in _BY_ID:
        raise ValueError(f"codec id {cls.codec_id} of {cls.__qualname__} is taken by "
                         f"{_BY_ID[cls.codec_id].__qualname__}")
    _BY_NAME[cls.name] = cls
    _BY_ID[cls.codec_id] = cls
    return cls


def _load_plugins() -> None:
    """Register the installed plugins' codecs (:mod:`mpicoll._plugins`), once."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        _plugins.load(PLUGINS, register)


def available() -> tuple[str, ...]:
    """Names of the registered codecs (a plugin's too)."""
    _load_plugins()
    return tuple(_BY_NAME)


def codec_class(name: str) -> type[Codec]:
    """The codec class registered as ``name``; UnknownCodecError for any other name."""
    cls = _BY_NAME.get(name) if isinstance(name, str) else None
    if cls is None and isinstance(name, str):
        _load_plugins()
        cls = _BY_NAME.get(name)
    if cls is None:
        raise UnknownCodecError(f"unknown codec {name!r}; available: {', '.join(available())}")
    return cls


def get(name: str, **params: Any) -> Codec:
    """Return a new codec ``name`` built with ``params`` (see each codec's module)."""
    return codec_class(name)(**params)


def from_config(config: dict[str, Any]) -> Codec:
    """Rebuild a codec from ``codec.get_config()``."""
    params = dict(config)
    return get(params.pop("name"), **params)


def class_for_id(codec_id: int) -> type[Codec]:
    """The codec class that writes frames with ``codec_id``; CodecError for an unknown id."""
    if codec_id not in _BY_ID:
        _load_plugins()
        if codec_id not in _BY_ID:
            raise CodecError(f"unknown codec id {codec_id}")
    return _BY_ID[codec_id]


def parse(spec: str) -> Codec | ErrorFeedback | None:
    """Build the codec a spec string names, as command-line options give them: ``"int8"``,
    ``"int8+ef"`` for int8 inside :class:`~mpicoll.codecs.ErrorFeedback`, and ``""`` or
    ``"none"`` for no codec."""
    if spec in _NO_CODEC:
        return None
    name, plus, suffix = spec.partition("+")
    if plus and plus + suffix != _FEEDBACK:
        raise ValueError(f"codec {spec!r}: the only suffix is {_FEEDBACK!r} (error feedback)")
    codec = get(name)
    return ErrorFeedback(codec) if plus else codec


def spec(codec: Codec | ErrorFeedback | None) -> str:
    """The spec string :func:`parse` reads back into a codec of the same name (parameters and
    state are not in it: see ``get_config``); ``""`` for None."""
    if codec is None:
        return ""
    if isinstance(codec, ErrorFeedback):
        return codec.codec.name + _FEEDBACK
    if isinstance(codec, Codec):
        return codec.name
    raise TypeError(f"spec takes a codec, an ErrorFeedback or None, not {type(codec).__name__}")


register(FP16)
register(BF16)
register(Int8)
register(TopK)
register(Threshold)
register(Sign)
