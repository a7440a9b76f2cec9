"""Where a queue consumer's messages come from: a log consumer's Records, or the log client's own.

Per message, a queue consumer needs little: whether the record is its queue's, its offset for
the batched START and END markers, and a :class:`~broker.message.Message` whose fields are
decoded only when read. :class:`RecordSource` does that on any ``broker.log`` consumer;
:class:`RawSource` skips the intermediate :class:`~broker.message.Record` on a consumer that
offers ``broker.log.RawBatches`` (Kafka's: confluent-kafka's messages), which halves the work per
message. Both depend on the port only.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Literal

from broker import Message, Record
from broker.backends.kafka.queue.markers import MessageId, OffsetRange, ranges_reader
from broker.backends.kafka.queue.settings import (
    HEADER_ATTEMPT,
    HEADER_KEY,
    HEADER_ORIGINAL_ID,
    HEADER_REDELIVERY_FOR,
)
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker, LazyMessage
from broker.log import LogConsumer, RawBatches, RawFields, TopicPartition

__all__ = ["QueueSource", "RawSource", "RecordSource", "source_for"]

Mode = Literal["queue", "topic"]
_HIDDEN = frozenset({HEADER_ATTEMPT, HEADER_ORIGINAL_ID, HEADER_REDELIVERY_FOR, HEADER_KEY})


def _message_class(
    name: str,
    headers: Callable[[Any], Mapping[str, str]],
    key: Callable[[Any], str | None],
    ident: Callable[[Any], MessageId],
    publish_time: Callable[[Any], float | None],
    mode: Mode,
) -> type[LazyMessage]:
    """A Message subclass whose fields other than ``data`` are decoded from ``raw`` when first read."""

    def message_id(raw: Any) -> str:
        original = headers(raw).get(HEADER_ORIGINAL_ID)
        if original:
            return original
        partition, offset = ident(raw)
        return f"{partition}:{offset}"

    def message_key(raw: Any) -> str | None:
        # In queue mode the record key is the queue id; the application's key rides in a header.
        own = headers(raw).get(HEADER_KEY)
        if own is not None or mode == "queue":
            return own
        return key(raw)

    def attributes(raw: Any) -> Mapping[str, str]:
        values = headers(raw)
        if not values or _HIDDEN.isdisjoint(values):
            return values
        return _visible(values)

    def attempt(raw: Any) -> int:
        return int(headers(raw).get(HEADER_ATTEMPT) or 1)

    namespace: dict[str, Any] = {
        "__slots__": (),
        "__doc__": "A queue message whose fields are decoded from the record on first read.",
        "decoders": {
            "id": message_id,
            "key": message_key,
            "attributes": attributes,
            "publish_time": publish_time,
            "delivery_attempt": attempt,
        },
    }
    return type(name, (LazyMessage,), namespace)


class QueueSource(abc.ABC):
    """Polls one queue's records and turns them into messages and offset ranges."""

    #: The offsets of ``items`` (distinct records) as the fewest ranges (a function made in
    #: ``markers``, so that settling a message does not pass through this module).
    ranges: Callable[[Sequence[Any]], list[OffsetRange]]

    def __init__(self, consumer: LogConsumer, queue_id: str, mode: Mode) -> None:
        self.consumer = consumer
        self.queue_id = queue_id
        self.mode = mode

    @abc.abstractmethod
    async def poll(self, max_records: int, timeout: float) -> tuple[list[Any], dict[TopicPartition, int]]:
        """``(this queue's records, the positions to commit for every record read)``."""

    @abc.abstractmethod
    def ident(self, item: Any) -> MessageId:
        """The record's partition and offset in the queue topic."""

    def polled_ranges(self, items: Sequence[Any]) -> list[OffsetRange]:
        """:meth:`ranges` of records as one poll returned them (ascending offsets per partition)."""
        return self.ranges(items)

    @abc.abstractmethod
    def messages(self, items: Sequence[Any], acker: Acker, now: float) -> list[Message]:
        """A lazily decoded Message per record."""


def _record_headers(record: Record) -> Mapping[str, str]:
    return record.attributes or EMPTY_ATTRIBUTES


_RECORD_CLASSES = {
    mode: _message_class(
        f"RecordQueueMessage_{mode}",
        _record_headers,
        lambda record: record.key,
        lambda record: MessageId(record.partition, record.offset),
        lambda record: record.publish_time,
        mode,
    )
    for mode in ("queue", "topic")
}


_RECORD_RANGES = ranges_reader(attrgetter("partition"), attrgetter("offset"))


class RecordSource(QueueSource):
    """A queue's messages from any ``broker.log`` consumer (the in-memory log, tests)."""

    def __init__(self, consumer: LogConsumer, queue_id: str, mode: Mode) -> None:
        super().__init__(consumer, queue_id, mode)
        self._class: type[LazyMessage] = _RECORD_CLASSES[mode]
        self.ranges = _RECORD_RANGES

    async def poll(self, max_records: int, timeout: float) -> tuple[list[Any], dict[TopicPartition, int]]:
        """This queue's records of one poll and the positions to commit."""
        records = await self.consumer.poll(max_records, timeout)
        positions: dict[TopicPartition, int] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            if record.offset + 1 > positions.get(tp, -1):
                positions[tp] = record.offset + 1
        qid = self.queue_id
        if self.mode == "queue":
            mine = [r for r in records if r.key == qid]
        else:
            mine = [
                r for r in records if not r.attributes or r.attributes.get(HEADER_REDELIVERY_FOR, qid) == qid
            ]
        return mine, positions

    def ident(self, item: Any) -> MessageId:
        """The record's partition and offset."""
        return MessageId(item.partition, item.offset)

    def messages(self, items: Sequence[Any], acker: Acker, now: float) -> list[Message]:
        """A lazily decoded Message per record."""
        cls = self._class
        return [cls(r.value or b"", r, acker, now) for r in items]


