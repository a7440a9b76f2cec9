"""Behaviour the library needs that pulsar-lite 0.2.0 gets wrong.

Each test is expected to fail on pulsar-lite (the marker names the bug) and to pass on Apache
Pulsar: run them there with ``PULSAR_URL=pulsar://host:6650``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pulsar as pulsar_client  # type: ignore[import-untyped]
import pytest

import broker
from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from broker.driver.testing.harness import collect_records
from broker.testing import collect, drain
from tests.integration.pulsar.server import (
    BATCH_INDEX_ACK,
    CUMULATIVE_BATCH_ACK,
    EXCLUSIVE_DUPLICATES,
    EXCLUSIVE_NACK,
    KEY_SHARED_DUPLICATES,
    PulsarTestServer,
)

Name = Callable[..., str]


async def test_exclusive_subscription_redelivers_nacked_messages(
    request: pytest.FixtureRequest, pulsar: PulsarTestServer, backend: PulsarBackend, name: Name
) -> None:
    pulsar.expect_bug(request, EXCLUSIVE_NACK)
    topic, sub = name("topic"), name("sub")
    await backend.create_subscription(topic, sub, subscription_type="exclusive")
    async with backend.messages(topic, sub, subscription_type="exclusive") as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"retry"))
        (first,) = await collect(consumer, 1, 10, ack=False)
        await first.nack()
        (again,) = await collect(consumer, 1, 5)
    assert again.id == first.id


async def test_exclusive_subscription_delivers_each_message_once(
    request: pytest.FixtureRequest, pulsar: PulsarTestServer, backend: PulsarBackend, name: Name
) -> None:
    """Three rounds: pulsar-lite's duplicates depend on timing and show in most rounds, not all."""
    pulsar.expect_bug(request, EXCLUSIVE_DUPLICATES)
    count = 500
    for _ in range(3):
        topic, sub = name("topic"), name("sub")
        await backend.create_subscription(topic, sub, subscription_type="exclusive")
        async with backend.messages(topic, sub, subscription_type="exclusive") as consumer:
            await (
                backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(count)))
            )
            got = await collect(consumer, count, 15, ack=False)  # acked at the end: nothing may come twice
            got += await drain(consumer, 0.5)
            await broker.ack_all(got)
        counts = Counter(int(m.data) for m in got)
        assert set(counts) == set(range(count))
        assert max(counts.values()) == 1, f"{sum(counts.values()) - count} duplicates"


async def test_batch_index_ack_neither_loses_nor_repeats(
    request: pytest.FixtureRequest, pulsar: PulsarTestServer, name: Name
) -> None:
    """With client batching, batch-index acks make per-message acks exact across a consumer restart.

    On Apache Pulsar this needs ``acknowledgmentAtBatchIndexLevelEnabled=true`` on the broker.
    """
    pulsar.expect_bug(request, BATCH_INDEX_ACK)
    async with broker.connect(f"{pulsar.url}?batching=true&batch_index_ack=true") as backend:
        assert isinstance(backend, PulsarBackend)
        topic, sub = name("topic"), name("sub")
        await backend.create_subscription(topic, sub)
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(30)))
        )
        async with backend.messages(topic, sub) as consumer:
            handled = await collect(consumer, 10, 10)
            await collect(consumer, 1, 10, ack=False)
        async with backend.messages(topic, sub) as consumer:
            rest = await collect(consumer, 20, 5)
            rest += await drain(consumer, 1.0)
    counts = Counter(int(m.data) for m in handled + rest)
    assert set(counts) == set(range(30))
    assert max(counts.values()) == 1


