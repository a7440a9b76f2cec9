"""Codecs turn application values into payload bytes and back.

A codec is any object with ``encode(value) -> bytes`` and ``decode(data) -> value``. Failures
raise :class:`~broker.errors.EncodeError` / :class:`~broker.errors.DecodeError` with the
original exception chained.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, TypeVar

from broker.errors import DecodeError, EncodeError

__all__ = ["BytesCodec", "Codec", "JsonCodec", "MsgpackCodec", "StrCodec", "codec_by_name"]

T = TypeVar("T")


class Codec(Protocol[T]):
    """Encodes values of type ``T`` to bytes and decodes them back."""

    def encode(self, value: T) -> bytes:
        """The payload for ``value``."""

    def decode(self, data: bytes) -> T:
        """The value carried by ``data``."""


class BytesCodec:
    """Passes bytes through unchanged (bytearray and memoryview become bytes)."""

    def encode(self, value: bytes) -> bytes:
        """Return ``value`` as bytes."""
        if isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise EncodeError(f"BytesCodec encodes bytes, got {type(value).__name__}")

    def decode(self, data: bytes) -> bytes:
        """Return ``data`` unchanged."""
        return data


class StrCodec:
    """Text in the given encoding (UTF-8 by default)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def encode(self, value: str) -> bytes:
        """Encode ``value`` as text."""
        if not isinstance(value, str):
            raise EncodeError(f"StrCodec encodes str, got {type(value).__name__}")
        try:
            return value.encode(self.encoding)
        except UnicodeError as exc:
            raise EncodeError(f"cannot encode text as {self.encoding}: {exc}") from exc

    def decode(self, data: bytes) -> str:
        """Decode ``data`` as text."""
        try:
            return data.decode(self.encoding)
        except UnicodeError as exc:
            raise DecodeError(f"payload is not valid {self.encoding}: {exc}") from exc


class JsonCodec:
    """JSON documents, UTF-8 encoded, compact separators."""

    def __init__(self, *, sort_keys: bool = False) -> None:
        self.sort_keys = sort_keys

    def encode(self, value: Any) -> bytes:
        """Serialize ``value`` to JSON."""
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=self.sort_keys)
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"value is not JSON-serializable: {exc}") from exc
        return text.encode("utf-8")

    def decode(self, data: bytes) -> Any:
        """Parse a JSON payload."""
        try:
            return json.loads(data)
        except (ValueError, UnicodeError) as exc:
            raise DecodeError(f"payload is not valid JSON: {exc}") from exc


class MsgpackCodec:
    """MessagePack documents (binary, compact)."""

    def encode(self, value: Any) -> bytes:
        """Serialize ``value`` to MessagePack."""
        import msgpack

        try:
            data: bytes = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"value is not MessagePack-serializable: {exc}") from exc
        return data

    def decode(self, data: bytes) -> Any:
        """Parse a MessagePack payload."""
        import msgpack

        try:
            return msgpack.unpackb(data, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise DecodeError(f"payload is not valid MessagePack: {exc}") from exc


_BY_NAME: dict[str, type[Any]] = {
    "bytes": BytesCodec,
    "str": StrCodec,
    "json": JsonCodec,
    "msgpack": MsgpackCodec,
}


def codec_by_name(name: str) -> Codec[Any]:
    """The codec called ``name``: ``bytes``, ``str``, ``json`` or ``msgpack``."""
    try:
        cls = _BY_NAME[name]
    except KeyError:
        from broker.errors import ConfigError

        raise ConfigError(f"unknown codec {name!r}; choose one of {', '.join(sorted(_BY_NAME))}") from None
    codec: Codec[Any] = cls()
    return codec
