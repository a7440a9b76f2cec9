"""SDK objects <-> portable objects, in one place (the publisher, the log port and the queue use it).

Outbound: :func:`produce` hands a record to confluent-kafka's ``Producer.produce`` (key as
UTF-8, attributes as headers, surrogate escapes sent back as the bytes they stand for).
Inbound: a confluent-kafka ``Message`` becomes a :class:`~broker.Record` (:func:`to_records`) or
a queue message; :func:`key_of`, :func:`attributes_of` and :func:`publish_time_of` read its fields
(key and header values decoded as UTF-8, undecodable bytes kept as surrogate escapes so nothing
is lost; a header without a value reads as ``""``; ``publish_time`` is the record timestamp in
seconds).

The per-record loops live in :mod:`broker.backends.kafka.fastpath`, compiled by mypyc as
``broker.backends.kafka._fastpath`` when the package was built with a C compiler; this module uses
the compiled one when it is installed and current, unless ``POLYBROKER_NO_EXTENSIONS=1``
(:data:`FASTPATH_VARIANT` says which runs).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from broker import Record, RecordBatch
from broker.backends.kafka import fastpath as _pure
from broker.backends.kafka import sdk
from broker.driver.acking import EMPTY_ATTRIBUTES, Committer
from broker.errors import InvalidAttributes, InvalidMessage
from broker.log import RawFields

__all__ = [
    "FASTPATH_VARIANT",
    "KafkaRecord",
    "KafkaRecordBatch",
    "accepted",
    "attributes_of",
    "compiled_fastpath",
    "decode_headers",
    "escaped",
    "key_of",
    "produce",
    "produce_all",
    "publish_time_of",
    "raw_fields",
    "to_records",
]


log = logging.getLogger("broker.backends.kafka")


def compiled_fastpath() -> tuple[Any, str]:
    """``(module, why)``: the compiled hot path (``broker.backends.kafka._fastpath``) if it is
    installed and was built from the ``fastpath.py`` beside it, else ``(None, why not)``."""
    try:
        compiled = importlib.import_module("broker.backends.kafka._fastpath")
    except ImportError:
        return None, "no compiled extension installed"
    source = Path(_pure.__file__).read_bytes() if _pure.__file__ else b""
    if getattr(compiled, "SOURCE_DIGEST", None) != hashlib.sha256(source).hexdigest():
        # an editable install whose fastpath.py changed after the build
        return None, "the compiled extension is stale: reinstall"
    return compiled, "compiled (mypyc)"


def _select_fastpath() -> tuple[Any, str]:
    """The compiled hot path when it is installed, current and not turned off, else the pure-Python one."""
    if os.environ.get("POLYBROKER_NO_EXTENSIONS", "").strip() not in ("", "0"):
        return _pure, "pure Python (POLYBROKER_NO_EXTENSIONS is set)"
    compiled, why = compiled_fastpath()
    if compiled is None:
        if "stale" in why:
            log.warning("the compiled Kafka hot path is older than fastpath.py (reinstall to rebuild it)")
        return _pure, f"pure Python ({why})"
    return compiled, why


_selected, _variant = _select_fastpath()
if TYPE_CHECKING:  # the hot path in use, typed as its pure-Python source
    _fast = _pure
else:
    _fast = _selected

#: Which Kafka hot path this process runs: ``"compiled (mypyc)"`` or ``"pure Python (why)"``
#: (``broker --version`` shows it). ``POLYBROKER_NO_EXTENSIONS=1`` selects the pure-Python one.
FASTPATH_VARIANT: Final[str] = _variant


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
    there). The mapping is :func:`produce`'s, with no Python call per record (see
    :func:`broker.backends.kafka.fastpath.produce_all`).
    """
    return _fast.produce_all(producer, topic, messages, start, on_delivery, escaped)


