"""Codecs goka ships that the core does not, and resolving a codec argument.

Edges accept a :class:`broker.codecs.Codec` instance or a codec name: ``bytes``, ``str``,
``json``, ``msgpack`` (the core's) or ``int64`` (goka's integer codec: decimal ASCII text,
so ``42`` is stored as ``b"42"`` and tables stay readable by goka services).
"""

from __future__ import annotations

from typing import Any

from broker.codecs import Codec, codec_by_name
from broker.errors import DecodeError, EncodeError

__all__ = ["Int64Codec", "resolve_codec"]


class Int64Codec:
    """Integers as decimal ASCII text (goka's ``codec.Int64``)."""

    def encode(self, value: int) -> bytes:
        """``42`` -> ``b"42"``."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise EncodeError(f"Int64Codec encodes int, got {type(value).__name__}")
        if not -(2**63) <= value < 2**63:
            raise EncodeError(f"{value} does not fit in 64 bits")
        return str(value).encode("ascii")

    def decode(self, data: bytes) -> int:
        """``b"42"`` -> ``42``."""
        try:
            return int(data)
        except ValueError as exc:
            raise DecodeError(f"payload is not a decimal integer: {data[:32]!r}") from exc


def resolve_codec(codec: Codec[Any] | str, where: str) -> Codec[Any]:
    """``codec`` itself, or the codec called ``codec``; ``where`` names the edge in errors."""
    from broker.backends.kafka.processor.errors import GraphError

    if isinstance(codec, str):
        if codec == "int64":
            return Int64Codec()
        try:
            return codec_by_name(codec)
        except ValueError as exc:
            raise GraphError(f"{where}: {exc}") from None
    if not callable(getattr(codec, "encode", None)) or not callable(getattr(codec, "decode", None)):
        raise GraphError(
            f"{where}: codec {codec!r} is not a codec (it needs encode(value) -> bytes and decode(bytes))"
        )
    return codec
