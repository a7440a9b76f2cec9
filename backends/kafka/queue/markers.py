"""Markers: the wire format of the marker-topic queue.

Wire-compatible with kafka-mq-go's ``Marker`` v1 protobuf (proto3)::

    MessageID { int32 partition = 1; int64 offset = 2; }
    Marker    { Version version = 1; Type type = 2; MessageID message_id = 3;
                uint64 redeliver_after_ms = 4; bytes key = 5; bytes value = 6; }
    Type      { START = 0; END = 1; KEEPALIVE = 2; }

Two fields are ours, beyond the Go layout; a proto3 reader skips fields it does not know, so
markers stay readable both ways: ``uint32 delivery_attempt = 7`` and
``repeated Header headers = 8`` with ``Header { string key = 1; bytes value = 2; }``, which carry
the delivery count and the message's attributes through a redelivery.

Batched markers (``version = 1``, ours; kafka-mq-go knows only ``V1 = 0``) say the same for many
messages at once: one START for a fetched batch, one END for the messages acked together::

    IdRange { int32 partition = 1; int64 first = 2; int64 last = 3; }   // inclusive
    Marker  { ...; repeated IdRange ranges = 9;                       // version = 1: no message_id,
              bool prefetched = 10; Handout handout = 11; }           //   key or value
    Handout { NONE = 0; HANDED = 1; RETURNED = 2; }

A batched START carries no payload: a redelivering tracker reads the message back from the queue
topic at its offset. A kafka-mq-go tracker cannot use batched markers, and must not mistake one
for its own: read as a Go ``Marker``, a batched START is a START without a message id, on which
its tracker crashed. So batched markers carry, right after ``version``, a field numbered 0 (two
zero bytes), which protobuf decoders refuse: kafka-mq-go's tracker logs "Could not unmarshal
marker" and skips them. Ours skip field 0 like any unknown field (older versions of this queue
read these markers too). Sharing topics with a Go fleet needs per-message markers
(``QueueSettings.go_fleet``).

Hand-out marks (batched only): a consumer that writes them STARTs a fetched batch with
``prefetched`` set, and writes a KEEPALIVE with ``handout = HANDED`` for messages before its
application sees them (``RETURNED`` gives back ones marked and never seen). A tracker redelivers a
message that was never marked handed without counting a delivery attempt. A START without
``prefetched`` (older writers) counts, as before.
"""

from __future__ import annotations

import abc
import asyncio
import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, cast

from broker import Record
from broker.backends.kafka.queue.settings import HEADER_ATTEMPT, QueueSettings
from broker.errors import DecodeError
from broker.log import Log, TopicPartition

__all__ = [
    "BatchMarker",
    "BatchedMarkers",
    "Handout",
    "Marker",
    "MarkerFormat",
    "MarkerProducer",
    "MarkerType",
    "MessageId",
    "OffsetRange",
    "PerMessageMarkers",
    "decode",
    "decode_marker",
    "encode_batch_marker",
    "encode_id_marker",
    "encode_marker",
    "encode_start",
    "marker_format_for",
    "ranges_of",
    "ranges_reader",
]


class MarkerType(enum.IntEnum):
    """What a marker says about a message."""

    START = 0
    END = 1
    KEEPALIVE = 2


class Handout(enum.IntEnum):
    """What a batched KEEPALIVE says about the hand-out of its messages to the application."""

    NONE = 0
    #: The messages are (about to be) seen by the application: a redelivery counts an attempt.
    HANDED = 1
    #: The messages were marked handed and given back unseen: a redelivery does not count.
    RETURNED = 2


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


#: ``(partition, first offset, last offset)`` of the queue topic, both ends included.
OffsetRange = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class BatchMarker:
    """A batched marker: one START, KEEPALIVE or END for every message in ``ranges``.

    ``prefetched`` (START): hand-out marks follow, so a redelivery counts an attempt only for
    messages marked handed. ``handout`` (KEEPALIVE): the messages were handed out, or returned.
    """

    type: MarkerType
    ranges: tuple[OffsetRange, ...]
    redeliver_after_ms: int = 0
    prefetched: bool = False
    handout: Handout = Handout.NONE

    def ids(self) -> list[MessageId]:
        """Every message id the marker names, in order."""
        return [MessageId(p, o) for p, first, last in self.ranges for o in range(first, last + 1)]


