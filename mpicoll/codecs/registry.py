"""Codecs by name (for users and config) and by id (for frames), kept in step in one table."""

from __future__ import annotations

from .abc import Codec
from .bf16 import BF16
from .fp16 import FP16
from .int8 import Int8
from .sign import Sign
from .threshold import Threshold
from .topk import TopK
from .wire import CodecError

__all__ = ["get", "available", "from_config", "codec_class", "class_for_id"]

_CLASSES: tuple[type[Codec], ...] = (FP16, BF16, Int8, TopK, Threshold, Sign)
_BY_NAME = {cls.name: cls for cls in _CLASSES}
_BY_ID = {cls.codec_id: cls for cls in _CLASSES}
assert len(_BY_ID) == len(_CLASSES), "codec ids must be unique: they are written in frames"


def available() -> tuple[str, ...]:
    """Names of the registered codecs."""
    return tuple(_BY_NAME)


def codec_class(name: str) -> type[Codec]:
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown codec {name!r}; available: {', '.join(_BY_NAME)}") from None


def get(name: str, **params) -> Codec:
    """Return a new codec ``name`` built with ``params`` (see each codec's module)."""
    return codec_class(name)(**params)


def from_config(config: dict) -> Codec:
    """Rebuild a codec from ``codec.get_config()``."""
    params = dict(config)
    return get(params.pop("name"), **params)


def class_for_id(codec_id: int) -> type[Codec]:
    """The codec class that writes frames with ``codec_id``; CodecError for an unknown id."""
    try:
        return _BY_ID[codec_id]
    except KeyError:
        raise CodecError(f"unknown codec id {codec_id}") from None
