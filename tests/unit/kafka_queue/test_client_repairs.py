"""MqClient's repairs (kafka-mq-go's NeedsReconnect / NeedsReset), and QueueSettings validation.

A failing poll asks for a reconnect, a failing START or commit for a reset; the queue consumer
repairs before its next batch, and nothing is lost either way (in-memory log, failures injected
into the client's own source and marker producer).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import QueueService, QueueSettings
from broker.backends.kafka.queue.client import MqClient
from broker.errors import BrokerError, ConfigError, ReceiveError, Timeout


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://repairs-{uuid.uuid4().hex}?partitions=2")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


def config(**overrides: Any) -> QueueSettings:
    values: dict[str, Any] = {
        "message_topic": "q",
        "marker_topic": "q-markers",
        "redelivery_timeout": 5.0,
        "next_message_timeout": 0.05,
        "tracker_poll_interval": 0.02,
    }
    values.update(overrides)
    return QueueSettings(**values)


async def filled(log: InmemLog, count: int) -> QueueService:
    service = QueueService(log, config())
    await service.create_topics(partitions=2)
    producer = service.producer("jobs")
    for i in range(count):
        producer.send_async(b"%d" % i)
    await producer.flush()
    return service


def fail_once(obj: Any, name: str, error: Exception) -> list[int]:
    """Make ``obj.name`` raise ``error`` on its next call only; the list counts the failures."""
    original = getattr(obj, name)
    failures: list[int] = []

    async def failing(*args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            raise error
        return await original(*args, **kwargs)

    setattr(obj, name, failing)
    return failures


async def poll_all(client: MqClient, count: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(100):
        items, positions = await client.poll(100, 0.05)
        if items:
            await client.start(items)
            await client.commit(positions)
            got.extend(items)
        if len(got) >= count:
            break
    return got


class FatalKafkaError:
    """Stands for a fatal librdkafka ``KafkaError`` (what ``kafka_error`` carries)."""

    def name(self) -> str:
        return "_FATAL"

    def fatal(self) -> bool:
        return True


def fatal(message: str) -> ReceiveError:
    error = ReceiveError(message)
    error.kafka_error = FatalKafkaError()  # type: ignore[attr-defined]
    return error


async def test_a_transient_poll_failure_needs_no_reconnect(log: InmemLog) -> None:
    await filled(log, 10)
    client = MqClient(log, config(), "jobs")
    try:
        client._ensure_consumer()
        assert client.source is not None
        fail_once(client.source, "poll", ConnectionError("broker gone for a while"))
        with pytest.raises(ReceiveError, match="broker gone"):
            await client.poll(100, 0.05)
        assert not client.needs_reconnect and not client.needs_reset
        old = client.consumer
        got = await poll_all(client, 10)  # the same consumer polls again
        assert client.consumer is old
        assert sorted(int(r.value) for r in got) == list(range(10))
    finally:
        await client.close()


async def test_a_failed_poll_needs_a_reconnect_and_the_new_consumer_resumes(log: InmemLog) -> None:
    await filled(log, 10)
    client = MqClient(log, config(), "jobs")
    try:
        client._ensure_consumer()
        assert client.source is not None
        fail_once(client.source, "poll", fatal("broker gone"))
        with pytest.raises(ReceiveError, match="broker gone"):
            await client.poll(100, 0.05)
        assert client.needs_reconnect
        with pytest.raises(ReceiveError, match="reconnect"):
            await client.poll(100, 0.05)  # refused until repaired
        old = client.consumer
        await client.reconnect()
        assert not client.needs_reconnect and client.consumer is not old
        got = await poll_all(client, 10)
        assert sorted(int(r.value) for r in got) == list(range(10)), "a reconnect lost or repeated records"
    finally:
        await client.close()


async def test_a_failed_start_needs_a_reset_that_reads_the_batch_again(log: InmemLog) -> None:
    await filled(log, 10)
    client = MqClient(log, config(marker_format="per-message"), "jobs")
    try:
        items: list[Any] = []
        for _ in range(100):
            items, _positions = await client.poll(100, 0.05)
            if items:
                break
        assert items
        fail_once(client.markers, "start", BrokerError("markers topic unavailable"))
        with pytest.raises(BrokerError, match="START markers"):
            await client.start(items)
        assert client.needs_reset
        with pytest.raises(ReceiveError, match="reset"):
            await client.poll(100, 0.05)
        await client.reset()  # back to the committed position: the batch is read again
        got = await poll_all(client, 10)
        assert sorted(int(r.value) for r in got) == list(range(10))
    finally:
        await client.close()


async def test_the_consumer_repairs_itself_and_loses_nothing(log: InmemLog) -> None:
    service = await filled(log, 20)
    async with service.consumer("jobs") as consumer:
        client = consumer.client
        client._ensure_consumer()
        assert client.source is not None
        failures = fail_once(client.source, "poll", ConnectionError("broker gone"))
        got = [await consumer.receive(timeout=5) for _ in range(20)]
        await broker.ack_all(got)
        with pytest.raises(Timeout):
            await consumer.receive(timeout=0.5)
    assert failures == [1], "the injected failure never happened"
    assert sorted(int(m.data) for m in got) == list(range(20))


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("message_topic", "", "message_topic"),
        ("marker_topic", "q", "must differ"),
        ("redelivery_timeout", 0, "redelivery_timeout"),
        ("redelivery_timeout", 13 * 3600, "12h"),
        ("marker_format", "compact", "marker_format"),
        ("receive_buffer_capacity", 0, "receive_buffer_capacity"),
        ("max_messages_per_poll", -1, "max_messages_per_poll"),
        ("num_offsets_per_commit", 0, "num_offsets_per_commit"),
        ("batches_in_flight", 0, "batches_in_flight"),
        ("handout_window", -1, "handout_window"),
        ("next_message_timeout", 0, "next_message_timeout"),
        ("use_now_if_no_marker_seen", -1, "use_now_if_no_marker_seen"),
        ("max_deliveries", 0, "max_deliveries"),
        ("tracker_poll_interval", 0, "tracker_poll_interval"),
        ("tracker_poll_interval", -0.5, "tracker_poll_interval"),
        ("tracker_poll_interval", float("nan"), "tracker_poll_interval"),
        ("dead_letter_topic", "q", "dead_letter_topic"),
        ("dead_letter_topic", "q-markers", "dead_letter_topic"),
    ],
)
def test_bad_queue_settings_are_config_errors_naming_the_setting(field: str, value: Any, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        config(**{field: value})


async def test_topic_mode_with_per_message_markers_warns_that_go_copies_reach_every_subscription(
    log: InmemLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="broker.backends.kafka.queue.service")
    QueueService(log, config()).consumer("subs", mode="topic")  # batched: silent
    QueueService(log, config(marker_format="per-message")).consumer("jobs")  # queue mode: silent
    assert not caplog.records
    QueueService(log, config(marker_format="per-message")).consumer("subs", mode="topic")
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert "per-message" in record.getMessage() and "every subscription" in record.getMessage()
