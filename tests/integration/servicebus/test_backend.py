"""The polybroker Service Bus backend through the real SDK against the FAKE server.

What the conformance suite does not cover: queues (the suite uses topics and subscriptions), lock
expiry and delivery counts, dead-lettering after the max delivery count and by the consumer,
delayed nacks on queues (scheduled copies), sessions, receive-and-delete, batch splitting,
oversized messages, missing entities, automatic lock renewal, and closing while receiving.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker import OutboundMessage
from broker.driver.testing.harness import collect, drain
from broker.errors import AckError, ClosedError, MessageTooLarge, NotSupported, UnknownTopic
from tests.servicebus_fake import FakeServiceBus


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def backend(fake_servicebus: FakeServiceBus) -> AsyncIterator[broker.Backend]:
    async with broker.connect(fake_servicebus.settings) as connected:
        yield connected


async def test_queue_round_trip_with_either_subscription_spelling(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    topic = backend.publisher().topic(queue)
    await topic.publish(OutboundMessage(b"one", key="k", attributes={"a": "1"}))
    await topic.publish(OutboundMessage(b"two"))
    async with backend.messages(queue, "") as by_empty, backend.messages(queue, queue) as by_name:
        (first,) = await collect(by_empty, 1, 10)
        (second,) = await collect(by_name, 1, 10)
    assert (first.data, first.key, dict(first.attributes)) == (b"one", "k", {"a": "1"})
    assert (second.data, second.key, dict(second.attributes)) == (b"two", None, {})
    assert first.delivery_attempt == 1 and first.publish_time is not None
    assert fake_servicebus.count(queue) == 0


async def test_topic_delivers_to_every_subscription(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    topic = _name("t")
    fake_servicebus.create_topic(topic, ["audit", "billing"])
    await (
        backend.publisher().topic(topic).batch_publish(*(OutboundMessage(str(i).encode()) for i in range(20)))
    )
    for subscription in ("audit", "billing"):
        async with backend.messages(topic, subscription) as consumer:
            got = await collect(consumer, 20, 10)
            assert sorted(int(m.data) for m in got) == list(range(20))
            assert await drain(consumer, 0.3) == []


async def test_lock_expiry_redelivers_with_the_delivery_count(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue, lock_duration=0.5)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"slow"))
    async with backend.messages(queue, "") as consumer:
        (first,) = await collect(consumer, 1, 10, ack=False)
        started = time.monotonic()
        (second,) = await collect(consumer, 1, 10, ack=False)  # after the lock expired
        assert time.monotonic() - started >= 0.3
        assert (second.id, second.data) == (first.id, b"slow")
        assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
        with pytest.raises(AckError):
            await first.ack()  # the first lock is gone
        await second.nack()
        (third,) = await collect(consumer, 1, 10)
        assert third.delivery_attempt == 3
    assert fake_servicebus.count(queue) == 0


async def test_max_delivery_count_dead_letters(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue, max_delivery_count=3)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"poison", attributes={"trace": "t1"}))
    async with backend.messages(queue, "") as consumer:
        attempts = []
        for _ in range(3):
            (message,) = await collect(consumer, 1, 10, ack=False)
            attempts.append(message.delivery_attempt)
            await message.nack()
        assert attempts == [1, 2, 3]
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=0.5)
    async with backend.messages(queue, "", sub_queue="dead_letter") as dead:
        (letter,) = await collect(dead, 1, 10)
    assert letter.data == b"poison"
    assert letter.attributes["trace"] == "t1"
    assert letter.attributes["DeadLetterReason"] == "MaxDeliveryCountExceeded"


async def test_consumer_dead_letters_a_poison_message(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    topic = _name("t")
    fake_servicebus.create_topic(topic, ["work"])
    await backend.publisher().topic(topic).publish(OutboundMessage(b"bad"))
    async with backend.messages(topic, "work") as consumer:
        (message,) = await collect(consumer, 1, 10, ack=False)
        await message.dead_letter("unparseable")
        assert message.state == "dead-lettered"
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=0.5)
    async with backend.messages(topic, "work", sub_queue="dead_letter") as dead:
        (letter,) = await collect(dead, 1, 10)
    assert letter.data == b"bad"
    assert letter.attributes["DeadLetterReason"] == "unparseable"


async def test_delayed_nack_on_a_queue_schedules_a_copy(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"later", key="k", attributes={"a": "1"}))
    async with backend.messages(queue, "") as consumer:
        (first,) = await collect(consumer, 1, 10, ack=False)
        started = time.monotonic()
        await first.nack(delay=1.0)
        assert fake_servicebus.count(queue, "scheduled") == 1  # a scheduled copy; the original is gone
        assert fake_servicebus.count(queue) == 1
        quiet = 1.0 - (time.monotonic() - started) - 0.1  # nothing may arrive before the delay is up
        if quiet > 0:
            with pytest.raises(TimeoutError):
                await consumer.next_message(timeout=quiet)
        (second,) = await collect(consumer, 1, 10)
        assert time.monotonic() - started >= 0.9
    assert (second.id, second.data, second.key, dict(second.attributes)) == (
        first.id,
        b"later",
        "k",
        {"a": "1"},
    )
    assert second.delivery_attempt == 2


async def test_sessions_keep_per_key_order_and_move_on(fake_servicebus: FakeServiceBus) -> None:
    queue = _name("sq")
    fake_servicebus.create_queue(queue, requires_session=True, lock_duration=5)
    url = f"{fake_servicebus.connection_string};"
    async with broker.connect(
        {"url": url, "key_to": "session_id", "sessions": True, "max_wait": 1.0}
    ) as backend:
        assert backend.capabilities.per_key_order
        keys = ["red", "green", "blue"]
        sent = [OutboundMessage(f"{k}:{i}".encode(), key=k) for i in range(10) for k in keys]
        await backend.publisher().topic(queue).batch_publish(*sent)
        async with backend.messages(queue, "") as consumer:
            got = await collect(consumer, len(sent), 30)
        for key in keys:
            assert [int(m.data.split(b":")[1]) for m in got if m.key == key] == list(range(10))
        # One session at a time: each session's messages arrive together.
        order = [m.key for m in got]
        assert sum(1 for a, b in itertools.pairwise(order) if a != b) == len(keys) - 1

        await backend.publisher().topic(queue).publish(OutboundMessage(b"only-green", key="green"))
        await backend.publisher().topic(queue).publish(OutboundMessage(b"only-red", key="red"))
        async with backend.messages(queue, "", session_id="red") as red:
            (message,) = await collect(red, 1, 10, ack=False)
            assert message.data == b"only-red"
            await message.in_progress()  # renews the session lock
            await message.ack()
            with pytest.raises(TimeoutError):
                await red.next_message(timeout=0.5)
        async with backend.messages(queue, "") as any_session:
            (message,) = await collect(any_session, 1, 10)
            assert message.data == b"only-green"


async def test_receive_and_delete(fake_servicebus: FakeServiceBus, backend: broker.Backend) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    await backend.publisher().topic(queue).batch_publish(OutboundMessage(b"a"), OutboundMessage(b"b"))
    async with backend.messages(queue, "", receive_mode="receive_and_delete") as consumer:
        first, second = await collect(consumer, 2, 10, ack=False)
        assert fake_servicebus.count(queue) == 0  # removed on delivery
        await first.ack()  # a no-op
        with pytest.raises(NotSupported):
            await second.nack()


async def test_batch_publish_splits_into_batches_in_order(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("small")
    fake_servicebus.create_queue(queue, max_message_size=16 * 1024)
    payloads = [f"{i:04d}".encode() + b"x" * 3000 for i in range(40)]  # ~120 KB: several batches
    await backend.publisher().topic(queue).batch_publish(*(OutboundMessage(p) for p in payloads))
    async with backend.batched_messages(queue, "", batch_size=100, batch_timeout=1.0) as batches:
        got: list[bytes] = []
        async with asyncio.timeout(20):
            while len(got) < len(payloads):
                batch = await batches.next_batch()
                await broker.ack_all(batch)
                got.extend(m.data for m in batch)
    assert got == payloads


async def test_oversized_messages_raise_message_too_large(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("small")
    fake_servicebus.create_queue(queue, max_message_size=8 * 1024)
    topic = backend.publisher().topic(queue)
    with pytest.raises(MessageTooLarge):
        await topic.publish(OutboundMessage(b"x" * 20_000))
    with pytest.raises(MessageTooLarge):
        await topic.batch_publish(OutboundMessage(b"fits"), OutboundMessage(b"x" * 20_000))
    assert fake_servicebus.count(queue) == 0  # nothing of the refused batch was sent
    await topic.publish(OutboundMessage(b"fits"))
    assert fake_servicebus.count(queue) == 1


async def test_without_create_missing_missing_entities_raise_unknown_topic(
    fake_servicebus: FakeServiceBus,
) -> None:
    async with broker.connect({**fake_servicebus.settings, "create_missing": False}) as backend:
        with pytest.raises(UnknownTopic):
            await backend.publisher().topic(_name("missing")).publish(OutboundMessage(b"x"))
        with pytest.raises(UnknownTopic):  # entering, not at the first receive
            async with backend.messages(_name("missing"), ""):
                pytest.fail("entered a consumer of a queue that does not exist")
        with pytest.raises(UnknownTopic):
            async with backend.messages(_name("missing"), "sub"):
                pytest.fail("entered a consumer of a subscription that does not exist")


async def test_entering_a_consumer_creates_its_queue_or_subscription(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue, topic, sub = _name("made-q"), _name("made-t"), _name("sub")
    async with backend.messages(queue, "", ack_deadline=2.0), backend.messages(topic, sub):
        await backend.publisher().topic(queue).publish(OutboundMessage(b"q"))
        await backend.publisher().topic(topic).publish(OutboundMessage(b"t"))
        assert fake_servicebus.count(queue) == 1
        assert fake_servicebus.count(f"{topic}/Subscriptions/{sub}") == 1
    lock = fake_servicebus.call(lambda: fake_servicebus.namespace.queue(queue).options.lock_duration)
    assert lock == 2.0, "the queue's lock duration is the consumer's ack_deadline"


async def test_a_publish_to_a_missing_name_creates_a_topic(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    name = _name("early")
    await backend.publisher().topic(name).publish(OutboundMessage(b"nobody listens yet"))
    assert fake_servicebus.call(lambda: name.lower() in fake_servicebus.namespace.topics)


async def test_an_unreachable_management_endpoint_turns_creation_off_once(
    fake_servicebus: FakeServiceBus, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    url = {**fake_servicebus.settings, "management_endpoint": closed, "retry_total": 0}
    async with broker.connect(url) as backend:
        for _ in range(2):
            with pytest.raises(UnknownTopic):
                async with backend.messages(_name("missing"), ""):
                    pass
    warnings = [r for r in caplog.records if "not created" in r.getMessage()]
    assert len(warnings) == 1, "one warning, then creation stays off"


@pytest.mark.parametrize("instrumented", [False, True], ids=["plain", "instrumented"])
async def test_lock_renewal_keeps_slow_messages(
    fake_servicebus: FakeServiceBus, backend: broker.Backend, instrumented: bool
) -> None:
    """Locks are renewed while messages are held, also behind broker.telemetry's wrapped acker."""
    if instrumented:
        from broker.telemetry import instrument

        backend = instrument(backend)  # type: ignore[assignment]
    queue = _name("q")
    fake_servicebus.create_queue(queue, lock_duration=1.0)
    await (
        backend.publisher().topic(queue).batch_publish(*(OutboundMessage(str(i).encode()) for i in range(20)))
    )
    async with backend.batched_messages(queue, "", batch_size=20, lock_renewal=30) as batches:
        held: list[broker.Message] = []
        async with asyncio.timeout(10):
            while len(held) < 20:
                held += await batches.next_batch()
        first_lock = held[0].raw.locked_until_utc
        assert await batches.next_batch(timeout=2.5) == []  # every lock would have expired twice
        assert held[0].raw.locked_until_utc > first_lock
        assert fake_servicebus.count(queue, "locked") == 20
        await broker.ack_all(held)
    assert fake_servicebus.count(queue) == 0


