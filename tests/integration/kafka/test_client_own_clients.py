"""kefka's package functions over the application's own confluent-kafka clients (issue 34, point 6).

flush_all, sync_produce and sync_produce_message on a ``confluent_kafka.Producer``; consume on a
``confluent_kafka.Consumer``; a MetadataClient made from a consumer (assignment, lag with no group).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.client import (
    MetadataClient,
    consume,
    flush_all,
    lag,
    sync_produce,
    sync_produce_message,
)
from broker.errors import ConfigError
from broker.log import TopicPartition
from broker.testing import wait_until
from tests.integration.kafka.support import ONE_RECORD_PER_BATCH, unique

confluent_kafka = pytest.importorskip("confluent_kafka")

PATIENCE = 30.0


async def test_helpers_over_the_applications_own_producer_and_consumer(
    backend: KafkaBackend, config: dict[str, Any]
) -> None:
    topic = unique("own")
    await backend.admin.create_topic(topic, 2)
    producer = confluent_kafka.Producer({**config, **ONE_RECORD_PER_BATCH})
    report = await sync_produce(producer, topic, b"k", b"v0", timeout=PATIENCE, partition=0)
    assert report.ok and report.topic == topic and report.partition == 0 and report.offset == 0
    report = await sync_produce_message(
        producer, topic, b"v1", key=b"k", partition=0, headers={"h": "1"}, timestamp=1_700_000_000_000
    )
    assert report.offset == 1
    for i in range(2, 10):
        producer.produce(topic, value=f"v{i}".encode(), key=b"k", partition=i % 2)
    await flush_all(producer, step=1.0)
    assert len(producer) == 0

    consumer = confluent_kafka.Consumer(
        {
            **config,
            "group.id": unique("own-group"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 2000,
            "heartbeat.interval.ms": 300,
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    errors: list[BaseException] = []

    async def handler(message: Any, commit: Any) -> None:
        if message.value() == b"v5" and b"v5" not in seen:
            seen.append(b"v5")
            raise RuntimeError("reported, consuming goes on")
        seen.append(message.value())
        await commit()

    task = consume(consumer, handler, errors.append, poll_timeout=0.1)
    try:
        await wait_until(lambda: len(seen) == 10, PATIENCE)
        assert len(errors) == 1 and "consuming goes on" in str(errors[0])
        metadata = MetadataClient(consumer)
        assert await metadata.assignment() == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        # The consumer's lag: no group named (its own), every message committed.
        assert await metadata.lag(topic, 0) == 0
        assert await lag(consumer, topic, 1) == 0
        assert await metadata.message_count(topic, 0) == 6
        with pytest.raises(ConfigError):
            await MetadataClient(config).assignment()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.to_thread(consumer.close)
    assert task.cancelled()
