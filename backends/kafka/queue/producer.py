"""Writing to the two topics: markers (MarkerProducer), payloads (MessageSender), and the queue Producer."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import cast

from backends.kafka.queue.config import HEADER_KEY, QueueConfig
from backends.kafka.queue.markers import (
    Handout,
    Marker,
    MarkerType,
    MessageId,
    OffsetRange,
    encode_batch_marker,
    encode_id_marker,
    encode_marker,
)
from broker.attributes import validate_attributes
from broker.log import Log, TopicPartition

__all__ = ["MarkerProducer", "MessageSender", "Producer"]

log = logging.getLogger("backends.kafka.queue")


class MarkerProducer:
    """Writes START, KEEPALIVE and END markers, keyed by queue id so a queue's markers stay in order."""

    def __init__(self, log_port: Log, config: QueueConfig) -> None:
        self._log = log_port
        self._config = config

    def _send(self, queue_id: str, marker: bytes) -> Awaitable[tuple[TopicPartition, int]]:
        return self._log.send(self._config.marker_topic, marker, key=queue_id)

    async def start(self, queue_id: str, markers: Iterable[Marker | bytes]) -> None:
        """Write START markers (or their encodings) for a fetched batch and wait for all together."""
        send = self._send
        sends = [send(queue_id, m if isinstance(m, bytes) else encode_marker(m)) for m in markers]
        if all(isinstance(s, asyncio.Future) and s.done() for s in sends):
            # Already written (an in-memory log): no yield, so polling, START and commit stay atomic.
            for done in sends:
                cast("asyncio.Future[tuple[TopicPartition, int]]", done).result()
            return
        await asyncio.gather(*sends)

    def keepalive(
        self, queue_id: str, ids: Iterable[MessageId], redeliver_after_ms: int
    ) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """Queue KEEPALIVE markers: each message may go ``redeliver_after_ms`` more without settling."""
        send, keepalive = self._send, MarkerType.KEEPALIVE
        return [send(queue_id, encode_id_marker(keepalive, p, o, redeliver_after_ms)) for p, o in ids]

    async def start_batch(
        self,
        queue_id: str,
        ranges: Sequence[OffsetRange],
        redeliver_after_ms: int,
        *,
        prefetched: bool = False,
    ) -> None:
        """Write one batched START for every message of ``ranges`` and wait until it is written.

        ``prefetched``: hand-out marks follow (a redelivery counts only marked messages).
        """
        marker = encode_batch_marker(MarkerType.START, ranges, redeliver_after_ms, prefetched=prefetched)
        sent = self._send(queue_id, marker)
        if isinstance(sent, asyncio.Future) and sent.done():
            sent.result()  # already written (an in-memory log): no yield
            return
        await sent

    def keepalive_batch(
        self, queue_id: str, ranges: Sequence[OffsetRange], redeliver_after_ms: int
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one batched KEEPALIVE: the messages of ``ranges`` may go ``redeliver_after_ms`` more."""
        return self._send(queue_id, encode_batch_marker(MarkerType.KEEPALIVE, ranges, redeliver_after_ms))

    def handout_batch(
        self, queue_id: str, ranges: Sequence[OffsetRange], redeliver_after_ms: int, handout: Handout
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one batched KEEPALIVE that marks the messages of ``ranges`` handed out (or returned)."""
        marker = encode_batch_marker(MarkerType.KEEPALIVE, ranges, redeliver_after_ms, handout=handout)
        return self._send(queue_id, marker)

    def end_batch(
        self, queue_id: str, ranges: Sequence[OffsetRange]
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one batched END: the messages of ``ranges`` are done."""
        return self._send(queue_id, encode_batch_marker(MarkerType.END, ranges))

    def end(self, queue_id: str, ids: Iterable[MessageId]) -> list[Awaitable[tuple[TopicPartition, int]]]:
        """Queue END markers: the messages are done and will not be redelivered."""
        send, end = self._send, MarkerType.END
        return [send(queue_id, encode_id_marker(end, p, o)) for p, o in ids]


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


class Producer:
    """Sends messages to one logical queue (record key = queue id, as kafka-mq-go does).

    Records go to a random partition of the queue topic (kafka-mq-go's producer uses librdkafka's
    ``random`` partitioner): keyed by the queue id alone they would all land in one partition, and
    a queue's competing consumers could not share its work. An application key travels in the
    ``mq-key`` header; attributes become headers.
    """

    def __init__(self, log_port: Log, config: QueueConfig, queue_id: str) -> None:
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
