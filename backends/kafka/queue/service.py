"""Entry points: a queue service (producers, consumers, trackers) and the portable iterators."""

from __future__ import annotations

import logging
from typing import Literal, Self

from broker import Message
from broker.backends.kafka.queue.client import MqClient
from broker.backends.kafka.queue.consumer import QueueConsumer
from broker.backends.kafka.queue.metrics import QueueMetrics
from broker.backends.kafka.queue.producer import QueueProducer
from broker.backends.kafka.queue.settings import QueueSettings
from broker.backends.kafka.queue.tracker import RedeliveryTracker
from broker.driver.provision import StartCheck
from broker.driver.resources import BatchedMessageIteration, MessageIteration
from broker.errors import ClosedError, ConfigError, ReceiveError, Timeout
from broker.log import Log

__all__ = ["QueueBatchedMessageIterator", "QueueMessageIterator", "QueueService", "open_messages"]

log = logging.getLogger("broker.backends.kafka.queue.service")


class QueueService:
    """Many logical queues on one pair of topics (kafka-mq-go's ``Service``)."""

    def __init__(self, log_port: Log, config: QueueSettings, metrics: QueueMetrics | None = None) -> None:
        self.log = log_port
        self.config = config
        self.metrics = metrics or QueueMetrics()

    async def create_topics(self, partitions: int = 1) -> None:
        """Create the message and markers topics with the same partition count (no-op if they exist)."""
        await self.log.create_topic(self.config.message_topic, partitions)
        await self.log.create_topic(self.config.marker_topic, partitions)

    def producer(self, queue_id: str) -> QueueProducer:
        """A producer for queue ``queue_id``."""
        return QueueProducer(self.log, self.config, queue_id)

    def consumer(
        self, queue_id: str, *, mode: Literal["queue", "topic"] = "queue", keepalive_received: bool = True
    ) -> QueueConsumer:
        """A consumer of queue ``queue_id`` (call ``start()`` or ``receive()`` to begin).

        ``keepalive_received`` keeps received messages alive until settled (kafka-mq-go); without
        it only buffered ones are, and received ones follow the redelivery timeout. Topic mode
        refuses ``go_fleet`` (``ConfigError``) and logs a warning with per-message markers.
        """
        if mode == "topic" and self.config.go_fleet:
            raise ConfigError(
                "go_fleet supports queue mode only: a kafka-mq-go tracker's redelivered copies carry no "
                "subscription, so in topic mode they would reach every subscription of the topic"
            )
        if mode == "topic" and self.config.marker_format == "per-message":
            log.warning(
                "queue %r: topic mode with per-message markers (marker_format='per-message' without "
                "go_fleet): a kafka-mq-go tracker watching %r can read them, and its redelivered copies "
                "name no subscription, so they would reach every subscription of %r; topic mode is safe "
                "with the default batched markers",
                queue_id,
                self.config.marker_topic,
                self.config.message_topic,
            )
        client = MqClient(self.log, self.config, queue_id, mode=mode)
        return QueueConsumer(client, self.metrics, keepalive_received=keepalive_received)

    def tracker(self) -> RedeliveryTracker:
        """A redelivery tracker (``async with`` it, or ``start()`` it)."""
        return RedeliveryTracker(self.log, self.config, metrics=self.metrics)


class QueueMessageIterator(StartCheck, MessageIteration):
    """A MessageIterator over a queue consumer; optionally runs an embedded redelivery tracker.

    The consumer and the tracker start when the iterator is entered (``async with``) or on the
    first ``next_message``. A failing embedded tracker is restarted with backoff (see
    :mod:`broker.backends.kafka.queue.tracker`); while it fails, :attr:`tracker_error` holds its error,
    and once it failed ``tracker_failures_to_raise`` times in a row, the next ``next_message``
    raises :class:`~broker.errors.ReceiveError` (once per streak; the tracker keeps restarting
    and the iterator stays usable).
    """

    #: Consecutive tracker failures after which ``next_message`` raises once.
    tracker_failures_to_raise = 3

    def __init__(self, consumer: QueueConsumer, tracker: RedeliveryTracker | None = None) -> None:
        self.consumer = consumer
        self.tracker = tracker
        self._closed = False
        self._raised_streak = 0

    @property
    def tracker_error(self) -> BaseException | None:
        """The error of the embedded tracker's last failed run (None while it runs healthy)."""
        return self.tracker.last_error if self.tracker is not None else None

    def _start(self) -> None:
        if self.tracker is not None:
            self.tracker.start()
        self.consumer.start()

    async def __aenter__(self) -> Self:
        if self._closed:
            raise ClosedError("the queue iterator is closed")
        await self._checked_start()  # provision="verify": both topics exist before anything starts
        self._start()  # the group member joins now: what is published from here on is delivered
        return self

    def _check_tracker(self) -> None:
        tracker = self.tracker
        if tracker is None:
            return
        streak = tracker.failure_streak
        if streak < self.tracker_failures_to_raise:
            self._raised_streak = 0
            return
        if self._raised_streak:
            return
        self._raised_streak = streak
        error = tracker.last_error
        raise ReceiveError(
            f"the embedded redelivery tracker failed {streak} times in a row (it keeps restarting; "
            f"nacked and expired messages are not redelivered meanwhile): {error!r}"
        ) from error

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message (``Timeout`` after ``timeout`` seconds)."""
        if self._closed:
            raise ClosedError("the queue iterator is closed")
        if self.start_check is not None:
            await self._checked_start()
        self._start()
        self._check_tracker()
        return await self.consumer.receive(timeout)

    async def close(self) -> None:
        """Close the consumer, then the embedded tracker. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.consumer.close()
        finally:
            if self.tracker is not None:
                await self.tracker.close()


class QueueBatchedMessageIterator(QueueMessageIterator, BatchedMessageIteration):
    """Batches of what the consumer has buffered, up to ``batch_size``."""

    def __init__(
        self,
        consumer: QueueConsumer,
        tracker: RedeliveryTracker | None = None,
        *,
        batch_size: int = 100,
        batch_timeout: float = 1.0,
    ) -> None:
        super().__init__(consumer, tracker)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """Up to ``batch_size`` messages: as soon as any are there, ``[]`` after the timeout."""
        try:
            first = await self.next_message(self.batch_timeout if timeout is None else timeout)
        except Timeout:
            return []
        return [first, *self.consumer.receive_ready(self.batch_size - 1)]

    __aiter__ = BatchedMessageIteration.__aiter__  # type: ignore[assignment]


def open_messages(
    log_port: Log,
    config: QueueSettings,
    subscription: str,
    *,
    embedded_tracker: bool = True,
    batch_size: int | None = None,
    batch_timeout: float = 1.0,
    metrics: QueueMetrics | None = None,
) -> QueueMessageIterator:
    """Per-message consumption of ``config.message_topic`` for ``subscription`` (topic mode).

    Every subscription sees every message of the topic; consumers of one subscription compete.
    With ``embedded_tracker`` each consumer also runs a redelivery tracker in the shared tracker
    group, so redelivery needs no separate process (and survives any one process).
    """
    service = QueueService(log_port, config, metrics)
    consumer = service.consumer(subscription, mode="topic", keepalive_received=False)
    tracker = service.tracker() if embedded_tracker else None
    if batch_size is None:
        return QueueMessageIterator(consumer, tracker)
    return QueueBatchedMessageIterator(consumer, tracker, batch_size=batch_size, batch_timeout=batch_timeout)
