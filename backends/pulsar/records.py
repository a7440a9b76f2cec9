"""Pulsar topics read as logs: a durable group (``records``) and a reader for replay (``reader``).

* :class:`PulsarRecordIterator` consumes through a durable ``failover`` (or ``exclusive``)
  subscription named after the group: one active consumer per partition, and ``Record.ack()``
  acknowledges cumulatively, committing that record and every earlier one of its partition. A group
  that reconnects resumes after its last commit.
* :class:`PulsarReader` reads with a Pulsar reader, which keeps no position on the broker: it
  starts where it is told (``"earliest"``, ``"latest"`` or a message id, inclusive or not), and
  ``Record.ack()`` only moves :attr:`PulsarReader.position`, which a later reader can start from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Self

import _pulsar  # type: ignore[import-not-found]

from broker import Record
from broker.backends.pulsar.consumer import MAX_CHUNK, Subscription
from broker.backends.pulsar.errors import translate
from broker.backends.pulsar.fetcher import Fetcher
from broker.backends.pulsar.handle import ClientHandle
from broker.backends.pulsar.mapping import message_id, message_id_text, to_records
from broker.backends.pulsar.settings import ConsumerOptions
from broker.driver.acking import Committer
from broker.driver.resources import RecordIteration
from broker.errors import AckError, ClosedError, ConfigError

__all__ = ["PulsarReader", "PulsarRecordIterator"]


class _CumulativeCommit:
    """Commits a record (and every earlier one of its partition) with a cumulative acknowledgement."""

    __slots__ = ("_subscription",)

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription

    async def commit(self, record: Record) -> None:
        consumer = self._subscription.consumer
        if consumer is None or self._subscription.closed:
            raise ClosedError("the consumer that read this record is closed")
        try:
            consumer.acknowledge_cumulative(record.raw)
        except _pulsar.PulsarException as exc:
            raise translate(
                exc, f"committing {record.topic}[{record.partition}]@{record.offset}", AckError
            ) from None


class _HandleRecords(RecordIteration):
    """What both record iterators share: records read through one client consumer or reader."""

    _handle: ClientHandle
    _committer: Committer

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record; raises ``Timeout`` when none arrives within ``timeout`` seconds."""
        handle = self._handle
        if handle.handle is None:
            await handle.open(timeout)
        raw = await handle.fetcher.take(timeout)
        return to_records((raw,), self._committer, time.time())[0]

    async def close(self) -> None:
        """Close the client consumer or reader (a group keeps its committed position). Idempotent."""
        await self._handle.close()

    async def __aenter__(self) -> Self:
        await self._handle.open()
        return self


class PulsarRecordIterator(_HandleRecords):
    """A RecordIterator over a durable failover subscription (the group); ``ack()`` commits cumulatively."""

    def __init__(self, client: Any, topics: Sequence[str], group: str, options: ConsumerOptions) -> None:
        if options.subscription_type not in ("failover", "exclusive"):
            raise ConfigError(
                "records() needs one active consumer per partition: subscription_type failover or exclusive"
            )
        if options.max_attempts is not None:
            raise ConfigError("records() do not dead-letter: there are no per-record nacks")
        self.topics = tuple(topics)
        self.group = group
        chunk = min(options.receiver_queue_size, MAX_CHUNK)
        names: str | list[str] = self.topics[0] if len(self.topics) == 1 else list(self.topics)
        self._handle = subscription = Subscription(client, names, group, options, chunk)
        self._committer = _CumulativeCommit(subscription)

    def __repr__(self) -> str:
        return f"<PulsarRecordIterator {','.join(self.topics)} group={self.group!r}>"


class _ReaderPosition:
    """``Record.ack()`` of a reader's records: remembers the furthest acknowledged record."""

    __slots__ = ("_reader",)

    def __init__(self, reader: PulsarReader) -> None:
        self._reader = reader

    async def commit(self, record: Record) -> None:
        reader = self._reader
        best = reader._acked
        if best is None or (record.topic, record.partition) != (best.topic, best.partition):
            reader._acked = record
        elif record.offset > best.offset:
            reader._acked = record


class _ReaderHandle(ClientHandle):
    """The client reader of a :class:`PulsarReader`, with its receiving thread."""

    def __init__(self, client: Any, topic: str, start: Any, conf: Any, chunk: int) -> None:
        super().__init__("reader", repr(topic), f"creating a reader of {topic!r}")
        self._client = client
        self._topic = topic
        self._start = start
        self._conf = conf
        self._chunk = chunk
        self.fetcher = Fetcher(self._read, self._read_more if chunk > 1 else None, chunk, topic)
        self._create_soon()

    def _request(self, done: Callable[[Any], None]) -> None:
        self._client.create_reader_async_v2(self._topic, self._start, self._conf, done)

    def _read(self, timeout_ms: int) -> Any:
        return self.handle.read_next(timeout_ms)

    def _read_more(self) -> list[Any]:
        out: list[Any] = []
        read = self.handle.read_next
        try:
            while len(out) < self._chunk - 1:
                out.append(read(0))
        except _pulsar.Timeout:
            pass
        return out


class PulsarReader(_HandleRecords):
    """A RecordIterator over a Pulsar reader: replay a topic from a message id; no broker-side state."""

    def __init__(
        self,
        client: Any,
        topic: str,
        start: Any = "earliest",
        *,
        inclusive: bool = False,
        receiver_queue_size: int = 1000,
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"a topic name must be a non-empty string, got {topic!r}")
        if receiver_queue_size < 1:
            raise ConfigError(f"receiver_queue_size must be >= 1, got {receiver_queue_size}")
        self.topic = topic
        conf = _pulsar.ReaderConfiguration()
        conf.receiver_queue_size(receiver_queue_size)
        conf.start_message_id_inclusive(inclusive)
        self._acked: Record | None = None
        self._committer = _ReaderPosition(self)
        chunk = min(receiver_queue_size, MAX_CHUNK)
        self._handle = _ReaderHandle(client, topic, message_id(start), conf, chunk)

    def __repr__(self) -> str:
        return f"<PulsarReader {self.topic!r}>"

    @property
    def position(self) -> str | None:
        """The message id of the furthest acknowledged record (start a later reader there, exclusive)."""
        record = self._acked
        return None if record is None else message_id_text(record.raw)