def ranges_of(ids: Iterable[tuple[int, int]]) -> list[OffsetRange]:
    """``(partition, offset)`` pairs as the fewest ranges (sorted; a repeated id counts once)."""
    out: list[OffsetRange] = []
    partition = first = last = -1
    started = False
    for p, offset in sorted(ids):
        if started and p == partition and offset <= last + 1:
            last = max(last, offset)
            continue
        if started:
            out.append((partition, first, last))
        partition, first, last, started = p, offset, offset, True
    if started:
        out.append((partition, first, last))
    return out


def ranges_reader(
    partition: Callable[[Any], int], offset: Callable[[Any], int]
) -> Callable[[Sequence[Any]], list[OffsetRange]]:
    """A function giving the offsets of distinct records as the fewest ranges (what ``ranges_of``
    gives), reading each record's ``partition`` and ``offset`` with the functions given.

    One range, without sorting, in the common case (one partition, contiguous offsets).
    """

    def ranges(items: Sequence[Any]) -> list[OffsetRange]:
        if not items:
            return []
        partitions = {partition(r) for r in items}
        if len(partitions) == 1:
            offsets = [offset(r) for r in items]
            low, high = min(offsets), max(offsets)
            if high - low + 1 == len(offsets) and len(set(offsets)) == len(offsets):
                return [(partitions.pop(), low, high)]
        return ranges_of((partition(r), offset(r)) for r in items)

    return ranges


_BYTES = tuple(bytes((i,)) for i in range(0x80))


def _uvarint(value: int) -> bytes:
    """A varint (negative values as 10-byte two's complement, as protobuf encodes int32/int64)."""
    if 0 <= value < 0x80:
        return _BYTES[value]
    if 0 < value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0 < value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _message_id(partition: int, offset: int) -> bytes:
    """Field 3, the MessageID submessage (zero fields omitted)."""
    mid = b""
    if partition:
        mid = b"\x08" + _uvarint(partition)
    if offset:
        mid += b"\x10" + _uvarint(offset)
    return b"\x1a" + _uvarint(len(mid)) + mid


def encode_id_marker(kind: MarkerType, partition: int, offset: int, redeliver_after_ms: int = 0) -> bytes:
    """An END or KEEPALIVE marker, straight from its fields (what ``encode_marker`` writes for them)."""
    out = b"\x10" + _BYTES[kind] + _message_id(partition, offset) if kind else _message_id(partition, offset)
    if redeliver_after_ms:
        out += b"\x20" + _uvarint(redeliver_after_ms)
    return out


