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

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Self

import _pulsar  # type: ignore[import-not-found]

from broker.backends.pulsar.callbacks import error_or_value, outcome, wait
from broker.backends.pulsar.consumer import CLOSE_TIMEOUT, MAX_CHUNK, Subscription, log
from broker.backends.pulsar.errors import translate
from broker.backends.pulsar.fetcher import Fetcher
from broker.backends.pulsar.mapping import message_id, message_id_text, to_records
from broker.backends.pulsar.settings import ConsumerOptions
from broker.errors import AckError, BrokerError, ClosedError, ConfigError, ReceiveError
from broker.message import Record
from broker.resources import RecordIteration

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


class PulsarRecordIterator(RecordIteration):
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
        self._subscription = Subscription(client, names, group, options, chunk)
        self._fetcher = self._subscription.fetcher
        self._committer = _CumulativeCommit(self._subscription)

    def __repr__(self) -> str:
        return f"<PulsarRecordIterator {','.join(self.topics)} group={self.group!r}>"

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record; raises ``Timeout`` when none arrives within ``timeout`` seconds."""
        if self._subscription.consumer is None:
            await self._subscription.open(timeout)
        raw = await self._fetcher.take(timeout)
        return to_records((raw,), self._committer, time.time())[0]

    async def close(self) -> None:
        """Close the consumer; the group keeps its committed position. Idempotent."""
        await self._subscription.close()

    async def __aenter__(self) -> Self:
        await self._subscription.open()
        return self


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


class PulsarReader(RecordIteration):
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
        self._client = client
        self._start = message_id(start)
        self._conf = _pulsar.ReaderConfiguration()
        self._conf.receiver_queue_size(receiver_queue_size)
        self._conf.start_message_id_inclusive(inclusive)
        self._chunk = min(receiver_queue_size, MAX_CHUNK)
        self._future: asyncio.Future[Any] | None = None
        self._reader: Any = None
        self._closed = False
        self._acked: Record | None = None
        self._fetcher = Fetcher(self._read, self._read_more if self._chunk > 1 else None, self._chunk, topic)
        self._position = _ReaderPosition(self)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._create(loop)

    def __repr__(self) -> str:
        return f"<PulsarReader {self.topic!r}>"

    @property
    def position(self) -> str | None:
        """The message id of the furthest acknowledged record (start a later reader there, exclusive)."""
        record = self._acked
        return None if record is None else message_id_text(record.raw)

    def _create(self, loop: asyncio.AbstractEventLoop) -> None:
        future: asyncio.Future[Any] = loop.create_future()
        self._client.create_reader_async_v2(self.topic, self._start, self._conf, error_or_value(future))
        self._future = future

    def _read(self, timeout_ms: int) -> Any:
        return self._reader.read_next(timeout_ms)

    def _read_more(self) -> list[Any]:
        out: list[Any] = []
        read = self._reader.read_next
        try:
            while len(out) < self._chunk - 1:
                out.append(read(0))
        except _pulsar.Timeout:
            pass
        return out

    async def _open(self, timeout: float | None = None) -> None:
        if self._reader is not None:
            return
        if self._closed:
            raise ClosedError(f"the reader of {self.topic!r} is closed")
        loop = asyncio.get_running_loop()
        if self._future is None:
            self._create(loop)
        assert self._future is not None
        reader = await wait(
            asyncio.shield(self._future), f"creating a reader of {self.topic!r}", ReceiveError, timeout
        )
        if self._closed:
            raise ClosedError(f"the reader of {self.topic!r} is closed")
        if self._reader is None:
            self._reader = reader
            self._fetcher.start(loop)

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record; raises ``Timeout`` when none arrives within ``timeout`` seconds."""
        if self._reader is None:
            await self._open(timeout)
        raw = await self._fetcher.take(timeout)
        return to_records((raw,), self._position, time.time())[0]

    async def close(self) -> None:
        """Close the reader. Idempotent; never waits more than a few seconds."""
        if self._closed:
            return
        self._closed = True
        self._fetcher.close()
        reader = self._reader
        if reader is None and self._future is not None:
            try:
                reader = await wait(
                    asyncio.shield(self._future), "creating a reader", ReceiveError, CLOSE_TIMEOUT
                )
            except (BrokerError, TimeoutError):
                reader = None
        if reader is None:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reader.close_async(outcome(future))
        try:
            await wait(future, f"closing the reader of {self.topic!r}", ReceiveError, CLOSE_TIMEOUT)
        except (BrokerError, TimeoutError) as exc:
            log.warning("closing the reader of %s: %s", self.topic, exc)

    async def __aenter__(self) -> Self:
        await self._open()
        return self
