"""Markers: the wire format of the marker-topic queue.

Byte-compatible with kafka-mq-go's ``Marker`` v1 protobuf (proto3)::

    MessageID { int32 partition = 1; int64 offset = 2; }
    Marker    { Version version = 1; Type type = 2; MessageID message_id = 3;
                uint64 redeliver_after_ms = 4; bytes key = 5; bytes value = 6; }
    Type      { START = 0; END = 1; KEEPALIVE = 2; }

Two fields are ours, beyond the Go layout; a proto3 reader skips fields it does not know, so
markers stay readable both ways: ``uint32 delivery_attempt = 7`` and
``repeated Header headers = 8`` with ``Header { string key = 1; bytes value = 2; }``, which carry
the delivery count and the message's attributes through a redelivery.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.errors import DecodeError

__all__ = ["Marker", "MarkerType", "MessageId", "decode_marker", "encode_marker"]


class MarkerType(enum.IntEnum):
    """What a marker says about a message."""

    START = 0
    END = 1
    KEEPALIVE = 2


class MessageId(NamedTuple):
    """A message's identity: its partition and offset in the queue topic."""

    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker. START carries the message (key, value); KEEPALIVE a new timeout; END nothing."""

    type: MarkerType
    message_id: MessageId
    redeliver_after_ms: int = 0
    key: bytes = b""
    value: bytes = b""
    delivery_attempt: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)


def _varint(value: int, out: bytearray) -> None:
    if value < 0:
        value += 1 << 64  # two's complement, 10 bytes, as protobuf encodes negative int32/int64
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _field_varint(number: int, value: int, out: bytearray) -> None:
    if value:
        _varint(number << 3, out)
        _varint(value, out)


def _field_bytes(number: int, value: bytes, out: bytearray) -> None:
    _varint((number << 3) | 2, out)
    _varint(len(value), out)
    out += value


def encode_marker(marker: Marker) -> bytes:
    """Serialize ``marker`` (proto3: zero values are omitted)."""
    out = bytearray()
    _field_varint(2, int(marker.type), out)
    mid = bytearray()
    _field_varint(1, marker.message_id.partition, mid)
    _field_varint(2, marker.message_id.offset, mid)
    _field_bytes(3, bytes(mid), out)
    _field_varint(4, marker.redeliver_after_ms, out)
    if marker.key:
        _field_bytes(5, marker.key, out)
    if marker.value:
        _field_bytes(6, marker.value, out)
    _field_varint(7, marker.delivery_attempt, out)
    for name, value in marker.headers.items():
        header = bytearray()
        _field_bytes(1, name.encode(), header)
        _field_bytes(2, value.encode(), header)
        _field_bytes(8, bytes(header), out)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise DecodeError("truncated varint in marker")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long in marker")


def _signed(value: int, bits: int) -> int:
    value &= (1 << 64) - 1
    if value >= 1 << 63:
        value -= 1 << 64
    if bits == 32:
        value = ((value + (1 << 31)) % (1 << 32)) - (1 << 31)
    return value


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise DecodeError("truncated field in marker")
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise DecodeError(f"unsupported wire type {wire} in marker")
    return out


def decode_marker(data: bytes) -> Marker:
    """Parse a marker; unknown fields are skipped, malformed data raises DecodeError."""
    kind = 0
    partition = offset = redeliver = attempt = 0
    key = value = b""
    headers: dict[str, str] = {}
    try:
        for number, raw in _fields(data):
            if number == 1 and isinstance(raw, int) and raw != 0:
                raise DecodeError(f"unknown marker version {raw}")
            if number == 2 and isinstance(raw, int):
                kind = raw
            elif number == 3 and isinstance(raw, bytes):
                for sub, subraw in _fields(raw):
                    if sub == 1 and isinstance(subraw, int):
                        partition = _signed(subraw, 32)
                    elif sub == 2 and isinstance(subraw, int):
                        offset = _signed(subraw, 64)
            elif number == 4 and isinstance(raw, int):
                redeliver = raw
            elif number == 5 and isinstance(raw, bytes):
                key = raw
            elif number == 6 and isinstance(raw, bytes):
                value = raw
            elif number == 7 and isinstance(raw, int):
                attempt = raw
            elif number == 8 and isinstance(raw, bytes):
                parts = dict(_fields(raw))
                name, text = parts.get(1, b""), parts.get(2, b"")
                if isinstance(name, bytes) and isinstance(text, bytes):
                    headers[name.decode()] = text.decode()
        marker_type = MarkerType(kind)
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"malformed marker: {exc}") from exc
    return Marker(marker_type, MessageId(partition, offset), redeliver, key, value, attempt, headers)