def encode_start(
    partition: int,
    offset: int,
    redeliver_after_ms: int,
    key: bytes,
    value: bytes,
    delivery_attempt: int = 0,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """A START marker, straight from its fields (what ``encode_marker`` writes for it)."""
    parts = [_message_id(partition, offset)]
    if redeliver_after_ms:
        parts += (b"\x20", _uvarint(redeliver_after_ms))
    if key:
        parts += (b"\x2a", _uvarint(len(key)), key)
    if value:
        parts += (b"\x32", _uvarint(len(value)), value)
    if delivery_attempt:
        parts += (b"\x38", _uvarint(delivery_attempt))
    if headers:
        for name, text in headers.items():
            raw_name, raw_text = name.encode(), text.encode()
            header = (
                b"\x0a" + _uvarint(len(raw_name)) + raw_name + b"\x12" + _uvarint(len(raw_text)) + raw_text
            )
            parts += (b"\x42", _uvarint(len(header)), header)
    return b"".join(parts)


#: ``version = 1``, then field 0 (illegal in protobuf: kafka-mq-go's decoder refuses the marker).
_BATCH_HEAD = b"\x08\x01\x00\x00"


def encode_batch_marker(
    kind: MarkerType,
    ranges: Iterable[OffsetRange],
    redeliver_after_ms: int = 0,
    *,
    prefetched: bool = False,
    handout: Handout = Handout.NONE,
) -> bytes:
    """A batched marker (``version = 1``) naming every message of ``ranges``."""
    parts = [_BATCH_HEAD]
    if kind:
        parts += (b"\x10", _BYTES[kind])
    if redeliver_after_ms:
        parts += (b"\x20", _uvarint(redeliver_after_ms))
    if prefetched:
        parts.append(b"\x50\x01")
    if handout:
        parts += (b"\x58", _BYTES[handout])
    for partition, first, last in ranges:
        body = b"\x08" + _uvarint(partition) if partition else b""
        if first:
            body += b"\x10" + _uvarint(first)
        if last:
            body += b"\x18" + _uvarint(last)
        parts += (b"\x4a", _uvarint(len(body)), body)
    return b"".join(parts)


def encode_marker(marker: Marker) -> bytes:
    """Serialize ``marker`` (proto3: zero values are omitted)."""
    mid = marker.message_id
    out = b"" if marker.type is MarkerType.START else b"\x10" + _BYTES[marker.type]
    return out + encode_start(
        mid.partition,
        mid.offset,
        marker.redeliver_after_ms,
        marker.key,
        marker.value,
        marker.delivery_attempt,
        marker.headers,
    )


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


_TYPES = tuple(MarkerType)


def _decode_common(data: bytes) -> Marker | None:
    """The markers this queue and kafka-mq-go write, parsed in one pass; None for anything else."""
    n = len(data)
    pos = 0
    kind = partition = offset = redeliver = attempt = 0
    key = value = b""
    headers: dict[str, str] = {}
    read = _read_varint
    while pos < n:
        tag = data[pos]
        pos += 1
        if tag == 0x1A:  # message_id
            length = data[pos]
            pos += 1
            end = pos + length
            if length >= 0x80 or end > n:
                return None
            while pos < end:
                sub = data[pos]
                number = data[pos + 1]
                if number < 0x80:
                    pos += 2
                else:
                    number, pos = read(data, pos + 1)
                if sub == 0x08:
                    partition = number
                elif sub == 0x10:
                    offset = number
                else:
                    return None
            if pos != end:
                return None
        elif tag == 0x10:
            kind = data[pos]
            if kind < 0x80:
                pos += 1
            else:
                kind, pos = read(data, pos)
        elif tag == 0x20:
            redeliver, pos = read(data, pos)
        elif tag == 0x2A or tag == 0x32:
            length = data[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = read(data, pos)
            if pos + length > n:
                return None
            if tag == 0x2A:
                key = data[pos : pos + length]
            else:
                value = data[pos : pos + length]
            pos += length
        elif tag == 0x38:
            attempt = data[pos]
            if attempt < 0x80:
                pos += 1
            else:
                attempt, pos = read(data, pos)
        else:  # headers, version, unknown fields: the general parser
            return None
    if kind >= len(_TYPES):
        return None
    if partition >= 1 << 31:
        partition = _signed(partition, 32)
    if offset >= 1 << 63:
        offset = _signed(offset, 64)  # also drops bits beyond 64, as the general parser does
    return Marker(_TYPES[kind], MessageId(partition, offset), redeliver, key, value, attempt, headers)


def _decode_batch(data: bytes) -> BatchMarker:
    kind = redeliver = handout = 0
    prefetched = False
    ranges: list[OffsetRange] = []
    try:
        for number, raw in _fields(data):
            if number == 2 and isinstance(raw, int):
                kind = raw
            elif number == 4 and isinstance(raw, int):
                redeliver = raw
            elif number == 10 and isinstance(raw, int):
                prefetched = bool(raw)
            elif number == 11 and isinstance(raw, int):
                handout = raw if raw <= Handout.RETURNED else Handout.NONE  # unknown: as without
            elif number == 9 and isinstance(raw, bytes):
                partition = first = last = 0
                for sub, value in _fields(raw):
                    if isinstance(value, int):
                        if sub == 1:
                            partition = _signed(value, 32)
                        elif sub == 2:
                            first = _signed(value, 64)
                        elif sub == 3:
                            last = _signed(value, 64)
                if last < first:
                    raise DecodeError(f"an id range ends before it starts: {first}..{last}")
                ranges.append((partition, first, last))
        return BatchMarker(MarkerType(kind), tuple(ranges), redeliver, prefetched, Handout(handout))
    except ValueError as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"malformed batched marker: {exc}") from exc


def decode(data: bytes) -> Marker | BatchMarker:
    """Parse a per-message (``version = 0``) or batched (``version = 1``) marker."""
    if data[:2] == b"\x08\x01":
        return _decode_batch(data)
    return decode_marker(data)


def decode_marker(data: bytes) -> Marker:
    """Parse a per-message marker; unknown fields are skipped, malformed data raises DecodeError."""
    try:
        marker = _decode_common(data)
    except (IndexError, DecodeError):
        marker = None
    if marker is not None:
        return marker
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


# -- writing markers ------------------------------------------------------------------------------


class MarkerProducer:
    """Writes START, KEEPALIVE and END markers, keyed by queue id so a queue's markers stay in order."""

    def __init__(self, log_port: Log, config: QueueSettings) -> None:
        self._log = log_port
        self._config = config

    def _send(self, queue_id: str, marker: bytes) -> Awaitable[tuple[TopicPartition, int]]:
        return self._log.send(self._config.marker_topic, marker, key=queue_id)

    async def start(self, queue_id: str, markers: Iterable[Marker | bytes]) -> None:
        """Write START markers (or their encodings) for a fetched batch and wait for all together."""
        send = self._send
        sends = [send(queue_id, m if isinstance(m, bytes) else encode_marker(m)) for m in markers]
        if all(isinstance(s, asyncio.Future) and s.done() for s in sends):
            # Already written (an in-memory log): no yield, so polling, START and commit stay atomic.
            for done in sends:
                cast("asyncio.Future[tuple[TopicPartition, int]]", done).result()
            return
        await asyncio.gather(*sends)

    def keepalive(
        self, queue_id: str, ids: Iterable[MessageId], redeliver_after_ms: int
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """Queue KEEPALIVE markers: each message may go ``redeliver_after_ms`` more without settling."""
        send, keepalive = self._send, MarkerType.KEEPALIVE
        return [send(queue_id, encode_id_marker(keepalive, p, o, redeliver_after_ms)) for p, o in ids]

    async def start_batch(
        self,
        queue_id: str,
        ranges: Sequence[OffsetRange],
        redeliver_after_ms: int,
        *,
        prefetched: bool = False,
    ) -> None:
        """Write one batched START for every message of ``ranges`` and wait until it is written.

        ``prefetched``: hand-out marks follow (a redelivery counts only marked messages).
        """
        marker = encode_batch_marker(MarkerType.START, ranges, redeliver_after_ms, prefetched=prefetched)
        sent = self._send(queue_id, marker)
        if isinstance(sent, asyncio.Future) and sent.done():
            sent.result()  # already written (an in-memory log): no yield
            return
        await sent

    def keepalive_batch(
        self, queue_id: str, ranges: Sequence[OffsetRange], redeliver_after_ms: int
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one batched KEEPALIVE: the messages of ``ranges`` may go ``redeliver_after_ms`` more."""
        return self._send(queue_id, encode_batch_marker(MarkerType.KEEPALIVE, ranges, redeliver_after_ms))

    def handout_batch(
        self, queue_id: str, ranges: Sequence[OffsetRange], redeliver_after_ms: int, handout: Handout
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one batched KEEPALIVE that marks the messages of ``ranges`` handed out (or returned)."""
        marker = encode_batch_marker(MarkerType.KEEPALIVE, ranges, redeliver_after_ms, handout=handout)
        return self._send(queue_id, marker)

    def end_batch(
        self, queue_id: str, ranges: Sequence[OffsetRange]
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one batched END: the messages of ``ranges`` are done."""
        return self._send(queue_id, encode_batch_marker(MarkerType.END, ranges))

    def end(self, queue_id: str, ids: Iterable[MessageId]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """Queue END markers: the messages are done and will not be redelivered."""
        send, end = self._send, MarkerType.END
        return [send(queue_id, encode_id_marker(end, p, o)) for p, o in ids]


def _ids(ranges: Iterable[OffsetRange]) -> list[MessageId]:
    return [MessageId(p, o) for p, first, last in ranges for o in range(first, last + 1)]


class MarkerFormat(abc.ABC):
    """How one queue consumer writes its markers: chosen once, from ``marker_format``.

    :class:`BatchedMarkers` writes one marker per fetched batch or group of settlements;
    :class:`PerMessageMarkers` writes kafka-mq-go's one marker per message.
    """

    #: Whether the consumer may read the log client's own records (``broker.log.RawBatches``).
    reads_raw: ClassVar[bool]

    def __init__(self, producer: MarkerProducer, queue_id: str, redeliver_after_ms: int) -> None:
        self.producer = producer
        self.queue_id = queue_id
        self.redeliver_after_ms = redeliver_after_ms

    @abc.abstractmethod
    async def start(
        self,
        items: Sequence[Any],
        polled_ranges: Callable[[Sequence[Any]], list[OffsetRange]],
        *,
        prefetched: bool,
    ) -> None:
        """Write the START markers of one poll's ``items`` and wait until they are written."""

    @abc.abstractmethod
    def keepalive(
        self, ranges: list[OffsetRange], redeliver_after_ms: int
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """KEEPALIVE for every message of ``ranges`` (pipelined)."""

    @abc.abstractmethod
    def end(self, ranges: list[OffsetRange]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """END for every message of ``ranges`` (pipelined)."""


class BatchedMarkers(MarkerFormat):
    """One START per fetched batch, one KEEPALIVE or END per group of messages (``version = 1``)."""

    reads_raw = True

    def __init__(
        self, producer: MarkerProducer, queue_id: str, redeliver_after_ms: int, *, marks_handout: bool
    ) -> None:
        super().__init__(producer, queue_id, redeliver_after_ms)
        self.marks_handout = marks_handout

    async def start(
        self,
        items: Sequence[Any],
        polled_ranges: Callable[[Sequence[Any]], list[OffsetRange]],
        *,
        prefetched: bool,
    ) -> None:
        """One batched START (``prefetched`` only where hand-out marks follow)."""
        await self.producer.start_batch(
            self.queue_id,
            polled_ranges(items),
            self.redeliver_after_ms,
            prefetched=prefetched and self.marks_handout,
        )

    def keepalive(
        self, ranges: list[OffsetRange], redeliver_after_ms: int
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """One batched KEEPALIVE."""
        return [self.producer.keepalive_batch(self.queue_id, ranges, redeliver_after_ms)]

    def end(self, ranges: list[OffsetRange]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """One batched END."""
        return [self.producer.end_batch(self.queue_id, ranges)]


class PerMessageMarkers(MarkerFormat):
    """kafka-mq-go's markers: one per message, START carrying the payload (items are Records)."""

    reads_raw = False

    async def start(
        self,
        items: Sequence[Any],
        polled_ranges: Callable[[Sequence[Any]], list[OffsetRange]],
        *,
        prefetched: bool,
    ) -> None:
        """One START per record, with its key, payload, attributes and delivery attempt."""
        await self.producer.start(self.queue_id, [self.encoded_start(r) for r in items])

    def encoded_start(self, record: Record) -> bytes:
        """The encoded START marker of ``record``."""
        attributes = record.attributes
        attempt = int(attributes.get(HEADER_ATTEMPT, "1") or 1) if attributes else 1
        return encode_start(
            record.partition,
            record.offset,
            self.redeliver_after_ms,
            (record.key or "").encode(),
            record.value or b"",
            attempt,
            attributes,
        )

    def keepalive(
        self, ranges: list[OffsetRange], redeliver_after_ms: int
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """One KEEPALIVE per message."""
        return self.producer.keepalive(self.queue_id, _ids(ranges), redeliver_after_ms)

    def end(self, ranges: list[OffsetRange]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """One END per message."""
        return self.producer.end(self.queue_id, _ids(ranges))


def marker_format_for(config: QueueSettings, producer: MarkerProducer, queue_id: str) -> MarkerFormat:
    """The marker-format strategy ``config.marker_format`` names."""
    if config.marker_format == "batched":
        return BatchedMarkers(
            producer, queue_id, config.redelivery_timeout_ms, marks_handout=config.marks_handout
        )
    return PerMessageMarkers(producer, queue_id, config.redelivery_timeout_ms)