def accepted(messages: list[Any]) -> list[Any]:
    """The messages of a fetch without an error: ``messages`` itself when none has one."""
    return _fast.accepted(messages)


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
    committer of any other partition, and the time they were read."""

    __slots__ = ("committers", "default", "now")

    def __init__(self, committers: dict[tuple[str, int], Committer], default: Committer, now: float) -> None:
        self.committers = committers
        self.default = default
        self.now = now


#: Every field of a KafkaRecord (those read from its SDK message when asked are properties).
_FIELDS: Final = (
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
    """Turn ``record`` into a plain one (every field stored): called before a lazy field is assigned."""
    try:
        values = [getattr(record, name) for name in _FIELDS]
    except AttributeError:  # not read from a message (``copy`` is filling it in): nothing to keep
        record.__class__ = _StoredKafkaRecord
        return
    record.__class__ = _StoredKafkaRecord
    for name, value in zip(_FIELDS, values, strict=True):
        setattr(record, name, value)


def _lazy(name: str, getter: Any, doc: str) -> Any:
    def assign(record: KafkaRecord, value: Any) -> None:
        _settle(record)
        setattr(record, name, value)

    return property(getter, assign, doc=doc)


def _ingestion_time(record: KafkaRecord) -> float:
    return record._fetch.now


def _committer(record: KafkaRecord) -> Committer:
    fetch = record._fetch
    raw = record.raw
    return fetch.committers.get((raw.topic(), raw.partition()), fetch.default)


class KafkaRecord(Record):
    """A :class:`~broker.Record` read from Kafka.

    The consumer's hot path (:func:`to_records`) stores ``key``, ``value`` and ``attributes`` (what
    a handler reads) and ``raw``; topic, partition, offset, publish time, ingestion time and
    committer are read from the SDK message (or the fetch) when asked. Values are exactly those of
    an eagerly built ``Record``. Fields stay assignable: the first assignment of a field read when
    asked stores every field in the record (it becomes a plain one).
    """

    __slots__ = ("_fetch",)

    _fetch: _Fetch

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Built by hand (``dataclasses.replace``, tests): a plain record with every field stored.
        self.__class__ = _StoredKafkaRecord
        Record.__init__(self, *args, **kwargs)

    topic = _lazy("topic", _fast.raw_topic, "The record's topic.")
    partition = _lazy("partition", _fast.raw_partition, "The record's partition.")
    offset = _lazy("offset", _fast.raw_offset, "The record's offset.")
    publish_time = _lazy("publish_time", _fast.raw_publish_time, "The record timestamp in seconds.")
    ingestion_time = _lazy("ingestion_time", _ingestion_time, "When the consumer fetched the record.")
    committer = _lazy(
        "committer", _committer, "Commits for the record's partition (as assigned at the fetch)."
    )


class _StoredKafkaRecord(KafkaRecord):
    """A KafkaRecord whose fields are all stored (after an assignment, or built by hand)."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Record.__init__(self, *args, **kwargs)


for _name in _FIELDS:  # the plain slots of Record again
    setattr(_StoredKafkaRecord, _name, Record.__dict__[_name])
_StoredKafkaRecord.__qualname__ = "KafkaRecord"  # as it reads in a repr


class KafkaRecordBatch(RecordBatch):
    """The records of one fetch, with the SDK messages they read from: a partition's highest
    record is found from the messages when first asked (no per-record work until then)."""

    __slots__ = ("_messages",)

    def __init__(self, records: list[Record], messages: list[Any]) -> None:
        super().__init__(records)
        self._messages = messages
        self._known = True

    def highest(self) -> dict[tuple[str, int], Record] | None:
        """``(topic, partition) -> record`` of that partition's highest offset; None when unknown."""
        if not self._known:
            return None
        if self._highest is None:
            self._highest = {tp: self[index] for tp, index in _fast.highest_indexes(self._messages).items()}
        return self._highest


def to_records(
    messages: Sequence[Any],
    committers: Mapping[tuple[str, int], Committer],
    default: Committer,
    now: float,
) -> KafkaRecordBatch:
    """Many SDK messages as Records: the hot path of every consumer.

    A record's committer is its partition's entry in ``committers`` as it is now (a committer
    retired later drops the record's ack), else ``default``. Key, value and attributes are stored;
    the other fields are read from the SDK message when first asked (see :class:`KafkaRecord`).
    """
    fetch = _Fetch(dict(committers), default, now)
    if type(messages) is not list:
        messages = list(messages)
    if _fast is _pure:
        records = _pure.build_records(messages, KafkaRecord, fetch, _attributes_from, EMPTY_ATTRIBUTES)
    else:  # the fields gathered in C, stored here (see fastpath.record_fields)
        keys, values, attributes = _fast.record_fields(messages, _attributes_from, EMPTY_ATTRIBUTES)
        records = _stored(messages, keys, values, attributes, fetch)
    return KafkaRecordBatch(records, messages)


def _stored(
    messages: Sequence[Any],
    keys: list[str | None],
    values: list[bytes | None],
    attributes: list[Mapping[str, str]],
    fetch: _Fetch,
) -> list[Record]:
    """Records of ``messages`` with the fields given (the compiled variant's half of to_records)."""
    new = object.__new__
    cls = KafkaRecord
    out: list[Record] = []
    append = out.append
    for message, key, value, mapping in zip(messages, keys, values, attributes, strict=True):
        record = new(cls)
        record.raw = message
        record._fetch = fetch
        record.key = key
        record.value = value
        record.attributes = mapping
        append(record)
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