_RAW_CLASSES: dict[tuple[RawFields, Mode], type[LazyMessage]] = {}


class _Polled(list[Any]):
    """The records one :meth:`RawSource.poll` kept, with ``attributes``: each record's attributes
    as the poll decoded them (the hidden headers left out), or None where it did not."""

    attributes: list[Mapping[str, str] | None] | None = None


def _visible(values: Mapping[str, str]) -> Mapping[str, str]:
    """``values`` without the queue's own headers."""
    return {k: v for k, v in values.items() if k not in _HIDDEN}


def _raw_class(fields: RawFields, mode: Mode) -> type[LazyMessage]:
    """The message class of ``fields``' records in ``mode`` (made once per fields and mode)."""
    made = _RAW_CLASSES.get((fields, mode))
    if made is None:
        partition, offset = fields.partition, fields.offset
        made = _RAW_CLASSES[(fields, mode)] = _message_class(
            f"RawQueueMessage_{mode}",
            fields.attributes,
            fields.key,
            lambda raw: MessageId(partition(raw), offset(raw)),
            fields.publish_time,
            mode,
        )
    return made


class RawSource(QueueSource):
    """A queue's messages straight from the log client's records (``raw`` is the client's record)."""

    def __init__(self, consumer: RawBatches, queue_id: str, mode: Mode) -> None:
        super().__init__(consumer, queue_id, mode)  # type: ignore[arg-type]
        self._raw = consumer
        self._fields = fields = consumer.raw_fields
        self._class: type[LazyMessage] = _raw_class(fields, mode)
        self._key = queue_id.encode()
        self.ranges = ranges_reader(fields.partition, fields.offset)

    async def poll(self, max_records: int, timeout: float) -> tuple[list[Any], dict[TopicPartition, int]]:
        """This queue's messages of one fetch and the positions to commit."""
        raws = await self._raw.fetch_raw(max_records, timeout)
        if not raws:
            return [], {}
        f = self._fields
        topic, partition, offset = f.topic, f.partition, f.offset
        if self._raw.single_partition():  # every record is of the one partition; offsets ascend
            last = raws[-1]
            positions = {TopicPartition(topic(last), partition(last)): offset(last) + 1}
        else:
            positions = {}
            for raw in raws:
                tp = TopicPartition(topic(raw), partition(raw))
                next_offset = offset(raw) + 1
                if next_offset > positions.get(tp, -1):
                    positions[tp] = next_offset
        if self.mode == "queue":
            key, key_bytes = self._key, f.key_bytes
            return [r for r in raws if key_bytes(r) == key], positions
        has_attributes = f.has_attributes
        if any(has_attributes(r) for r in raws):
            # Each record's headers are decoded here to find redeliveries meant for other queues;
            # those of the records kept go to their messages (see messages()), not decoded again.
            qid, attributes = self.queue_id, f.attributes
            kept = _Polled()
            decoded: list[Mapping[str, str] | None] = []
            keep, note = kept.append, decoded.append
            for r in raws:
                if not has_attributes(r):
                    keep(r)
                    note(None)
                    continue
                values = attributes(r)  # a mapping of the record's own
                if values.get(HEADER_REDELIVERY_FOR, qid) == qid:
                    keep(r)
                    note(values if _HIDDEN.isdisjoint(values) else _visible(values))
            kept.attributes = decoded
            return kept, positions
        return list(raws), positions

    def ident(self, item: Any) -> MessageId:
        """The record's partition and offset."""
        return MessageId(self._fields.partition(item), self._fields.offset(item))

    def polled_ranges(self, items: Sequence[Any]) -> list[OffsetRange]:
        """Ranges of one poll's records: no work per record when one partition is assigned."""
        if items and self._raw.single_partition():
            partition, offset = self._fields.partition, self._fields.offset
            first, last = items[0], items[-1]
            low, high = offset(first), offset(last)
            if high - low + 1 == len(items) and partition(first) == partition(last):
                return [(partition(first), low, high)]
        return self.ranges(items)

    def messages(self, items: Sequence[Any], acker: Acker, now: float) -> list[Message]:
        """A lazily decoded Message per client record (with the attributes :meth:`poll` decoded
        already, when ``items`` is the list it returned)."""
        messages = self._class.many(items, self._fields.value, acker, now)
        if type(items) is _Polled and items.attributes is not None:
            decoded, items.attributes = items.attributes, None  # a record's mapping: one message's
            for message, values in zip(messages, decoded, strict=True):
                if values is not None:
                    message.attributes = values
        return messages


def source_for(consumer: LogConsumer, queue_id: str, mode: Mode, *, raw: bool = True) -> QueueSource:
    """The fastest source for ``consumer`` (``raw=False``: always Records)."""
    if raw and isinstance(consumer, RawBatches):
        return RawSource(consumer, queue_id, mode)
    return RecordSource(consumer, queue_id, mode)
