"""``provision`` on Kafka (Tansu): an estate whose topics and consumer groups were made by others.

``verify`` and ``none`` consume and publish topics made by the raw confluent-kafka ``AdminClient``;
``verify`` names a missing topic in a ``ProvisioningError`` (publishing, ``records()``,
``messages()``) and creates nothing by trying; ``none`` creates nothing either (no client asks the
broker to auto-create). A group whose offsets a raw confluent-kafka consumer committed is joined
and continued from them. Tansu has no ACLs: permission-denied answers cannot be tested here.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, Producer  # type: ignore[import-untyped]
from confluent_kafka import TopicPartition as SdkPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[import-untyped]

import broker
from broker import OutboundMessage
from broker.backends.kafka.admin import KafkaAdmin
from broker.errors import ProvisioningError, PublishError, Timeout
from tests.integration.kafka.support import unique

PATIENCE = 15.0


def raw_topic(servers: str, name: str) -> None:
    """``name`` created with one partition by the raw SDK, as another team's tooling would."""
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(name, 1)])[name].result(PATIENCE)


async def missing(servers: str, *names: str) -> list[str]:
    """The names the cluster does not have (asked without creating them)."""
    admin = KafkaAdmin({"bootstrap.servers": servers, "allow.auto.create.topics": False}, timeout=5)
    try:
        return await admin.missing_topics(names)
    finally:
        await admin.close()


async def test_provision_verify_and_none_use_a_topic_made_by_the_raw_admin(kafka_url: str) -> None:
    servers = kafka_url.removeprefix("kafka://").split("?")[0]
    topic = unique("estate")
    await asyncio.to_thread(raw_topic, servers, topic)
    for mode in ("verify", "none"):
        async with broker.connect(f"{kafka_url}&provision={mode}") as backend:
            await backend.ping()
            await backend.publisher().topic(topic).publish(OutboundMessage(mode.encode()))
    async with broker.connect(f"{kafka_url}&provision=verify") as backend:
        async with backend.records(topic, unique("g")) as records:
            got = [(await records.next_record(timeout=PATIENCE)).value for _ in range(2)]
    assert got == [b"verify", b"none"]


async def test_provision_verify_names_missing_topics_and_creates_none(kafka_url: str) -> None:
    servers = kafka_url.removeprefix("kafka://").split("?")[0]
    made, topic = unique("made"), unique("absent")
    await asyncio.to_thread(raw_topic, servers, made)
    async with broker.connect(f"{kafka_url}&provision=verify") as backend:
        with pytest.raises(ProvisioningError, match=topic) as published:
            await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
        assert published.value.missing == (f"topic {topic!r}",)
        with pytest.raises(ProvisioningError) as consumed:
            async with backend.records([made, topic], unique("g")):
                pass
        assert consumed.value.missing == (f"topic {topic!r}",)  # the existing one is not named
        batched = backend.batched_records(topic, unique("g"))
        with pytest.raises(ProvisioningError):
            await batched.next_batch(timeout=PATIENCE)
        with pytest.raises(ProvisioningError) as queued:
            async with backend.messages(made, "sub"):  # the marker queue's topic is missing too
                pass
        assert queued.value.missing == (f"topic {made + '.markers'!r}",)
    assert await missing(servers, topic) == [topic]


async def test_provision_none_publishing_to_a_missing_topic_fails_and_creates_it_not(kafka_url: str) -> None:
    servers = kafka_url.removeprefix("kafka://").split("?")[0]
    topic = unique("absent")
    url = {"url": f"{kafka_url}&provision=none", "producer_config": {"message.timeout.ms": 500}}
    async with broker.connect(url) as backend:
        with pytest.raises((PublishError, Timeout)):
            await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
    assert await missing(servers, topic) == [topic]


async def test_a_group_committed_by_a_raw_consumer_continues_from_its_offsets(kafka_url: str) -> None:
    servers = kafka_url.removeprefix("kafka://").split("?")[0]
    topic, group = unique("estate"), unique("their-group")
    await asyncio.to_thread(raw_topic, servers, topic)
    producer = Producer({"bootstrap.servers": servers})
    for i in range(3):
        producer.produce(topic, f"m{i}".encode())
    assert await asyncio.to_thread(producer.flush, PATIENCE) == 0
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
    try:  # the other service handled m0 and m1 and committed offset 2
        await asyncio.to_thread(consumer.commit, offsets=[SdkPartition(topic, 0, 2)], asynchronous=False)
    finally:
        await asyncio.to_thread(consumer.close)
    async with broker.connect(f"{kafka_url}&provision=none") as backend:
        async with backend.records(topic, group) as records:
            record = await records.next_record(timeout=PATIENCE)
            assert (record.value, record.offset) == (b"m2", 2)
            await record.ack()
            await records.commit()
        assert await backend.backlog(topic, group) == 0
