"""MqClient: the consumer side of the marker protocol for one logical queue.

``next_batch`` reads records of the queue, writes their START markers (all of a batch together,
waiting for every one), and only then commits the read position: a crash between the two
duplicates a message (the tracker redelivers it) and never loses one. A failure on either
step sets ``needs_reset``; a failing poll sets ``needs_reconnect``; the caller repairs them
with ``reset()`` / ``reconnect()`` before the next batch, as kafka-mq-go does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal

from backends.kafka.queue.config import HEADER_ATTEMPT, HEADER_REDELIVERY_FOR, QueueConfig
from backends.kafka.queue.markers import Marker, MarkerType, MessageId, encode_start
from backends.kafka.queue.producer import MarkerProducer
from broker.errors import BrokerError, ClosedError, ReceiveError
from broker.log import OFFSET_BEGINNING, Log, LogConsumer, TopicPartition
from broker.message import Record

__all__ = ["MqClient", "RecordFilter", "by_key", "by_redelivery_header"]

log = logging.getLogger("backends.kafka.queue")

#: Decides whether a record of the queue topic belongs to this queue.
RecordFilter = Callable[[Record], bool]


def by_key(queue_id: str) -> RecordFilter:
    """kafka-mq-go's rule: the record key is the queue id."""
    return lambda record: record.key == queue_id


def by_redelivery_header(queue_id: str) -> RecordFilter:
    """Topic mode: every record, except copies redelivered for another queue."""

    def accept(record: Record) -> bool:
        target = record.attributes.get(HEADER_REDELIVERY_FOR) if record.attributes else None
        return target is None or target == queue_id

    return accept


class MqClient:
    """One queue consumer's connection to the queue topic and the markers topic."""

    def __init__(
        self,
        log_port: Log,
        config: QueueConfig,
        queue_id: str,
        *,
        mode: Literal["queue", "topic"] = "queue",
        group: str | None = None,
    ) -> None:
        self._log = log_port
        self.config = config
        self.queue_id = queue_id
        self.group = group or f"{config.group_prefix}{queue_id}"
        #: ``queue``: kafka-mq-go's layout, records keyed by queue id (many queues share a topic);
        #: ``topic``: every record of the topic is the queue's (the portable ``messages()``).
        self.mode = mode
        self.accept = by_key(queue_id) if mode == "queue" else by_redelivery_header(queue_id)
        self.markers = MarkerProducer(log_port, config)
        self._consumer: LogConsumer | None = None
        self.needs_reset = False
        self.needs_reconnect = False
        self._closed = False
        self._settling: asyncio.Future[None] | None = None
        self._timeout_ms = config.redelivery_timeout_ms

    def _ensure_consumer(self) -> LogConsumer:
        if self._consumer is None:
            self._consumer = self._log.consumer(self.group, [self.config.message_topic], start="earliest")
        return self._consumer

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("the queue client is closed")
        if self.needs_reconnect:
            raise ReceiveError("the queue client needs reconnect() first")
        if self.needs_reset:
            raise ReceiveError("the queue client needs reset() first")

    async def next_batch(self, max_messages: int, timeout: float) -> list[Record]:
        """The queue's next records, each with a START marker written, read position committed."""
        self._check()
        consumer = self._ensure_consumer()
        try:
            records = await consumer.poll(max_messages, timeout)
        except ClosedError:
            raise
        except Exception as exc:
            self.needs_reconnect = True
            raise ReceiveError(f"polling the queue topic failed: {exc}") from exc
        if not records:
            return []
        settled = self._settling = asyncio.get_running_loop().create_future()
        try:
            mine = [r for r in records if self.accept(r)]
            if mine:
                try:
                    await self.markers.start(self.queue_id, [self.encoded_start(r) for r in mine])
                except Exception as exc:
                    self.needs_reset = True
                    raise BrokerError(f"writing START markers failed: {exc}") from exc
            positions: dict[TopicPartition, int] = {}
            for record in records:
                tp = TopicPartition(record.topic, record.partition)
                if record.offset + 1 > positions.get(tp, -1):
                    positions[tp] = record.offset + 1
            try:
                await consumer.commit(positions)
            except Exception as exc:
                self.needs_reset = True
                raise BrokerError(f"committing the queue position failed: {exc}") from exc
            return mine
        finally:
            settled.set_result(None)

    async def settled(self) -> None:
        """Wait until the batch being started and committed (if any) is done.

        Close after this, never between the two steps: cut there, a batch would be both
        redelivered (it has START markers) and read again (its position was not committed).
        """
        if self._settling is not None and not self._settling.done():
            await asyncio.shield(self._settling)

    def start_marker(self, record: Record) -> Marker:
        """The START marker of ``record``: its key, payload, attributes and delivery attempt."""
        attributes = dict(record.attributes) if record.attributes else {}
        attempt = int(attributes.get(HEADER_ATTEMPT, "1") or 1)
        return Marker(
            MarkerType.START,
            MessageId(record.partition, record.offset),
            redeliver_after_ms=self.config.redelivery_timeout_ms,
            key=(record.key or "").encode(),
            value=record.value or b"",
            delivery_attempt=attempt,
            headers=attributes,
        )

    def encoded_start(self, record: Record) -> bytes:
        """``encode_marker(self.start_marker(record))``, without building the Marker."""
        attributes = record.attributes
        attempt = int(attributes.get(HEADER_ATTEMPT, "1") or 1) if attributes else 1
        return encode_start(
            record.partition,
            record.offset,
            self._timeout_ms,
            (record.key or "").encode(),
            record.value or b"",
            attempt,
            attributes,
        )

    def processing_in_progress(
        self, ids: Iterable[MessageId], redeliver_after: float | None = None
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """KEEPALIVE for ``ids`` (pipelined); ``redeliver_after`` seconds overrides the timeout."""
        after = self.config.redelivery_timeout_ms if redeliver_after is None else int(redeliver_after * 1000)
        return self.markers.keepalive(self.queue_id, ids, after)

    def processed(self, ids: Iterable[MessageId]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """END for ``ids`` (pipelined)."""
        return self.markers.end(self.queue_id, ids)

    async def reset(self) -> None:
        """Rewind every assigned partition to its committed offset (un-started messages are read again)."""
        consumer = self._ensure_consumer()
        assignment = list(consumer.assignment())
        if assignment:
            committed = await self._log.committed(self.group, assignment)
            for tp in assignment:
                offset = committed.get(tp)
                consumer.seek(tp, OFFSET_BEGINNING if offset is None else offset)
        self.needs_reset = False

    async def reconnect(self) -> None:
        """Replace the group consumer with a new one (it resumes from the committed offsets)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                await consumer.close()
            except Exception as exc:
                log.warning("closing the old queue consumer failed: %r", exc)
        self._ensure_consumer()
        self.needs_reconnect = False
        self.needs_reset = False

    async def close(self) -> None:
        """Leave the group. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._consumer is not None:
            await self._consumer.close()
