"""Interop with Kafka services that do not use polybroker (confluent-kafka on one side), both ways.

The wire places are the ones docs/interop.md lists: the value is the payload, the Kafka key the
key, attributes are record headers; polybroker adds no header of its own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer  # type: ignore[import-untyped]
from confluent_kafka import TopicPartition as SdkPartition

from broker import OutboundMessage
from broker.backends.kafka.backend import KafkaBackend
from tests.integration.kafka.support import unique

PATIENCE = 15.0


async def test_raw_confluent_producer_to_polybroker_consumer(backend: KafkaBackend) -> None:
    topic = unique("interop-in")
    await backend.admin.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": backend.settings.servers})
    producer.produce(topic, b"\x00raw-value", b"order-7", headers=[("tenant", b"acme"), ("trace", b"t-1")])
    assert await asyncio.to_thread(producer.flush, PATIENCE) == 0
    async with backend.records(topic, unique("g")) as records:
        record = await records.next_record(timeout=PATIENCE)
        await record.ack()
    assert record.value == b"\x00raw-value"
    assert record.key == "order-7"
    assert dict(record.attributes) == {"tenant": "acme", "trace": "t-1"}


async def test_polybroker_producer_to_raw_confluent_consumer(backend: KafkaBackend) -> None:
    topic = unique("interop-out")
    await backend.admin.create_topic(topic, 1)
    sent = OutboundMessage(b"\x00poly-value", key="order-7", attributes={"tenant": "acme", "trace": "t-1"})
    async with backend.publisher() as publisher:
        await publisher.topic(topic).publish(sent)
    consumer = Consumer({"bootstrap.servers": backend.settings.servers, "group.id": unique("raw")})
    consumer.assign([SdkPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: read it directly
    try:
        received: Any = None
        deadline = time.monotonic() + PATIENCE
        while received is None and time.monotonic() < deadline:
            polled = await asyncio.to_thread(consumer.poll, 0.5)
            if polled is not None and polled.error() is None:
                received = polled
    finally:
        await asyncio.to_thread(consumer.close)
    assert received is not None, "the raw consumer read nothing"
    assert received.value() == b"\x00poly-value"
    assert received.key() == b"order-7"
    assert received.headers() == [("tenant", b"acme"), ("trace", b"t-1")]  # nothing of polybroker's own