async def test_close_wakes_waiters_and_returns_promptly(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    consumer = backend.messages(queue, "")
    batches = backend.batched_messages(queue, "", batch_size=10)
    waiting = [
        asyncio.ensure_future(consumer.next_message()),
        asyncio.ensure_future(batches.next_batch(timeout=60)),
    ]
    await asyncio.sleep(1.0)
    started = time.monotonic()
    await consumer.close()
    await batches.close()
    assert time.monotonic() - started < 0.5
    for task in waiting:
        with pytest.raises(ClosedError):
            await task
    started = time.monotonic()
    await backend.close()
    assert time.monotonic() - started < 5


async def test_unsettled_messages_come_back_after_their_consumer_closes(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue, lock_duration=1.0)
    await (
        backend.publisher().topic(queue).batch_publish(*(OutboundMessage(str(i).encode()) for i in range(10)))
    )
    async with backend.batched_messages(queue, "", batch_size=10) as batches:
        first: list[broker.Message] = []
        async with asyncio.timeout(10):
            while len(first) < 10:
                first += await batches.next_batch()
        await broker.ack_all(first[:2])  # the other eight stay locked when the consumer goes away
    async with backend.messages(queue, "") as consumer:
        rest = await collect(consumer, 8, 15)
        assert await drain(consumer, 0.5) == []
    assert sorted(int(m.data) for m in first[:2] + rest) == list(range(10))
    assert all(m.delivery_attempt == 2 for m in rest)


async def test_the_message_id_attribute_becomes_the_message_id(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    await (
        backend.publisher()
        .topic(queue)
        .publish(OutboundMessage(b"x", attributes={"MessageId": "order-17", "other": "kept"}))
    )
    async with backend.messages(queue, "") as consumer:
        (message,) = await collect(consumer, 1, 10)
    assert message.id == "order-17"
    assert dict(message.attributes) == {"other": "kept"}
