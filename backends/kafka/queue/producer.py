"""Writing payloads: to a topic (MessageSender), and to one logical queue (QueueProducer).

Markers are written by :class:`broker.backends.kafka.queue.markers.MarkerProducer`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Mapping

from broker.backends.kafka.queue.settings import HEADER_KEY, QueueSettings
from broker.driver.attributes import validate_attributes
from broker.log import Log, TopicPartition

__all__ = ["MessageSender", "QueueProducer"]

log = logging.getLogger("broker.backends.kafka.queue")


class MessageSender:
    """Writes payloads to a topic (the queue topic, or a dead-letter topic)."""

    def __init__(self, log_port: Log) -> None:
        self._log = log_port

    def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: str | None,
        headers: Mapping[str, str] | None = None,
        partition: int | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one record (to ``partition``, else by key); await the result to know it was written."""
        return self._log.send(topic, value, key=key, partition=partition, attributes=headers)


class QueueProducer:
    """Sends messages to one logical queue (record key = queue id, as kafka-mq-go does).

    Records go to a random partition of the queue topic (kafka-mq-go's producer uses librdkafka's
    ``random`` partitioner): keyed by the queue id alone they would all land in one partition, and
    a queue's competing consumers could not share its work. An application key travels in the
    ``mq-key`` header; attributes become headers.
    """

    def __init__(self, log_port: Log, config: QueueSettings, queue_id: str) -> None:
        if not queue_id:
            raise ValueError("a queue id is needed")
        self._sender = MessageSender(log_port)
        self._log = log_port
        self._config = config
        self.queue_id = queue_id
        self._pending: set[asyncio.Future[tuple[TopicPartition, int]]] = set()
        self._partition_count: int | None = None

    def _headers(self, key: str | None, attributes: Mapping[str, str] | None) -> dict[str, str] | None:
        if attributes:
            validate_attributes(attributes)
        if key is None and not attributes:
            return None
        headers = dict(attributes or {})
        if key is not None:
            headers[HEADER_KEY] = key
        return headers

    async def _count(self) -> int | None:
        """The queue topic's partition count (looked up once; None if it cannot be known yet)."""
        if self._partition_count is None:
            try:
                self._partition_count = await self._log.partitions(self._config.message_topic)
            except Exception as exc:  # e.g. not created yet: the log's partitioner decides
                log.debug("partitions of %r unknown (%r): sending by key", self._config.message_topic, exc)
        return self._partition_count

    def _write(
        self, payload: bytes, headers: dict[str, str] | None, count: int | None
    ) -> Awaitable[tuple[TopicPartition, int]]:
        return self._sender.send(
            self._config.message_topic,
            payload,
            key=self.queue_id,
            headers=headers,
            partition=random.randrange(count) if count else None,
        )

    async def _send(self, payload: bytes, headers: dict[str, str] | None) -> tuple[TopicPartition, int]:
        return await self._write(payload, headers, await self._count())

    async def send(
        self, payload: bytes, *, key: str | None = None, attributes: Mapping[str, str] | None = None
    ) -> tuple[TopicPartition, int]:
        """Send one message and wait until the log has it."""
        return await self._send(payload, self._headers(key, attributes))

    def send_async(
        self, payload: bytes, *, key: str | None = None, attributes: Mapping[str, str] | None = None
    ) -> asyncio.Future[tuple[TopicPartition, int]]:
        """Queue one message without waiting; the future resolves when it is written."""
        headers = self._headers(key, attributes)
        if self._partition_count is None:
            future = asyncio.ensure_future(self._send(payload, headers))
        else:
            future = asyncio.ensure_future(self._write(payload, headers, self._partition_count))
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message sent so far was written (raises the first failure)."""
        async with asyncio.timeout(timeout):
            if self._pending:
                await asyncio.gather(*list(self._pending))
            await self._log.flush()
