"""The helpers' ``Consumer`` with librdkafka's auto commit on, on Tansu, across a restart (issue 27).

kefka: "If auto commits are on the Commit function can be ignored". The helper used to put
``enable.auto.offset.store=false`` under the caller's config and store nothing, so an application that
turned ``enable.auto.commit`` on committed nothing and read everything again after a restart. Now a
message is stored once its handler returned (librdkafka's auto commit then commits it, and ``close()``
commits what is stored), and a handler that raised has its message's offset not stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.client import Consumer, Producer, lag
from broker.codecs import JsonCodec
from tests.integration.kafka.support import ONE_RECORD_PER_BATCH, unique

PATIENCE = 20.0
#: How long a restarted consumer keeps listening after the expected messages, for re-reads to show.
SETTLE = 1.5


@pytest.fixture
def auto_config(config: dict[str, Any]) -> dict[str, Any]:
    """A group member with auto commit on; the interval is long, so only ``close()`` commits here."""
    return {
        **config,
        "group.id": unique("auto-commit"),
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 2000,
        "heartbeat.interval.ms": 300,
        "fetch.wait.max.ms": 100,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 60_000,
    }


@pytest.fixture
async def producer(config: dict[str, Any]) -> AsyncIterator[Producer]:
    async with Producer({**config, **ONE_RECORD_PER_BATCH}) as opened:
        yield opened


async def _topic(backend: KafkaBackend, partitions: int) -> str:
    topic = unique("auto-commit")
    await backend.admin.create_topic(topic, partitions)
    return topic


async def _produce(producer: Producer, topic: str, values: range) -> None:
    for value in values:
        producer.produce(topic, f"k{value % 5}", value)
    await producer.flush_all()


async def _run_until(
    config: dict[str, Any],
    topic: str,
    handler: Any,
    done: asyncio.Event,
    errors: list[BaseException] | None = None,
) -> None:
    """Start a consumer, wait for ``done``, close it (a clean application shutdown)."""
    report = errors.append if errors is not None else None
    consumer = Consumer(config, handler, topic, poll_timeout=0.2, error_callback=report)
    task = consumer.start()
    try:
        async with asyncio.timeout(PATIENCE):
            await done.wait()
    finally:
        await consumer.close()
    assert task.done()


async def _restart_and_read(config: dict[str, Any], topic: str, expected: set[int]) -> list[int]:
    """A new consumer of the same group: everything it reads until ``expected`` arrived, and a while after."""
    read: list[int] = []
    arrived = asyncio.Event()

    def handler(message: Any, commit: Any) -> None:
        read.append(JsonCodec().decode(message.value()))
        if expected <= set(read):
            arrived.set()

    async def settled() -> None:
        await arrived.wait()
        await asyncio.sleep(SETTLE)

    done = asyncio.Event()
    waiter = asyncio.ensure_future(settled())
    waiter.add_done_callback(lambda _: done.set())
    try:
        await _run_until(config, topic, handler, done)
    finally:
        waiter.cancel()
    return read


@pytest.mark.parametrize("flag", [True, "true"], ids=["bool", "string"])
async def test_auto_commit_resumes_after_a_restart_without_rereading(
    backend: KafkaBackend, producer: Producer, auto_config: dict[str, Any], flag: object
) -> None:
    config = {**auto_config, "enable.auto.commit": flag}
    topic = await _topic(backend, 2)
    first, more = range(30), range(30, 40)
    await _produce(producer, topic, first)

    handled: list[int] = []
    all_handled = asyncio.Event()

    async def handler(message: Any, commit: Any) -> None:  # never calls commit: auto commit does
        handled.append(JsonCodec().decode(message.value()))
        if len(handled) >= len(first):
            all_handled.set()

    await _run_until(config, topic, handler, all_handled)
    assert sorted(handled) == list(first)

    await _produce(producer, topic, more)
    read = await _restart_and_read(config, topic, set(more))
    assert sorted(read) == list(more), "handled messages were read again (or new ones lost) after the restart"


async def test_a_message_whose_handler_raised_is_not_stored(
    backend: KafkaBackend, producer: Producer, auto_config: dict[str, Any]
) -> None:
    # One partition, so the order is known: 3 fails and 4.. succeed (their offsets cover 3, as a
    # Kafka commit of a later offset does); 9, the last, fails, so the stored offset stays at 9.
    topic = await _topic(backend, 1)
    first, more = range(10), range(10, 14)
    await _produce(producer, topic, first)

    attempts: list[int] = []
    all_tried = asyncio.Event()
    errors: list[BaseException] = []

    def handler(message: Any, commit: Any) -> None:
        value = JsonCodec().decode(message.value())
        attempts.append(value)
        if len(attempts) >= len(first):
            all_tried.set()
        if value in (3, 9):
            raise RuntimeError(f"handler failure on {value}")

    await _run_until(auto_config, topic, handler, all_tried, errors)
    assert attempts == list(first)
    assert sorted(str(e) for e in errors) == ["handler failure on 3", "handler failure on 9"]

    await _produce(producer, topic, more)
    read = await _restart_and_read(auto_config, topic, {9, *more})
    assert read == [9, *more], "the failed last message must be read again, nothing handled before it"


async def test_without_auto_commit_only_explicit_commits_count(
    backend: KafkaBackend, producer: Producer, auto_config: dict[str, Any]
) -> None:
    # The default is unchanged: auto commit off, nothing stored; a handler that never commits
    # leaves everything to be read again.
    config = {**auto_config, "enable.auto.commit": False}
    topic = await _topic(backend, 1)
    await _produce(producer, topic, range(5))
    handled: list[int] = []
    all_handled = asyncio.Event()

    def handler(message: Any, commit: Any) -> None:
        handled.append(JsonCodec().decode(message.value()))
        if len(handled) >= 5:
            all_handled.set()

    await _run_until(config, topic, handler, all_handled)
    read = await _restart_and_read(config, topic, set(range(5)))
    assert sorted(read) == list(range(5))


async def test_handled_offsets_are_committed_while_running(
    backend: KafkaBackend, producer: Producer, auto_config: dict[str, Any]
) -> None:
    # With a short interval, librdkafka's auto commit sends the stored offsets while the consumer
    # runs: the group's lag drops to 0 without any commit() and before any close.
    config = {**auto_config, "auto.commit.interval.ms": 200}
    topic = await _topic(backend, 2)
    await _produce(producer, topic, range(12))
    handled: list[int] = []
    all_handled = asyncio.Event()

    def handler(message: Any, commit: Any) -> None:
        handled.append(JsonCodec().decode(message.value()))
        if len(handled) >= 12:
            all_handled.set()

    consumer = Consumer(config, handler, topic, poll_timeout=0.2)
    consumer.start()
    try:
        async with asyncio.timeout(PATIENCE):
            await all_handled.wait()
            while True:
                lags = await consumer.lag()
                if sum(lags.values()) == 0:
                    break
                await asyncio.sleep(0.2)
    finally:
        await consumer.close()
    assert sorted(handled) == list(range(12))


async def test_after_a_rebalance_and_a_clean_close_everything_handled_is_committed(
    backend: KafkaBackend, producer: Producer, config: dict[str, Any], auto_config: dict[str, Any]
) -> None:
    # A second member joins while the first is handling: the first stores what it handled before
    # its partitions go (a message of a revoked partition handled afterwards may be read again by
    # the new owner: at-least-once). After both close cleanly the group has committed everything,
    # so a restart would read nothing again. (Read from the committed offsets, not by restarting:
    # on Tansu a group whose members left during a rebalance sometimes never assigns a new member.)
    topic = await _topic(backend, 4)
    first = range(120)
    await _produce(producer, topic, first)
    handled: list[int] = []
    started = asyncio.Event()
    all_handled = asyncio.Event()

    async def handler(message: Any, commit: Any) -> None:
        handled.append(JsonCodec().decode(message.value()))
        await asyncio.sleep(0.01)
        if len(handled) >= 20:
            started.set()
        if set(handled) >= set(first):
            all_handled.set()

    one = Consumer(auto_config, handler, topic, poll_timeout=0.2, batch_size=10)
    two = Consumer(auto_config, handler, topic, poll_timeout=0.2, batch_size=10)
    one.start()
    try:
        async with asyncio.timeout(PATIENCE):
            await started.wait()
        two.start()
        async with asyncio.timeout(3 * PATIENCE):
            await all_handled.wait()
        assert one.assignments() and two.assignments(), "the second member got no partition"
    finally:
        await one.close()
        await two.close()

    group = auto_config["group.id"]
    lags = [await lag(config, topic, partition, group) for partition in range(4)]
    assert lags == [0, 0, 0, 0], "handled messages left uncommitted by the clean close"
