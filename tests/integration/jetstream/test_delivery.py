"""Redelivery, max_deliver, terminate and dead-lettering on a real JetStream consumer."""

from __future__ import annotations

import asyncio
import time

import pytest

import broker
from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.driver.testing.harness import collect
from tests.integration.jetstream.helpers import unique


async def test_unacked_message_is_redelivered_after_ack_wait(backend: JetStreamBackend) -> None:
    topic = unique("redeliver")
    async with backend.messages(topic, "worker", ack_wait=0.5) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"forgotten"))
        (first,) = await collect(consumer, 1, 5, ack=False)
        taken = time.monotonic()
        (second,) = await collect(consumer, 1, 5)
        waited = time.monotonic() - taken
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.0)
    assert first.delivery_attempt == 1
    assert second.data == b"forgotten" and second.id == first.id
    assert second.delivery_attempt == 2
    assert waited >= 0.4, f"redelivered after {waited:.2f}s, before ack_wait"


async def test_max_deliver_stops_redelivery(backend: JetStreamBackend) -> None:
    topic = unique("maxdeliver")
    async with backend.messages(topic, "worker", ack_wait=0.3, max_deliver=3) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"poison"))
        attempts = []
        for _ in range(3):
            (message,) = await collect(consumer, 1, 5, ack=False)
            attempts.append(message.delivery_attempt)
            await message.nack()
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.0)  # well past ack_wait: no fourth delivery
    assert attempts == [1, 2, 3]


async def test_dead_letter_terminates_without_redelivery(backend: JetStreamBackend) -> None:
    topic = unique("term")
    async with backend.messages(topic, "worker", ack_wait=0.3) as consumer:
        await (
            backend.publisher().topic(topic).batch_publish(OutboundMessage(b"bad"), OutboundMessage(b"good"))
        )
        got = await collect(consumer, 2, 5, ack=False)
        bad = next(m for m in got if m.data == b"bad")
        good = next(m for m in got if m.data == b"good")
        await bad.dead_letter("cannot parse")
        await bad.dead_letter()  # a second time is a no-op
        assert bad.state == "dead-lettered"
        await good.ack()
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.0)  # ack_wait passed three times over
        with pytest.raises(broker.errors.AckError):
            await bad.ack()


async def test_dead_letter_subject_receives_poison_messages(backend: JetStreamBackend) -> None:
    topic = unique("work")
    dlq = unique("dlq")
    options = {"ack_wait": 0.5, "max_deliver": 2, "dead_letter_subject": dlq}
    async with (
        backend.messages(topic, "worker", **options) as consumer,
        backend.messages(dlq, "inspect") as dead,
    ):
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(
                OutboundMessage(b"explicit", key="k", attributes={"trace": "1"}), OutboundMessage(b"retried")
            )
        )
        got = {m.data: m for m in await collect(consumer, 2, 5, ack=False)}
        await got[b"explicit"].dead_letter("schema mismatch")
        await got[b"retried"].nack()  # attempt 1 of 2: redelivered
        (again,) = await collect(consumer, 1, 5, ack=False)
        assert (again.data, again.delivery_attempt) == (b"retried", 2)
        await again.nack()  # the last allowed attempt: dead-lettered instead
        letters = {m.data: m for m in await collect(dead, 2, 5)}
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.2)
    explicit = letters[b"explicit"]
    assert explicit.key == "k"
    assert explicit.attributes["trace"] == "1"
    assert explicit.attributes["dead_letter_reason"] == "schema mismatch"
    assert explicit.attributes["dead_letter_source"].endswith("/worker")
    assert letters[b"retried"].attributes["delivery_attempts"] == "2"


async def test_in_progress_and_delayed_nack(backend: JetStreamBackend) -> None:
    topic = unique("wpi")
    async with backend.messages(topic, "worker", ack_wait=0.5) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"slow"))
        (message,) = await collect(consumer, 1, 5, ack=False)
        for _ in range(4):  # 1.2 s in all, well past ack_wait, kept alive
            await message.in_progress()
            with pytest.raises(TimeoutError):
                await consumer.next_message(timeout=0.3)
        started = time.monotonic()
        await message.nack(delay=0.8)
        (again,) = await collect(consumer, 1, 5)
        assert time.monotonic() - started >= 0.7
        assert again.delivery_attempt == 2


async def test_synchronous_acks(backend: JetStreamBackend) -> None:
    topic = unique("sync")
    count = 50
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(count)))
    async with backend.batched_messages(
        topic, "worker", batch_size=20, ack_sync=True, ack_wait=0.5
    ) as batches:
        seen: list[bytes] = []
        while len(seen) < count:
            batch = await batches.next_batch(timeout=5)
            if len(seen) == 0:
                await batch[0].ack()  # one by one ...
                await broker.ack_all(batch[1:])  # ... and in bulk
            else:
                await broker.ack_all(batch)
            seen.extend(m.data for m in batch)
        assert await batches.next_batch(timeout=1.0) == []  # nothing comes back after ack_wait
    assert sorted(seen, key=int) == [b"%d" % i for i in range(count)]


async def test_receiver_over_batches_with_competing_consumers(backend: JetStreamBackend) -> None:
    topic = unique("fanin")
    count = 300
    handled: list[int] = []
    done = asyncio.Event()

    async def handler(message: broker.Message) -> None:
        handled.append(int(message.data))
        await message.ack()
        if len(handled) >= count:
            done.set()

    receivers = [
        broker.adapt.receiver_from_batches(
            backend.batched_messages(topic, "pool", batch_size=25), concurrency=2
        )
        for _ in range(3)
    ]
    task = asyncio.ensure_future(broker.adapt.fan_in(*receivers).receive(handler))
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(count)))
    async with asyncio.timeout(20):
        await done.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(handled) == list(range(count))


async def test_concurrent_pulls_on_one_iterator(backend: JetStreamBackend) -> None:
    topic = unique("concurrent")
    async with backend.messages(topic, "worker") as consumer:
        waiting = [asyncio.ensure_future(consumer.next_message(timeout=10)) for _ in range(3)]
        await asyncio.sleep(0.1)
        await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(3)))
        async with asyncio.timeout(5):
            got = await asyncio.gather(*waiting)
        await broker.ack_all(got)
    assert sorted(m.data for m in got) == [b"0", b"1", b"2"]