async def test_group_commit_inside_a_batch_loses_nothing(
    request: pytest.FixtureRequest, pulsar: PulsarTestServer, name: Name
) -> None:
    """A cumulative ack of a record inside a client batch must not commit its later batch-mates."""
    pulsar.expect_bug(request, CUMULATIVE_BATCH_ACK)
    async with broker.connect(f"{pulsar.url}?batching=true") as backend:
        assert isinstance(backend, PulsarBackend)
        topic, group = name("log"), name("group")
        await backend.create_subscription(topic, group, subscription_type="failover")
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(20)))
        )
        async with backend.records(topic, group) as records:
            first = await collect_records(records, 12, 10)
            await first[-1].ack()
        async with backend.records(topic, group) as records:
            rest = []
            while True:
                try:
                    rest.append(await records.next_record(timeout=1.0))
                except TimeoutError:
                    break
    values = {int(r.value or b"") for r in rest}
    assert set(range(12, 20)) <= values, f"lost {sorted(set(range(12, 20)) - values)}"


def _key_shared_round(client: Any, topic: str, count: int) -> Counter[int]:
    """Two Key_Shared consumers (from earliest) share ``count`` key-less messages; what each value got.

    Raw pulsar-client only: each consumer has a thread that receives one message, then what else is
    ready (``batch_receive``); the main thread acknowledges everything it is handed.
    """
    options: dict[str, Any] = {
        "consumer_type": pulsar_client.ConsumerType.KeyShared,
        "initial_position": pulsar_client.InitialPosition.Earliest,
        "receiver_queue_size": 1000,
        "batch_receive_policy": pulsar_client.ConsumerBatchReceivePolicy(999, -1, 1),
    }
    consumers = [client.subscribe(topic, "sub", **options) for _ in range(2)]
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    stop = threading.Event()

    def pump(consumer: Any) -> None:
        while not stop.is_set():
            try:
                messages = [consumer.receive(100), *consumer.batch_receive()]
            except pulsar_client.Timeout:
                continue
            except Exception:  # closed
                return
            for message in messages:
                received.put((consumer, message))

    threads = [threading.Thread(target=pump, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000)
    sent = threading.Semaphore(0)
    for i in range(count):
        producer.send_async(str(i).encode(), lambda result, message_id: sent.release())
    for _ in range(count):
        sent.acquire()
    values: Counter[int] = Counter()
    deadline = time.monotonic() + 5
    while len(values) < count and time.monotonic() < deadline:
        try:
            consumer, message = received.get(timeout=0.2)
        except queue.Empty:
            continue
        consumer.acknowledge(message)
        values[int(message.data())] += 1
    time.sleep(0.2)  # anything delivered again right after the last one
    while not received.empty():
        values[int(received.get()[1].data())] += 1
    stop.set()
    for consumer in consumers:
        consumer.close()
    for thread in threads:
        thread.join(5)
    producer.close()
    return values


def test_key_shared_delivers_each_message_once(
    request: pytest.FixtureRequest, pulsar: PulsarTestServer, name: Name
) -> None:
    """Raw pulsar-client, no polybroker: a Key_Shared subscription must deliver each message once.

    pulsar-lite 0.2.0 now and then (about one round in eight here) delivers a message a second
    time to the consumer that already has it, with the same message id and redelivery count 0,
    though it was never nacked, timed out or handed to another consumer. This is what makes the
    conformance test ``test_competing_consumers_split_the_work[key_shared]`` count a message
    twice and another one missing. Up to 60 rounds, stopping at the first duplicate. Not strict:
    how often it shows depends on the machine's timing (a CI run under load saw none in 60
    rounds); the conformance test, strict over up to 200 rounds, is the one that notices a fix.
    """
    pulsar.expect_bug(request, KEY_SHARED_DUPLICATES, strict=False)
    logger = pulsar_client.ConsoleLogger(pulsar_client.LoggerLevel.Error)
    client = pulsar_client.Client(pulsar.url, logger=logger)
    try:
        for _ in range(60):
            values = _key_shared_round(client, name("keyshared"), 100)
            assert set(values) == set(range(100)), f"lost {sorted(set(range(100)) - set(values))}"
            twice = sorted(v for v, n in values.items() if n > 1)
            assert not twice, f"delivered twice with redelivery count 0: {twice}"
    finally:
        client.close()
