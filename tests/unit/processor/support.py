"""Helpers of the processor tests: an in-memory log, a compacted ``table`` topic on it (the ``log``
fixture), and a wrapper that makes sends fail."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.driver.partitioning import partitioner_by_name
from broker.errors import PublishError
from broker.log import (
    Log,
    LogConsumer,
    LogReader,
    ReadHints,
    RebalanceListener,
    StartPosition,
    TopicPartition,
)

#: The partitioner the ``table`` topic is written with.
murmur2 = partitioner_by_name("murmur2")


def inmem_backend() -> InmemBackend:
    backend = broker.connect(f"inmem://processor-{uuid.uuid4().hex}")
    assert isinstance(backend, InmemBackend)
    return backend


@pytest.fixture(name="log")
async def table_log() -> AsyncIterator[InmemLog]:
    """The ``log`` fixture: an in-memory log with a compacted ``table`` topic of 3 partitions.

    Import ``table_log`` into a test module to use it.
    """
    backend = inmem_backend()
    async with backend:
        log = backend.log()
        await log.create_topic("table", 3, config={"cleanup.policy": "compact"})
        yield log


async def put(log: Log, key: str, value: bytes | None) -> None:
    """Write ``key`` to the ``table`` topic, in the partition murmur2 picks for it."""
    await log.produce("table", value, key=key, partition=murmur2(key.encode(), 3))


class FlakyLog:
    """A Log that forwards to ``inner`` but fails sends to ``fail_topics`` while armed."""

    def __init__(self, inner: InmemLog) -> None:
        self.inner = inner
        self.fail_topics: set[str] = set()
        self.fail_after: int = 0
        self.sent: dict[str, int] = {}
        self.broken_reads = 0
        #: ``(what, client_id)`` of every producer, consumer and reader use that named a client id.
        self.client_ids: list[tuple[str, str | None]] = []

    async def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        await self.inner.create_topic(name, partitions, config=config)

    async def partitions(self, topic: str) -> int:
        return await self.inner.partitions(topic)

    async def watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        if self.broken_reads:
            self.broken_reads -= 1
            raise ConnectionError("broker unreachable")
        return await self.inner.watermarks(partition)

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        if client_id is not None:
            self.client_ids.append((f"send:{topic}", client_id))
        count = self.sent[topic] = self.sent.get(topic, 0) + 1
        if topic in self.fail_topics and count > self.fail_after:
            future: asyncio.Future[tuple[TopicPartition, int]] = asyncio.get_running_loop().create_future()
            future.set_exception(PublishError(f"injected failure writing to {topic}"))
            return future
        return self.inner.send(topic, value, key=key, partition=partition, attributes=attributes)

    async def produce(self, topic: str, value: bytes | None, **kwargs: Any) -> tuple[TopicPartition, int]:
        return await self.send(topic, value, **kwargs)

    async def flush(self, timeout: float | None = None) -> None:
        await self.inner.flush(timeout)

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start: StartPosition = "earliest",
        listener: RebalanceListener | None = None,
        client_id: str | None = None,
        hints: ReadHints | None = None,
    ) -> LogConsumer:
        if client_id is not None:
            self.client_ids.append((f"consumer:{group}", client_id))
        return self.inner.consumer(
            group, topics, start=start, listener=listener, client_id=client_id, hints=hints
        )

    def reader(self, *, client_id: str | None = None, hints: ReadHints | None = None) -> LogReader:
        if client_id is not None:
            self.client_ids.append(("reader", client_id))
        return self.inner.reader(client_id=client_id, hints=hints)

    async def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        return await self.inner.committed(group, partitions)

    async def close(self) -> None:
        await self.inner.close()

    async def __aenter__(self) -> FlakyLog:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def as_log(log: Any) -> Log:
    assert isinstance(log, Log)
    return log


async def committed_total(log: Log, group: str, topic: str, partitions: int) -> int:
    offsets = await log.committed(group, [TopicPartition(topic, p) for p in range(partitions)])
    return sum(v or 0 for v in offsets.values())
