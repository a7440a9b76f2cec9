"""Writing to the two topics: markers (MarkerProducer), payloads (MessageSender), and the queue Producer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Mapping

from backends.kafka.queue.config import HEADER_KEY, QueueConfig
from backends.kafka.queue.markers import Marker, MarkerType, MessageId, encode_marker
from broker.attributes import validate_attributes
from broker.log import Log, TopicPartition

__all__ = ["MarkerProducer", "MessageSender", "Producer"]

log = logging.getLogger("backends.kafka.queue")


class MarkerProducer:
    """Writes START, KEEPALIVE and END markers, keyed by queue id so a queue's markers stay in order."""

    def __init__(self, log_port: Log, config: QueueConfig) -> None:
        self._log = log_port
        self._config = config

    def _send(self, queue_id: str, marker: Marker) -> Awaitable[tuple[TopicPartition, int]]:
        return self._log.send(self._config.marker_topic, encode_marker(marker), key=queue_id)

    async def start(self, queue_id: str, markers: Iterable[Marker]) -> None:
        """Write START markers for a fetched batch and wait for all of them together."""
        sends = [self._send(queue_id, m) for m in markers]
        if sends:
            await asyncio.gather(*sends)

    def keepalive(
        self, queue_id: str, ids: Iterable[MessageId], redeliver_after_ms: int
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """Queue KEEPALIVE markers: each message may go ``redeliver_after_ms`` more without settling."""
        return [
            self._send(queue_id, Marker(MarkerType.KEEPALIVE, mid, redeliver_after_ms=redeliver_after_ms))
            for mid in ids
        ]

    def end(self, queue_id: str, ids: Iterable[MessageId]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """Queue END markers: the messages are done and will not be redelivered."""
        return [self._send(queue_id, Marker(MarkerType.END, mid)) for mid in ids]


class MessageSender:
    """Writes payloads to a topic (the queue topic, or a dead-letter topic)."""

    def __init__(self, log_port: Log) -> None:
        self._log = log_port

    def send(
        self, topic: str, value: bytes, *, key: str | None, headers: Mapping[str, str] | None = None
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one record; await the result to know it was written."""
        return self._log.send(topic, value, key=key, attributes=headers)


class Producer:
    """Sends messages to one logical queue (record key = queue id, as kafka-mq-go does).

    An application key travels in the ``mq-key`` header; attributes become headers.
    """

    def __init__(self, log_port: Log, config: QueueConfig, queue_id: str) -> None:
        if not queue_id:
            raise ValueError("a queue id is needed")
        self._sender = MessageSender(log_port)
        self._log = log_port
        self._config = config
        self.queue_id = queue_id
        self._pending: set[asyncio.Future[tuple[TopicPartition, int]]] = set()

    def _headers(self, key: str | None, attributes: Mapping[str, str] | None) -> dict[str, str] | None:
        if attributes:
            validate_attributes(attributes)
        if key is None and not attributes:
            return None
        headers = dict(attributes or {})
        if key is not None:
            headers[HEADER_KEY] = key
        return headers

    async def send(
        self, payload: bytes, *, key: str | None = None, attributes: Mapping[str, str] | None = None
    ) -> tuple[TopicPartition, int]:
        """Send one message and wait until the log has it."""
        return await self._sender.send(
            self._config.message_topic, payload, key=self.queue_id, headers=self._headers(key, attributes)
        )

    def send_async(
        self, payload: bytes, *, key: str | None = None, attributes: Mapping[str, str] | None = None
    ) -> asyncio.Future[tuple[TopicPartition, int]]:
        """Queue one message without waiting; the future resolves when it is written."""
        future = asyncio.ensure_future(
            self._sender.send(
                self._config.message_topic, payload, key=self.queue_id, headers=self._headers(key, attributes)
            )
        )
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message sent so far was written (raises the first failure)."""
        async with asyncio.timeout(timeout):
            if self._pending:
                await asyncio.gather(*list(self._pending))
            await self._log.flush()
