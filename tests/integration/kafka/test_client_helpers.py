"""The Kafka helpers (``broker.backends.kafka.client``) on Tansu: producer, consumer, reader, lag, counts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.client import (
    FIRST_OFFSET,
    LAST_OFFSET,
    Consumer,
    DeliveryReport,
    MetadataClient,
    Producer,
    Reader,
    lag,
    message_count,
    read_topic_partitions,
)
from broker.codecs import JsonCodec, MsgpackCodec
from broker.driver.devserver import free_port
from broker.errors import ConfigError, EncodeError, PublishError, Timeout
from broker.log import TopicPartition
from tests.integration.kafka.support import ONE_RECORD_PER_BATCH, unique

PATIENCE = 15.0


@pytest.fixture
def group_config(config: dict[str, Any]) -> dict[str, Any]:
    return {
        **config,
        "group.id": unique("helpers"),
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 2000,
        "heartbeat.interval.ms": 300,
        "fetch.wait.max.ms": 100,
    }


@pytest.fixture
async def producer(config: dict[str, Any]) -> AsyncIterator[Producer]:
    async with Producer({**config, **ONE_RECORD_PER_BATCH}) as opened:
        yield opened


async def make_topic(backend: KafkaBackend, partitions: int = 1) -> str:
    topic = unique("helper")
    await backend.admin.create_topic(topic, partitions)
    return topic


async def read_partition(config: dict[str, Any], topic: str, count: int) -> list[Any]:
    """The first ``count`` messages of partition 0, read with a Reader."""
    got: list[Any] = []
    done = asyncio.Event()

    def handle(message: Any, commit: Any) -> None:
        got.append(message)
        if len(got) >= count:
            done.set()

    async with Reader(config, handle, {(topic, 0): FIRST_OFFSET}) as reader:
        task = asyncio.ensure_future(reader.read())
        async with asyncio.timeout(PATIENCE):
            await done.wait()
        await reader.close()
        await task
    return got


async def test_producer_codecs_round_trip(backend: KafkaBackend, config: dict[str, Any]) -> None:
    topic = await make_topic(backend)
    async with Producer(config, key_codec="str", value_codec="json") as json_producer:
        report = await json_producer.sync_produce(topic, "order-1", {"total": 12.5, "items": ["a", "b"]})
        assert report.ok and (report.topic, report.partition, report.offset) == (topic, 0, 0)
    async with Producer(config, key_codec="bytes", value_codec=MsgpackCodec()) as packed:
        await packed.sync_produce(topic, b"\x00raw", {"n": [1, 2, 3]})
        await packed.sync_produce(topic, None, None)  # no key, a tombstone
    first, second, third = await read_partition(config, topic, 3)
    assert first.key() == b"order-1" and JsonCodec().decode(first.value()) == {
        "total": 12.5,
        "items": ["a", "b"],
    }
    assert second.key() == b"\x00raw" and MsgpackCodec().decode(second.value()) == {"n": [1, 2, 3]}
    assert third.key() is None and third.value() is None


async def test_the_str_codec_refuses_non_strings(config: dict[str, Any]) -> None:
    async with Producer(config, key_codec="str", value_codec="str") as strict:
        with pytest.raises(EncodeError, match=r"key .* str, got int"):
            strict.produce("t", 42, "value")
        with pytest.raises(EncodeError, match=r"value .* str, got dict"):
            await strict.sync_produce("t", "key", {"not": "text"})
        assert len(strict) == 0
    with pytest.raises(ConfigError):
        Producer(config, value_codec="yaml")


async def test_produce_reports_every_delivery_and_flush_all_drains(
    backend: KafkaBackend, config: dict[str, Any]
) -> None:
    topic = await make_topic(backend, 3)
    reports: list[DeliveryReport] = []
    async with Producer(config) as producer:
        for i in range(500):
            producer.produce(topic, f"k{i}", {"i": i}, on_delivery=reports.append)
        producer.produce_message(topic, b"raw", key="raw", headers={"h": "1"}, on_delivery=reports.append)
        await producer.flush_all(step=0.5)
        assert len(producer) == 0
    assert len(reports) == 501 and all(r.ok for r in reports)
    assert len({(r.partition, r.offset) for r in reports}) == 501


async def test_sync_produce_timeout_stops_the_wait_not_the_delivery(
    backend: KafkaBackend, config: dict[str, Any]
) -> None:
    topic = await make_topic(backend)
    async with Producer(config, value_codec="str") as producer:
        await producer.sync_produce(topic, "warm", "up")
        with pytest.raises(Timeout, match="may still be delivered"):
            await producer.sync_produce(topic, "k", "late", timeout=0)
        assert await producer.flush(PATIENCE) == 0
    values = [m.value() for m in await read_partition(config, topic, 2)]
    assert values == [b"up", b"late"]


async def test_failed_deliveries_reach_the_logger_and_flush_all_still_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # no broker there: every delivery times out
    logger = logging.getLogger("test.kafka.helpers")
    config = {"bootstrap.servers": nobody, "message.timeout.ms": 300, "logger": logging.getLogger("quiet")}
    async with Producer(config, logger=logger) as producer:
        with caplog.at_level(logging.DEBUG, logger="test.kafka.helpers"):
            producer.produce_message("t", b"lost")
            async with asyncio.timeout(PATIENCE):
                await producer.flush_all(step=0.2)
        with pytest.raises(PublishError, match="_MSG_TIMED_OUT"):
            await producer.sync_produce_message("t", b"lost too")
    errors = [r for r in caplog.records if r.name == "test.kafka.helpers" and r.levelno == logging.ERROR]
    assert errors and "_MSG_TIMED_OUT" in errors[0].getMessage()


async def test_consumer_commits_explicitly_and_resumes(
    backend: KafkaBackend, producer: Producer, group_config: dict[str, Any]
) -> None:
    topic = await make_topic(backend, 2)
    for i in range(40):
        producer.produce(topic, f"k{i % 4}", i)
    await producer.flush_all()
    seen: list[int] = []
    errors: list[BaseException] = []
    enough = asyncio.Event()
    carry_on = asyncio.Event()

    async def handler(message: Any, commit: Any) -> None:
        value = JsonCodec().decode(message.value())
        if value == 13 and 13 not in seen:
            seen.append(13)
            raise RuntimeError("handler failure: reported, consumption goes on")
        seen.append(value)
        await commit()
        if len(seen) >= 25:
            enough.set()
            await carry_on.wait()  # hold consumption while the test looks at the lag

    consumer = Consumer(group_config, handler, topic, error_callback=errors.append, poll_timeout=0.2)
    consumer.start()
    async with asyncio.timeout(PATIENCE):
        await enough.wait()
    assert consumer.assignments() == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert consumer.subscription() == [topic]
    lags = await consumer.lag()
    # 25 handled; the failed one is committed by a later commit of its partition, unless it was last.
    assert 40 - 25 <= sum(lags.values()) <= 40 - 24
    assert await consumer.lag_for(topic, 0) == lags[TopicPartition(topic, 0)]
    carry_on.set()
    await consumer.close()
    assert len(errors) == 1 and "handler failure" in str(errors[0])

    rest: list[int] = []
    finished = asyncio.Event()

    def second_handler(message: Any, commit: Any) -> None:
        rest.append(JsonCodec().decode(message.value()))
        if len(seen) + len(rest) >= 40:
            finished.set()

    async with asyncio.timeout(PATIENCE):
        again = Consumer(group_config, second_handler, [topic], poll_timeout=0.2)
        task = again.start()
        await finished.wait()
        await again.close()
        assert task.done()
    assert sorted(seen + rest) == list(range(40)), "lost or repeated records across the restart"


async def test_reader_from_first_last_and_explicit_offsets_with_eof(
    backend: KafkaBackend, producer: Producer, config: dict[str, Any]
) -> None:
    topic = await make_topic(backend, 2)
    for i in range(6):
        await producer.sync_produce(topic, "k", i, partition=i % 2)
    got: list[tuple[int, int]] = []
    eofs: list[tuple[str, int, int]] = []
    both_ends = asyncio.Event()

    def handle(message: Any, commit: Any) -> None:
        got.append((message.partition(), JsonCodec().decode(message.value())))

    def at_end(topic_name: str, partition: int, offset: int) -> None:
        eofs.append((topic_name, partition, offset))
        if {p for _, p, _ in eofs} == {0, 1}:
            both_ends.set()

    positions = {TopicPartition(topic, 0): FIRST_OFFSET, (topic, 1): 1}
    async with Reader(config, handle, positions, partition_eof=at_end, poll_timeout=0.2) as reader:
        task = asyncio.ensure_future(reader.read())
        async with asyncio.timeout(PATIENCE):
            await both_ends.wait()
        marks = await reader.watermarks()
        await reader.close()
        await task
    assert sorted(got) == [(0, 0), (0, 2), (0, 4), (1, 3), (1, 5)]
    assert (topic, 0, 3) in eofs and (topic, 1, 3) in eofs
    assert marks[TopicPartition(topic, 0)].high == 3 and marks[TopicPartition(topic, 1)].low == 0

    fresh: list[int] = []
    arrived = asyncio.Event()

    def handle_new(message: Any, commit: Any) -> None:
        fresh.append(JsonCodec().decode(message.value()))
        arrived.set()

    eof_seen = asyncio.Event()
    task = asyncio.ensure_future(
        read_topic_partitions(
            config, handle_new, {(topic, 0): LAST_OFFSET}, partition_eof=lambda *a: eof_seen.set()
        )
    )
    async with asyncio.timeout(PATIENCE):
        await eof_seen.wait()  # positioned at the end
        await producer.sync_produce(topic, "k", 100, partition=0)
        await arrived.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fresh == [100]


async def test_lag_and_message_count(
    backend: KafkaBackend, producer: Producer, group_config: dict[str, Any], config: dict[str, Any]
) -> None:
    topic = await make_topic(backend)
    for i in range(10):
        producer.produce(topic, "k", i)
    await producer.flush_all()
    group = group_config["group.id"]
    assert await message_count(config, topic, 0) == 10
    assert await lag(config, topic, 0, group) == 10  # nothing committed: everything is lag
    async with backend.records(topic, group) as records:
        taken = [await records.next_record(timeout=PATIENCE) for _ in range(4)]
        await taken[-1].ack()
    client = MetadataClient(group_config)  # consumer-only keys are ignored
    assert await client.lag(topic, 0, group) == 6
    assert await client.message_count(topic, 0) == 10
    assert await client.committed(group, topic, 0) == 4


async def test_helpers_refuse_incomplete_configuration(config: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"group\.id"):
        Consumer(config, lambda m, c: None, "t")
    with pytest.raises(ConfigError, match="topic"):
        Consumer({**config, "group.id": "g"}, lambda m, c: None, [])
    with pytest.raises(ConfigError):
        Reader(config, lambda m, c: None, {})
