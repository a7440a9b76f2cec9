"""Reading Pulsar topics as logs: replay with a reader, and durable groups."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from broker.driver.testing.harness import collect_records
from broker.errors import ConfigError
from broker.testing import collect

Name = Callable[..., str]


async def _publish(backend: PulsarBackend, topic: str, count: int) -> None:
    await (
        backend.publisher()
        .topic(topic)
        .batch_publish(
            *(OutboundMessage(str(i).encode(), key=f"k{i}", attributes={"i": str(i)}) for i in range(count))
        )
    )


async def test_reader_replays_from_earliest_and_from_a_message_id(backend: PulsarBackend, name: Name) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.create_subscription(topic, sub)
    await _publish(backend, topic, 10)
    async with backend.messages(topic, sub) as consumer:
        messages = await collect(consumer, 10, 10)
    fourth = next(m for m in messages if m.data == b"4")

    async with backend.reader(topic, "earliest") as reader:
        everything = await collect_records(reader, 10, 10)
    assert [r.value for r in everything] == [str(i).encode() for i in range(10)]
    assert [r.key for r in everything] == [f"k{i}" for i in range(10)]
    assert everything[3].attributes == {"i": "3"}
    offsets = [r.offset for r in everything]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10
    assert {r.partition for r in everything} == {0}
    assert {r.topic for r in everything} == {topic}

    async with backend.reader(topic, fourth.id) as reader:  # exclusive: starts after it
        after = await collect_records(reader, 5, 10)
        with pytest.raises(TimeoutError):
            await reader.next_record(timeout=0.3)
    assert [r.value for r in after] == [str(i).encode() for i in range(5, 10)]

    async with backend.reader(topic, fourth, inclusive=True) as reader:
        (first, *_) = await collect_records(reader, 6, 10)
    assert first.value == b"4"


async def test_reader_from_latest_and_resuming_from_its_position(backend: PulsarBackend, name: Name) -> None:
    topic = name("topic")
    await _publish(backend, topic, 5)
    async with backend.reader(topic, "latest") as reader:
        with pytest.raises(TimeoutError):
            await reader.next_record(timeout=0.3)
        await backend.publisher().topic(topic).publish(OutboundMessage(b"new"))
        record = await reader.next_record(timeout=10)
    assert record.value == b"new"

    async with backend.reader(topic) as reader:
        for record in await collect_records(reader, 3, 10):
            await record.ack()  # a reader's ack only moves its position
        position = reader.position
    assert position is not None
    async with backend.reader(topic, position) as reader:
        rest = await collect_records(reader, 3, 10)
    assert [r.value for r in rest] == [b"3", b"4", b"new"]


async def test_bad_start_positions_are_config_errors(backend: PulsarBackend, name: Name) -> None:
    with pytest.raises(ConfigError):
        backend.reader(name("topic"), "yesterday")
    with pytest.raises(ConfigError):
        backend.reader(name("topic"), 42)


async def test_group_resumes_after_its_commits(backend: PulsarBackend, name: Name) -> None:
    topic, group = name("log"), name("group")
    await _publish(backend, topic, 20)
    async with backend.records(topic, group) as records:
        first = await collect_records(records, 8, 10)
        await first[-1].ack()  # commits the 8 first (cumulative)
        await collect_records(records, 4, 10)  # read, not committed
    async with backend.records(topic, group) as records:
        rest = await collect_records(records, 12, 10)
        with pytest.raises(TimeoutError):
            await records.next_record(timeout=0.5)
    assert [int(r.value or b"") for r in rest] == list(range(8, 20))


async def test_records_refuse_shared_subscriptions(backend: PulsarBackend, name: Name) -> None:
    with pytest.raises(ConfigError):
        backend.records(name("log"), name("group"), subscription_type="shared")
