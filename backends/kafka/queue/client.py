"""MqClient: the consumer side of the marker protocol for one logical queue.

``poll`` reads records of the queue, ``start`` writes their START markers (one batched marker, or
one per message, waiting for them), and only then ``commit`` commits the read position
(the queue consumer does the three in a row): a crash between the two duplicates a message (the
tracker redelivers it) and never loses one. A failure on either
step sets ``needs_reset``; a poll failing with an error only a new client cures (a fatal
librdkafka error, ``_MAX_POLL_EXCEEDED``: see :func:`~.errors.is_reconnect_required`) sets
``needs_reconnect``; the caller repairs them with ``reset()`` / ``reconnect()`` before the next
batch, as kafka-mq-go does. A transient poll failure (a timeout, a lost connection) needs no
repair: the next poll simply tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Literal

from broker.backends.kafka.queue.errors import is_reconnect_required
from broker.backends.kafka.queue.markers import (
    Handout,
    MarkerFormat,
    MarkerProducer,
    OffsetRange,
    marker_format_for,
)
from broker.backends.kafka.queue.settings import QueueSettings
from broker.backends.kafka.queue.source import QueueSource, source_for
from broker.errors import AuthenticationFailed, BrokerError, ClosedError, PermissionDenied, ReceiveError
from broker.log import OFFSET_BEGINNING, Log, LogConsumer, ReadHints, TopicPartition

__all__ = ["MqClient"]

log = logging.getLogger("broker.backends.kafka.queue")


def read_hints(config: QueueSettings, *, min_bytes: int = 1) -> ReadHints:
    """How queue consumers and trackers read (a log applies what it can, see ``broker.log.ReadHints``).

    * ``failure_timeout`` follows the redelivery timeout: a crashed member's partitions move to the
      others within about it, so its unread messages are read again within about twice the
      redelivery timeout (on Kafka: a session between 6 and 10 s, never above the connection's).
    * ``min_bytes=1``: a fetch returns as soon as anything is there (a queue is about latency;
      under load the fetches are full anyway).
    """
    return ReadHints(min_bytes=min_bytes, failure_timeout=config.redelivery_timeout)


class MqClient:
    """One queue consumer's connection to the queue topic and the markers topic."""

    def __init__(
        self,
        log_port: Log,
        config: QueueSettings,
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
        self.markers = MarkerProducer(log_port, config)
        #: How markers are written (batched, or one per message): chosen once, here.
        self.marker_format: MarkerFormat = marker_format_for(config, self.markers, queue_id)
        self._consumer: LogConsumer | None = None
        #: Turns polled records into messages and offset ranges (set with the consumer).
        self.source: QueueSource | None = None
        self.needs_reset = False
        self.needs_reconnect = False
        self._closed = False
        self._timeout_ms = config.redelivery_timeout_ms

    def _ensure_consumer(self) -> LogConsumer:
        if self._consumer is None:
            self._consumer = self._log.consumer(
                self.group,
                [self.config.message_topic],
                start="earliest",
                hints=read_hints(self.config),
            )
            self.source = source_for(
                self._consumer, self.queue_id, self.mode, raw=self.marker_format.reads_raw
            )
        return self._consumer

    @property
    def consumer(self) -> LogConsumer | None:
        """The group consumer of the queue topic (None before the first poll)."""
        return self._consumer

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("the queue client is closed")
        if self.needs_reconnect:
            raise ReceiveError("the queue client needs reconnect() first")
        if self.needs_reset:
            raise ReceiveError("the queue client needs reset() first")

    async def poll(self, max_messages: int, timeout: float) -> tuple[list[Any], dict[TopicPartition, int]]:
        """Read the next records: ``(this queue's, positions to commit once they are started)``.

        Nothing is started or committed yet: :meth:`start` then :meth:`commit`, in that order.
        """
        self._check()
        self._ensure_consumer()
        assert self.source is not None
        try:
            return await self.source.poll(max_messages, timeout)
        except (ClosedError, AuthenticationFailed, PermissionDenied):
            raise  # a refusal keeps its class: the consumer hands it to the application
        except Exception as exc:
            if is_reconnect_required(exc):
                self.needs_reconnect = True
            raise ReceiveError(f"polling the queue topic failed: {exc}") from exc

    async def start(self, items: list[Any], *, prefetched: bool = False) -> None:
        """Write the START markers of ``items`` (one batched START, or one per message) and wait.

        ``prefetched`` (batched markers only): hand-out marks follow, see ``QueueConsumer``.
        """
        if not items:
            return
        source = self.source
        assert source is not None
        try:
            await self.marker_format.start(items, source.polled_ranges, prefetched=prefetched)
        except Exception as exc:
            self.needs_reset = True
            raise BrokerError(f"writing START markers failed: {exc}") from exc

    async def commit(self, positions: dict[TopicPartition, int]) -> None:
        """Commit the read position (only after the START markers of everything before it)."""
        if not positions:
            return
        consumer = self._ensure_consumer()
        try:
            await consumer.commit(positions)
        except Exception as exc:
            self.needs_reset = True
            raise BrokerError(f"committing the queue position failed: {exc}") from exc

    def keepalive_ranges(
        self, ranges: list[OffsetRange], redeliver_after: float | None = None
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """KEEPALIVE for every message of ``ranges`` (pipelined)."""
        if not ranges:
            return []
        after = self._timeout_ms if redeliver_after is None else int(redeliver_after * 1000)
        return self.marker_format.keepalive(ranges, after)

    def handout_ranges(
        self, ranges: list[OffsetRange], *, returned: bool = False, redeliver_after: float | None = None
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Mark every message of ``ranges`` handed out to the application (or ``returned`` unseen).

        A KEEPALIVE (so the deadline restarts at hand-out); only with ``config.marks_handout``.
        """
        after = self._timeout_ms if redeliver_after is None else int(redeliver_after * 1000)
        handout = Handout.RETURNED if returned else Handout.HANDED
        return self.markers.handout_batch(self.queue_id, ranges, after, handout)

    def processed_ranges(self, ranges: list[OffsetRange]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """END for every message of ``ranges`` (pipelined)."""
        if not ranges:
            return []
        return self.marker_format.end(ranges)

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
