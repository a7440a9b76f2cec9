"""Key and value codecs of the Kafka helpers: names or ``broker.codecs`` objects.

``"str"`` is :class:`broker.codecs.StrCodec`, which refuses anything but ``str`` (raising
``EncodeError`` naming the type it got) instead of stringifying it; ``"json"``, ``"msgpack"`` and
``"bytes"`` are the other built-ins, and any object with ``encode``/``decode`` works too.
"""

from __future__ import annotations

from typing import Any

from broker.codecs import Codec, codec_by_name

__all__ = ["resolve_codec"]


def resolve_codec(codec: str | Codec[Any]) -> Codec[Any]:
    """The codec named ``codec`` (``str``, ``json``, ``msgpack``, ``bytes``), or ``codec`` itself."""
    if isinstance(codec, str):
        return codec_by_name(codec)
    if not (callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))):
        raise TypeError(f"a codec needs encode() and decode(), got {type(codec).__name__}")
    return codec
