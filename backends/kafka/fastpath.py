"""The Kafka consumer's and producer's per-record work, in one module that may be compiled.

This file is plain Python and is always importable as ``broker.backends.kafka.fastpath``: the
fallback. When the package is built with a C compiler and mypy at hand, ``setup.py`` compiles a
copy of it with mypyc as ``broker.backends.kafka._fastpath``; :mod:`broker.backends.kafka.mapping`
uses that one when it is installed, unless ``POLYBROKER_NO_EXTENSIONS=1`` is set. Both variants
give the same records and offsets (``tests/unit/test_kafka_fastpath.py`` checks it).

Rules that keep this file compilable and fast both ways:

* it imports nothing but the standard library (the copy is compiled on its own);
* it defines no class (a mypyc class cannot be subclassed from interpreted code, and the record
  type must stay a subclass of :class:`broker.Record`: it lives in ``mapping.py``, which hands its
  class and helpers in as arguments);
* SDK objects are ``Any``; plain values are typed, so mypyc can use its own primitives for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "accepted",
    "build_records",
    "highest_indexes",
    "produce_all",
    "raw_offset",
    "raw_partition",
    "raw_publish_time",
    "raw_topic",
    "record_fields",
]


def accepted(messages: list[Any]) -> list[Any]:
    """The messages of a fetch that carry no error (events, partition EOF): ``messages`` itself
    when none does (no copy on the hot path).

    Here and below, the messages of one call are a list of one type (one fetch of the SDK):
    its accessors are looked up once, not once per message.
    """
    if not messages:
        return messages
    error_of = type(messages[0]).error
    for message in messages:
        if error_of(message) is not None:
            return [m for m in messages if error_of(m) is None]
    return messages


def build_records(
    messages: list[Any],
    cls: type,
    fetch: Any,
    attributes_from: Callable[[list[tuple[str, bytes | None]]], dict[str, str]],
    empty: Mapping[str, str],
) -> list[Any]:
    """One ``cls`` record per SDK message, with ``raw``, ``_fetch``, ``key``, ``value`` and
    ``attributes`` stored (the other fields are read from ``raw`` when asked).

    The key is decoded as UTF-8 (undecodable bytes as surrogate escapes); headers become
    attributes through ``attributes_from``, or as a copy of the previous record's when they are
    equal (records of one fetch mostly carry the same header set); ``empty`` when there are none.
    Every record gets a mapping of its own.
    """
    out: list[Any] = []
    if not messages:
        return out
    # The SDK's accessors, unbound (a call of one costs less than a method lookup per record).
    kind = type(messages[0])
    key_of, value_of, headers_of = kind.key, kind.value, kind.headers
    new = object.__new__
    last_headers: list[tuple[str, bytes | None]] | None = None
    last_attributes: dict[str, str] = {}
    for message in messages:
        record: Any = new(cls)
        record.raw = message
        record._fetch = fetch
        data: bytes | None = key_of(message)
        if data is None:
            record.key = None
        else:
            try:
                record.key = data.decode()
            except UnicodeDecodeError:  # not UTF-8: the bytes kept as surrogate escapes
                record.key = data.decode("utf-8", "surrogateescape")
        record.value = value_of(message)
        headers: list[tuple[str, bytes | None]] | None = headers_of(message)
        if not headers:
            record.attributes = empty
        elif headers == last_headers:
            record.attributes = last_attributes.copy()
        else:
            attributes = attributes_from(headers)
            record.attributes = attributes
            last_headers = headers
            last_attributes = attributes.copy()
        out.append(record)
    return out


def record_fields(
    messages: list[Any],
    attributes_from: Callable[[list[tuple[str, bytes | None]]], dict[str, str]],
    empty: Mapping[str, str],
) -> tuple[list[str | None], list[bytes | None], list[Mapping[str, str]]]:
    """The keys, values and attributes of ``messages``, decoded as :func:`build_records` does.

    The compiled variant's half of :func:`build_records`: compiled code stores an attribute of an
    interpreted class through the generic ``setattr`` (about 200 instructions a store), where the
    interpreter's specialised store into a slot costs about 15; so with the extension the SDK
    calls and the decoding run here, in C, and the stores stay in Python
    (``mapping.to_records``).
    """
    keys: list[str | None] = []
    values: list[bytes | None] = []
    attributes_list: list[Mapping[str, str]] = []
    if not messages:
        return keys, values, attributes_list
    kind = type(messages[0])
    key_of, value_of, headers_of = kind.key, kind.value, kind.headers
    last_headers: list[tuple[str, bytes | None]] | None = None
    last_attributes: dict[str, str] = {}
    for message in messages:
        data: bytes | None = key_of(message)
        if data is None:
            keys.append(None)
        else:
            try:
                keys.append(data.decode())
            except UnicodeDecodeError:  # not UTF-8: the bytes kept as surrogate escapes
                keys.append(data.decode("utf-8", "surrogateescape"))
        values.append(value_of(message))
        headers: list[tuple[str, bytes | None]] | None = headers_of(message)
        if not headers:
            attributes_list.append(empty)
        elif headers == last_headers:
            attributes_list.append(last_attributes.copy())
        else:
            attributes = attributes_from(headers)
            attributes_list.append(attributes)
            last_headers = headers
            last_attributes = attributes.copy()
    return keys, values, attributes_list


def highest_indexes(messages: list[Any]) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> index`` of that partition's message with the highest offset.

    Messages of a fetch come in runs of one partition: two reads per message, offsets compared
    once per run.
    """
    ends: dict[tuple[str, int], int] = {}
    count = len(messages)
    if not count:
        return ends
    first = messages[0]
    topic_of, partition_of = type(first).topic, type(first).partition
    last_topic: str = topic_of(first)
    last_partition: int = partition_of(first)
    for index in range(1, count):
        message = messages[index]
        partition: int = partition_of(message)
        topic: str = topic_of(message)
        if partition != last_partition or topic != last_topic:
            _end_run(ends, (last_topic, last_partition), index - 1, messages)
            last_topic, last_partition = topic, partition
    _end_run(ends, (last_topic, last_partition), count - 1, messages)
    return ends


