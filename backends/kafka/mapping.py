"""SDK objects <-> portable objects, in one place (the publisher, the log port and the queue use it).

Outbound: :func:`produce` hands a record to confluent-kafka's ``Producer.produce`` (key as
UTF-8, attributes as headers, surrogate escapes sent back as the bytes they stand for).
Inbound: a confluent-kafka ``Message`` becomes a :class:`~broker.Record` (:func:`to_records`) or
a queue message; :func:`key_of`, :func:`attributes_of` and :func:`publish_time_of` read its fields
(key and header values decoded as UTF-8, undecodable bytes kept as surrogate escapes so nothing
is lost; a header without a value reads as ``""``; ``publish_time`` is the record timestamp in
seconds).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from broker.backends.kafka import sdk
from broker.errors import InvalidAttributes, InvalidMessage
from broker.log import RawFields
from broker.message import EMPTY_ATTRIBUTES, Committer, Record

__all__ = [
    "KafkaRecord",
    "attributes_of",
    "decode_headers",
    "escaped",
    "key_of",
    "produce",
    "publish_time_of",
    "raw_fields",
    "to_records",
]


def _bytes_of(text: str | bytes, what: str) -> bytes:
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise InvalidMessage(f"{what} {text!r} holds a lone surrogate that stands for no byte") from None


def escaped(
    key: str | bytes | None, headers: Mapping[str, str | bytes] | None
) -> tuple[bytes | None, dict[str, bytes] | None]:
    """Key and header values as bytes, with the bytes a read decoded as surrogate escapes restored.

    A record read with a key or header value that is not UTF-8 carries it as surrogate escapes;
    publishing it again sends the original bytes (byte-exact). Header names are text on the wire
    of the SDK: one that cannot be UTF-8 is an ``InvalidAttributes``.
    """
    key_bytes = _bytes_of(key, "message key") if key is not None else None
    if not headers:
        return key_bytes, None
    for name in headers:
        if not name.isascii():
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidAttributes(f"attribute name {name!r} is not valid UTF-8") from None
    return key_bytes, {name: _bytes_of(value, f"attribute {name!r}") for name, value in headers.items()}


def produce(
    producer: Any,
    topic: str,
    value: bytes | None,
    key: str | bytes | None,
    attributes: Mapping[str, str] | None,
    on_delivery: Any,
    partition: int = -1,
) -> None:
    """``producer.produce`` of one record: the outbound mapping (``BufferError`` when full).

    The SDK encodes a str key and header values as UTF-8 itself; one holding surrogate escapes (a
    record read back whose bytes were not UTF-8) is sent as the original bytes instead.
    """
    headers = (attributes if type(attributes) is dict else dict(attributes)) if attributes else None
    try:
        producer.produce(topic, value, key, partition, on_delivery=on_delivery, headers=headers)
    except UnicodeEncodeError:
        key_bytes, header_bytes = escaped(key, headers)
        producer.produce(topic, value, key_bytes, partition, on_delivery=on_delivery, headers=header_bytes)


def decode_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Mapping[str, str]:
    """Kafka headers as attributes (a repeated header keeps its last value; None reads as '')."""
    if not headers:
        return EMPTY_ATTRIBUTES
    return {
        name: value.decode("utf-8", "surrogateescape") if value is not None else "" for name, value in headers
    }


def publish_time_of(message: Any) -> float | None:
    """The record timestamp of an SDK message, in seconds (None when it has none)."""
    ts_type, ts = message.timestamp()
    return ts / 1000.0 if ts_type else None


def key_of(message: Any) -> str | None:
    """The key of an SDK message as text (undecodable bytes as surrogate escapes)."""
    data = message.key()
    return data.decode("utf-8", "surrogateescape") if data is not None else None


#: A lazily decoded field not read yet.
_UNREAD: Any = object()

#: Headers seen lately -> their attributes (most streams repeat a few header sets; a copy is
#: handed out, so records never share a mapping). Cleared when full.
_decoded_headers: dict[tuple[tuple[str, bytes | None], ...], dict[str, str]] = {}
_DECODED_HEADERS_MAX = 1024


def attributes_of(message: Any) -> Mapping[str, str]:
    """The headers of an SDK message as attributes (a mapping of its own, never shared)."""
    headers = message.headers()
    if not headers:
        return EMPTY_ATTRIBUTES
    decoded = _decoded_headers.get(tuple(headers))
    if decoded is not None:
        return decoded.copy()
    attributes = decode_headers(headers)
    if len(_decoded_headers) >= _DECODED_HEADERS_MAX:
        _decoded_headers.clear()  # header sets that never repeat (trace ids) keep it from growing
    _decoded_headers[tuple(headers)] = dict(attributes)
    return attributes


class KafkaRecord(Record):
    """A :class:`~broker.Record` read from Kafka whose key, attributes and publish time are decoded
    from the SDK message when first read (the consumer's hot path builds one per record).

    Values are exactly those of an eagerly built ``Record``; the fields stay assignable, and the
    value read once is the one read every time (changes to the attributes mapping stick).
    """

    __slots__ = ("_attributes", "_key", "_publish_time")

    _key: Any
    _attributes: Any
    _publish_time: Any

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        value: bytes | None,
        raw: Any,
        committer: Committer,
        now: float,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.value = value
        self.raw = raw
        self.committer = committer
        self.ingestion_time = now
        self._key = self._attributes = self._publish_time = _UNREAD

    # The getters are the consumer's per-record cost once a handler reads the fields: each is
    # one Python call, with the decoding inlined.
    def _get_key(self) -> str | None:
        key = self._key
        if key is _UNREAD:
            key = self._key = key_of(self.raw)
        return key  # type: ignore[no-any-return]

    def _set_key(self, value: str | None) -> None:
        self._key = value

    def _get_attributes(self) -> Mapping[str, str]:
        attributes = self._attributes
        if attributes is _UNREAD:
            attributes = self._attributes = attributes_of(self.raw)
        return attributes  # type: ignore[no-any-return]

    def _set_attributes(self, value: Mapping[str, str]) -> None:
        self._attributes = value

    def _get_publish_time(self) -> float | None:
        publish_time = self._publish_time
        if publish_time is _UNREAD:
            publish_time = self._publish_time = publish_time_of(self.raw)
        return publish_time  # type: ignore[no-any-return]

    def _set_publish_time(self, value: float | None) -> None:
        self._publish_time = value

    key = property(_get_key, _set_key, doc="The record key (UTF-8; undecodable bytes as surrogate escapes).")
    attributes = property(_get_attributes, _set_attributes, doc="Headers as attributes.")
    publish_time = property(_get_publish_time, _set_publish_time, doc="The record timestamp in seconds.")


def to_records(
    messages: Sequence[Any],
    committers: Mapping[tuple[str, int], Committer],
    default: Committer,
    now: float,
) -> list[Record]:
    """Many SDK messages as Records (the hot path of every consumer: one lookup per partition run).

    A record's committer is its partition's entry in ``committers``, else ``default``. Key,
    attributes and publish time are decoded when first read (see :class:`KafkaRecord`).
    """
    out: list[Record] = []
    append = out.append
    last_topic: str | None = None
    last_partition = -1
    committer: Committer = default
    for message in messages:
        topic = message.topic()
        partition = message.partition()
        if partition != last_partition or topic != last_topic:
            last_topic, last_partition = topic, partition
            committer = committers.get((topic, partition), default)
        append(KafkaRecord(topic, partition, message.offset(), message.value(), message, committer, now))
    return out


@functools.cache
def raw_fields() -> RawFields:
    """The fields of a confluent-kafka ``Message`` for ``broker.log.RawBatches`` users.

    The SDK's own methods (unbound, so reading a field costs what calling it does), and the
    inbound readers above for the decoded ones.
    """
    message = sdk.confluent().Message
    return RawFields(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        value=message.value,
        key_bytes=message.key,
        key=key_of,
        has_attributes=message.headers,
        attributes=attributes_of,
        publish_time=publish_time_of,
    )
