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
from typing import Any, Final

from broker.backends.kafka import sdk
from broker.errors import InvalidAttributes, InvalidMessage
from broker.log import RawFields
from broker.message import EMPTY_ATTRIBUTES, Committer, Record, RecordBatch

__all__ = [
    "KafkaRecord",
    "KafkaRecordBatch",
    "attributes_of",
    "decode_headers",
    "escaped",
    "key_of",
    "produce",
    "produce_all",
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


def produce_all(producer: Any, topic: str, messages: Sequence[Any], start: int, on_delivery: Any) -> int:
    """``producer.produce`` of ``messages[start:]`` (OutboundMessages) in one call: the hot path.

    Returns the index of the first message not enqueued: ``len(messages)`` when all went in, less
    when the SDK's queue is full (``BufferError``; the caller waits for room and calls again from
    there). The mapping is :func:`produce`'s, with no Python call per record.
    """
    produce_one = producer.produce
    poll = producer.poll
    index = start
    end = len(messages)
    try:
        while index < end:
            if not index & 255 and index:
                poll(0)  # serve the reports so far (keeps the SDK's queue from filling up)
            message = messages[index]
            attributes = message.attributes
            if attributes and type(attributes) is not dict:
                attributes = dict(attributes)
            try:
                produce_one(
                    topic, message.data, message.key, on_delivery=on_delivery, headers=attributes or None
                )
            except UnicodeEncodeError:  # surrogate escapes: the bytes they stand for
                key_bytes, header_bytes = escaped(message.key, attributes)
                produce_one(topic, message.data, key_bytes, on_delivery=on_delivery, headers=header_bytes)
            index += 1
    except BufferError:
        pass
    return index


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


#: The attributes of a record not read yet.
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
    return _attributes_from(headers)


def _attributes_from(headers: list[tuple[str, bytes | None]]) -> dict[str, str]:
    decoded = _decoded_headers.get(tuple(headers))
    if decoded is not None:
        return decoded.copy()
    attributes = dict(decode_headers(headers))
    if len(_decoded_headers) >= _DECODED_HEADERS_MAX:
        _decoded_headers.clear()  # header sets that never repeat (trace ids) keep it from growing
    _decoded_headers[tuple(headers)] = attributes.copy()
    return attributes


class _Fetch:
    """What the records of one fetch share: their partitions' committers as of the fetch, the
    committer of any other partition, the time they were read, and the headers decoded last
    (records of one fetch mostly carry the same header set)."""

    __slots__ = ("attributes", "committers", "default", "headers", "now")

    def __init__(self, committers: dict[tuple[str, int], Committer], default: Committer, now: float) -> None:
        self.committers = committers
        self.default = default
        self.now = now
        self.headers: list[tuple[str, bytes | None]] | None = None
        self.attributes: dict[str, str] = {}


#: The fields a KafkaRecord reads from its SDK message (or its fetch) when asked.
_LAZY_FIELDS: Final = (
    "topic",
    "partition",
    "offset",
    "value",
    "key",
    "attributes",
    "publish_time",
    "ingestion_time",
    "committer",
)


def _settle(record: KafkaRecord) -> None:
    """Turn ``record`` into a plain one (every field stored): called before a field is assigned."""
    try:
        values = [getattr(record, name) for name in _LAZY_FIELDS]
    except AttributeError:  # not read from a message (``copy`` is filling it in): nothing to keep
        record.__class__ = _StoredKafkaRecord
        return
    record.__class__ = _StoredKafkaRecord
    for name, value in zip(_LAZY_FIELDS, values, strict=True):
        setattr(record, name, value)


def _lazy(name: str, getter: Any, doc: str) -> Any:
    def assign(record: KafkaRecord, value: Any) -> None:
        _settle(record)
        setattr(record, name, value)

    return property(getter, assign, doc=doc)


# The getters are the consumer's per-record cost once a handler reads the fields: each is one
# Python call with the decoding inlined.
def _key(record: KafkaRecord) -> str | None:
    data = record.raw.key()
    return data.decode("utf-8", "surrogateescape") if data is not None else None


def _attributes(record: KafkaRecord) -> Mapping[str, str]:
    attributes = record._attributes
    if attributes is _UNREAD:
        headers = record.raw.headers()
        if not headers:
            attributes = EMPTY_ATTRIBUTES
        else:
            fetch = record._fetch
            if headers == fetch.headers:  # as the record before: no hashing, no decoding
                attributes = fetch.attributes.copy()
            else:
                attributes = _attributes_from(headers)
                fetch.headers, fetch.attributes = headers, attributes.copy()
        record._attributes = attributes
    return attributes  # type: ignore[no-any-return]


def _committer(record: KafkaRecord) -> Committer:
    fetch = record._fetch
    raw = record.raw
    return fetch.committers.get((raw.topic(), raw.partition()), fetch.default)


class KafkaRecord(Record):
    """A :class:`~broker.Record` read from Kafka that reads its fields from the SDK message when
    asked (the consumer's hot path builds one per record: three stores, no decoding).

    Values are exactly those of an eagerly built ``Record``. Fields stay assignable: the first
    assignment stores every field in the record (it becomes a plain one); the attributes mapping
    is decoded once and kept, so changes to it stick.
    """

    __slots__ = ("_attributes", "_fetch")

    _attributes: Any
    _fetch: _Fetch

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Built by hand (``dataclasses.replace``, tests): a plain record with every field stored.
        self.__class__ = _StoredKafkaRecord
        Record.__init__(self, *args, **kwargs)

    topic = _lazy("topic", lambda r: r.raw.topic(), "The record's topic.")
    partition = _lazy("partition", lambda r: r.raw.partition(), "The record's partition.")
    offset = _lazy("offset", lambda r: r.raw.offset(), "The record's offset.")
    value = _lazy("value", lambda r: r.raw.value(), "The value (None for a tombstone).")
    key = _lazy("key", _key, "The record key (UTF-8; undecodable bytes as surrogate escapes).")
    attributes = _lazy("attributes", _attributes, "Headers as attributes.")
    publish_time = _lazy("publish_time", lambda r: publish_time_of(r.raw), "The record timestamp in seconds.")
    ingestion_time = _lazy("ingestion_time", lambda r: r._fetch.now, "When the consumer fetched the record.")
    committer = _lazy(
        "committer", _committer, "Commits for the record's partition (as assigned at the fetch)."
    )


class _StoredKafkaRecord(KafkaRecord):
    """A KafkaRecord whose fields are all stored (after an assignment, or built by hand)."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Record.__init__(self, *args, **kwargs)


for _name in _LAZY_FIELDS:  # the plain slots of Record again
    setattr(_StoredKafkaRecord, _name, Record.__dict__[_name])
_StoredKafkaRecord.__qualname__ = "KafkaRecord"  # as it reads in a repr


class KafkaRecordBatch(RecordBatch):
    """The records of one fetch, with the SDK messages they read from: a partition's highest
    record is found from the messages when first asked (no per-record work until then)."""

    __slots__ = ("_messages",)

    def __init__(self, records: list[Record], messages: Sequence[Any]) -> None:
        super().__init__(records)
        self._messages = messages
        self._known = True

    def highest(self) -> dict[tuple[str, int], Record] | None:
        """``(topic, partition) -> record`` of that partition's highest offset; None when unknown."""
        if not self._known:
            return None
        if self._highest is None:
            self._highest = _highest(self, self._messages)
        return self._highest


def _highest(records: list[Record], messages: Sequence[Any]) -> dict[tuple[str, int], Record]:
    ends: dict[tuple[str, int], int] = {}  # partition -> index of its highest message
    last_topic: str | None = None
    last_partition = -1
    for index, message in enumerate(messages):  # messages come in runs of one partition
        partition = message.partition()
        topic = message.topic()
        if partition != last_partition or topic != last_topic:
            if index:
                _keep(ends, (last_topic, last_partition), index - 1, messages)  # type: ignore[arg-type]
            last_topic, last_partition = topic, partition
    if messages:
        _keep(ends, (last_topic, last_partition), len(messages) - 1, messages)  # type: ignore[arg-type]
    return {tp: records[index] for tp, index in ends.items()}


def _keep(ends: dict[tuple[str, int], int], tp: tuple[str, int], index: int, messages: Sequence[Any]) -> None:
    """The message at ``index`` ends a run of ``tp``: keep it unless another run went further."""
    other = ends.get(tp)
    if other is None or messages[other].offset() < messages[index].offset():
        ends[tp] = index


def to_records(
    messages: Sequence[Any],
    committers: Mapping[tuple[str, int], Committer],
    default: Committer,
    now: float,
) -> KafkaRecordBatch:
    """Many SDK messages as Records (the hot path of every consumer: three stores per record).

    A record's committer is its partition's entry in ``committers`` as it is now (a committer
    retired later drops the record's ack), else ``default``. Fields are read from the SDK
    message when first asked (see :class:`KafkaRecord`).
    """
    fetch = _Fetch(dict(committers), default, now)
    new = object.__new__
    cls = KafkaRecord
    out: list[Record] = []
    append = out.append
    for message in messages:
        record = new(cls)
        record.raw = message
        record._fetch = fetch
        record._attributes = _UNREAD
        append(record)
    return KafkaRecordBatch(out, messages)


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