def _end_run(ends: dict[tuple[str, int], int], tp: tuple[str, int], index: int, messages: list[Any]) -> None:
    """``messages[index]`` ends a run of ``tp``: keep it unless another run of ``tp`` went further."""
    other = ends.get(tp)
    if other is None or messages[other].offset() < messages[index].offset():
        ends[tp] = index


def raw_topic(record: Any) -> str:
    """The topic of a record's SDK message."""
    topic: str = record.raw.topic()
    return topic


def raw_partition(record: Any) -> int:
    """The partition of a record's SDK message."""
    partition: int = record.raw.partition()
    return partition


def raw_offset(record: Any) -> int:
    """The offset of a record's SDK message."""
    offset: int = record.raw.offset()
    return offset


def raw_publish_time(record: Any) -> float | None:
    """The timestamp of a record's SDK message in seconds (None when it has none)."""
    stamp: tuple[int, int] = record.raw.timestamp()
    return stamp[1] / 1000.0 if stamp[0] else None


def produce_all(
    producer: Any,
    topic: str,
    messages: Sequence[Any],
    start: int,
    on_delivery: Any,
    escaped: Callable[[Any, Any], tuple[bytes | None, dict[str, bytes] | None]],
) -> int:
    """``producer.produce`` of ``messages[start:]`` (OutboundMessages): the producer's hot path.

    Returns the index of the first message not enqueued: ``len(messages)`` when all went in, less
    when the SDK's queue is full (``BufferError``; the caller waits for room and calls again from
    there). Attributes go as headers (a dict as is; another mapping as a dict of it); a key or
    header value holding surrogate escapes is sent as the bytes they stand for (``escaped``).
    The delivery reports so far are served every 256 records.

    ``produce`` is called with confluent-kafka's positional order: ``topic, value, key, partition
    (-1: the partitioner's), callback, on_delivery (its alias), timestamp (0: now), headers``
    (``tests/unit/test_kafka_fastpath.py`` checks the SDK still takes them so).
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
            if not attributes:
                attributes = None
            elif type(attributes) is not dict:
                attributes = dict(attributes)
            # Every argument by position: ``produce`` parses keywords by looking each of its eight
            # names up by C string (about 4,000 instructions a call, a third of the call).
            try:
                produce_one(topic, message.data, message.key, -1, on_delivery, None, 0, attributes)
            except UnicodeEncodeError:  # surrogate escapes: the bytes they stand for
                key_bytes, header_bytes = escaped(message.key, attributes)
                produce_one(topic, message.data, key_bytes, -1, on_delivery, None, 0, header_bytes)
            index += 1
    except BufferError:
        pass
    return index
