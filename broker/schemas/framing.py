"""The Confluent wire format, in plain Python (no SDK): what a framed payload and its headers hold.

A registry-framed payload is either

- ``0x00`` (magic byte 0), the schema id as a 4-byte big-endian unsigned int, then the encoded
  data (Avro binary, Protobuf message indexes + message, JSON text): the 5-byte header; or
- the bare encoded data, with the schema's GUID in a header: ``__value_schema_id`` (or
  ``__key_schema_id`` for a key) holding ``0x01`` (magic byte 1) and the GUID's 16 bytes (then, for
  Protobuf, the message indexes), as recent Confluent serializers write it with
  ``header_schema_id_serializer``.

Protobuf data starts with the message indexes (the path of the message type in its ``.proto``
file): a zig-zag varint count and that many zig-zag varint indexes, or one ``0x00`` byte for the
common ``[0]`` (the first top-level message).

Header values travel as text in portable attributes. On Kafka a binary header value is the text of
its bytes with surrogate escapes (the backend sends those bytes back unchanged); on brokers whose
headers are text only the GUID is written as its canonical 36-character text (Protobuf message
indexes are then not carried: our readers parse into the binding's class). :func:`guid_from_header`
reads both.
"""

from __future__ import annotations

import uuid
from typing import Final

__all__ = [
    "KEY_SCHEMA_ID",
    "MAGIC_GUID",
    "MAGIC_ID",
    "VALUE_SCHEMA_ID",
    "guid_from_header",
    "guid_header",
    "header_bytes",
    "message_indexes",
    "schema_id",
    "text_of_bytes",
]

#: Magic byte of a payload prefixed with a 4-byte schema id.
MAGIC_ID: Final = 0
#: Magic byte of a schema GUID (16 bytes follow) in a header.
MAGIC_GUID: Final = 1
#: The header holding the schema GUID of a value.
VALUE_SCHEMA_ID: Final = "__value_schema_id"
#: The header holding the schema GUID of a key.
KEY_SCHEMA_ID: Final = "__key_schema_id"


def schema_id(data: bytes) -> int | None:
    """The schema id of a payload framed with the 5-byte header, None when it has none."""
    if len(data) < 5 or data[0] != MAGIC_ID:
        return None
    return int.from_bytes(data[1:5], "big")


def text_of_bytes(data: bytes) -> str:
    """``data`` as attribute text that the Kafka backend sends back as the same bytes."""
    return data.decode("utf-8", "surrogateescape")


def guid_header(guid: str, *, binary: bool) -> str:
    """The header value carrying ``guid``: Confluent's binary form (as surrogate-escaped text) when
    ``binary``, else the GUID's canonical text."""
    if not binary:
        return str(uuid.UUID(guid))
    return text_of_bytes(bytes([MAGIC_GUID]) + uuid.UUID(guid).bytes)


def header_bytes(value: str) -> bytes | None:
    """The binary form of a schema-id header value (``0x01``, the GUID, and for Protobuf the message
    indexes), from either form; None when it holds no GUID."""
    if len(value) == 36:
        try:
            return bytes([MAGIC_GUID]) + uuid.UUID(value).bytes
        except ValueError:
            return None
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None
    if len(raw) < 17 or raw[0] != MAGIC_GUID:
        return None
    return raw


def guid_from_header(value: str) -> str | None:
    """The GUID a schema-id header carries (binary or text form); None for anything else."""
    raw = header_bytes(value)
    return None if raw is None else str(uuid.UUID(bytes=raw[1:17]))


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A zig-zag varint of ``data`` at ``at``: (value, next position)."""
    shift = result = 0
    while True:
        if at >= len(data):
            raise ValueError("the payload ends inside a varint")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("a varint is longer than 64 bits")
    return (result >> 1) ^ -(result & 1), at


def message_indexes(data: bytes, at: int = 0) -> tuple[list[int], int]:
    """The Protobuf message indexes at ``data[at:]`` and where the message starts."""
    count, at = _varint(data, at)
    if count == 0:
        return [0], at
    if count < 0 or count > 64:
        raise ValueError(f"implausible message index count {count}")
    indexes = []
    for _ in range(count):
        index, at = _varint(data, at)
        indexes.append(index)
    return indexes, at
