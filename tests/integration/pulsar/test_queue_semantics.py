"""Message-queue behaviour of the Pulsar backend: nack delay, ack timeout, dead letters, subscriptions."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import pytest

import broker
from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from broker.backends.pulsar.publisher import PulsarPublishDriver
from broker.errors import ClosedError, NotSupported
from broker.testing import collect, drain

Name = Callable[..., str]


async def test_nack_redelivers_after_the_configured_delay(backend: PulsarBackend, name: Name) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.create_subscription(topic, sub)
    async with backend.messages(topic, sub, nack_redelivery_delay=1.0) as consumer:
        await (
            backend.publisher()
            .topic(topic)
            .publish(OutboundMessage(b"again", key="k", attributes={"a": "b"}))
        )
        (first,) = await collect(consumer, 1, 10, ack=False)
        nacked_at = time.monotonic()
        await first.nack()
        with pytest.raises(TimeoutError):  # not before the delay
            await consumer.next_message(timeout=0.6)
        second = await consumer.next_message(timeout=10)
        waited = time.monotonic() - nacked_at
        await second.ack()
    assert (second.id, second.data, second.key, dict(second.attributes)) == (
        first.id,
        b"again",
        "k",
        {"a": "b"},
    )
    assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
    assert waited >= 0.9, f"redelivered after {waited:.2f}s, the delay is 1s"


async def test_a_nack_delay_longer_than_the_consumers_is_held_by_the_client(
    backend: PulsarBackend, name: Name
) -> None:
    """Pulsar has one nack delay per consumer; a longer ``nack(delay)`` is emulated by holding the nack."""
    assert backend.capabilities.delayed_nack
    topic, sub = name("topic"), name("sub")
    await backend.create_subscription(topic, sub)
    async with backend.messages(topic, sub, nack_redelivery_delay=0.2) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
        (first,) = await collect(consumer, 1, 10, ack=False)
        started = time.monotonic()
        await first.nack(delay=2.5)
        with pytest.raises(TimeoutError):  # not before the delay
            await consumer.next_message(timeout=1.5)
        (again,) = await collect(consumer, 1, 10)
    waited = time.monotonic() - started
    assert again.id == first.id and again.delivery_attempt == 2
    assert waited >= 2.5, f"redelivered after {waited:.2f}s, the delay was 2.5s"


async def test_a_held_nack_is_not_lost_when_its_consumer_closes(backend: PulsarBackend, name: Name) -> None:
    """Closing with a nack still held: the broker redelivers the message, as any unacknowledged one."""
    topic, sub = name("topic"), name("sub")
    await backend.create_subscription(topic, sub)
    async with backend.messages(topic, sub, nack_redelivery_delay=0.2) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"held"))
        (first,) = await collect(consumer, 1, 10, ack=False)
        await first.nack(delay=600)
    async with backend.messages(topic, sub) as consumer:
        (again,) = await collect(consumer, 1, 15)
    assert again.id == first.id and again.data == b"held"


async def test_dead_letter_after_max_attempts(backend: PulsarBackend, name: Name) -> None:
    topic, sub, dlq = name("topic"), name("sub"), name("dlq")
    await backend.create_subscription(topic, sub)
    await backend.create_subscription(dlq, "inspect")
    async with (
        backend.messages(topic, sub, max_attempts=3, dead_letter_topic=dlq) as consumer,
        backend.messages(dlq, "inspect") as dead,
    ):
        publisher = backend.publisher().topic(topic)
        await publisher.publish(OutboundMessage(b"poison", key="p", attributes={"why": "test"}))
        await publisher.publish(OutboundMessage(b"fine"))
        attempts: list[int | None] = []
        fine = 0
        async with asyncio.timeout(20):
            while len(attempts) < 3 or not fine:
                message = await consumer.next_message()
                if message.data == b"fine":
                    fine += 1
                    await message.ack()
                else:
                    attempts.append(message.delivery_attempt)
                    await message.nack()
        (letter,) = await collect(dead, 1, 10)
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.0)
    assert attempts == [1, 2, 3]
    assert (letter.data, letter.key, letter.attributes["why"]) == (b"poison", "p", "test")
    assert letter.attributes["REAL_TOPIC"].endswith(topic)


async def test_explicit_dead_letter(backend: PulsarBackend, name: Name) -> None:
    topic, sub = name("topic"), name("sub")
    dlq = f"{topic}-{sub}-DLQ"  # Pulsar's default dead-letter topic
    await backend.create_subscription(topic, sub)
    await backend.create_subscription(dlq, "inspect")
    async with backend.messages(topic, sub) as consumer, backend.messages(dlq, "inspect") as dead:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"bad", attributes={"n": "1"}))
        (message,) = await collect(consumer, 1, 10, ack=False)
        await message.dead_letter("cannot parse")
        assert message.state == "dead-lettered"
        (letter,) = await collect(dead, 1, 10)
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=0.5)
    assert letter.data == b"bad"
    assert letter.attributes["DEAD_LETTER_REASON"] == "cannot parse"
    assert letter.attributes["n"] == "1"
    assert letter.attributes["ORIGIN_MESSAGE_ID"]


async def test_ack_timeout_redelivers_and_in_progress_is_refused(backend: PulsarBackend, name: Name) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.create_subscription(topic, sub)
    async with backend.messages(topic, sub, ack_timeout=10) as consumer:
        await (
            backend.publisher().topic(topic).batch_publish(OutboundMessage(b"kept"), OutboundMessage(b"lost"))
        )
        received = await collect(consumer, 2, 10, ack=False)
        by_data = {m.data: m for m in received}
        await by_data[b"kept"].ack()
        with pytest.raises(NotSupported):
            await by_data[b"lost"].in_progress()
        started = time.monotonic()
        again = await consumer.next_message(timeout=20)
        waited = time.monotonic() - started
        await again.ack()
        assert await drain(consumer, 0.5) == []
    assert again.data == b"lost"
    assert again.delivery_attempt == 2
    assert 8.0 <= waited <= 13.0, f"redelivered after {waited:.1f}s with a 10s ack timeout"


async def test_closing_keeps_the_subscription(backend: PulsarBackend, name: Name) -> None:
    """The seed unsubscribed on close, deleting what the subscription held; closing must not."""
    topic, sub = name("topic"), name("sub")
    publisher = backend.publisher().topic(topic)
    async with backend.messages(topic, sub) as consumer:
        await publisher.publish(OutboundMessage(b"1"))
        await collect(consumer, 1, 10)
        await publisher.publish(OutboundMessage(b"2"))
        await collect(consumer, 1, 10, ack=False)  # received, never acked
    await publisher.batch_publish(OutboundMessage(b"3"), OutboundMessage(b"4"))  # while nobody listens
    async with backend.messages(topic, sub) as consumer:
        got = await collect(consumer, 3, 10)
        got += await drain(consumer, 0.5)
    assert sorted(m.data for m in got) == [b"2", b"3", b"4"]


async def test_unsubscribe_deletes_the_subscription(backend: PulsarBackend, name: Name) -> None:
    topic, sub = name("topic"), name("sub")
    publisher = backend.publisher().topic(topic)
    consumer = backend.messages(topic, sub)
    await consumer.start()
    await publisher.publish(OutboundMessage(b"old"))
    await consumer.unsubscribe()
    with pytest.raises(ClosedError):
        await consumer.next_message(timeout=0.1)
    async with backend.messages(topic, sub, initial_position="latest") as fresh:
        await publisher.publish(OutboundMessage(b"new"))
        got = await collect(fresh, 1, 10)
        got += await drain(fresh, 0.5)
    assert [m.data for m in got] == [b"new"]


async def test_one_producer_per_topic(backend: PulsarBackend, name: Name) -> None:
    topic = name("topic")
    publisher = backend.publisher()
    for i in range(20):
        await publisher.topic(topic).publish(OutboundMessage(str(i).encode()))
    await asyncio.gather(*(publisher.topic(topic).publish(OutboundMessage(b"c")) for _ in range(20)))
    driver = publisher.driver
    assert isinstance(driver, PulsarPublishDriver)
    assert len(driver._producers) == 1
    producer = driver._made[topic]
    await publisher.topic(topic).batch_publish(OutboundMessage(b"b"), OutboundMessage(b"b"))
    assert driver._made[topic] is producer and len(driver._producers) == 1


async def test_client_batching_delivers_every_message_once(pulsar: object, name: Name) -> None:
    url = f"{pulsar.url}?batching=true&batching_max_messages=100"  # type: ignore[attr-defined]
    async with broker.connect(url) as backend:
        topic, sub = name("topic"), name("sub")
        assert isinstance(backend, PulsarBackend)
        await backend.create_subscription(topic, sub)
        count = 1000
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(str(i).encode(), key=f"k{i % 5}") for i in range(count)))
        )
        async with backend.batched_messages(topic, sub, batch_size=300, batch_timeout=0.5) as batches:
            seen: Counter[int] = Counter()
            async with asyncio.timeout(20):
                while sum(seen.values()) < count:
                    batch = await batches.next_batch()
                    assert len(batch) <= 300
                    await broker.ack_all(batch)
                    seen.update(int(m.data) for m in batch)
            assert await batches.next_batch(timeout=0.5) == []
    assert set(seen) == set(range(count)) and max(seen.values()) == 1


async def test_max_pending_messages_throttles_without_blocking(pulsar: object, name: Name) -> None:
    url = f"{pulsar.url}?max_pending_messages=10"  # type: ignore[attr-defined]
    async with broker.connect(url) as backend:
        topic, sub = name("topic"), name("sub")
        assert isinstance(backend, PulsarBackend)
        await backend.create_subscription(topic, sub)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"m") for _ in range(500)))
        ticker.cancel()
        async with backend.messages(topic, sub) as consumer:
            got = await collect(consumer, 500, 20)
    assert len(got) == 500
    assert ticks > 0, "the event loop was blocked while publishing"


async def test_close_wakes_consumers_and_never_hangs(backend: PulsarBackend, name: Name) -> None:
    topic, sub = name("topic"), name("sub")
    consumer = backend.messages(topic, sub)
    batches = backend.batched_messages(topic, name("sub"))
    reader = backend.reader(topic)
    waiting = [
        asyncio.ensure_future(consumer.next_message()),
        asyncio.ensure_future(batches.next_batch(timeout=60)),
        asyncio.ensure_future(reader.next_record()),
    ]
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await backend.close()
    for task in waiting:
        with pytest.raises(ClosedError):
            await task
    assert time.monotonic() - started < 3
