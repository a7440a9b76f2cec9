"""Typed publishing and every typed consumption style, on the in-memory broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker import OutboundMessage, adapt, typed
from broker.backoff import Backoff
from broker.errors import ConfigError, DecodeError
from broker.message import Record
from broker.retry import ATTR_REASON, DeadLetterTopic, RetryPolicy
from tests.unit.typed_models import Order, Payment, Point

FAST = Backoff(0.01, 1.0, 0.01)


@pytest.fixture
async def backend() -> AsyncIterator[broker.Backend]:
    async with broker.connect(f"inmem://typed-{uuid.uuid4().hex}") as connected:
        yield connected


async def test_publish_and_messages_keep_key_attributes_and_settlement(backend: broker.Backend) -> None:
    orders = typed.topic(backend.publisher(), "orders", Order)
    async with typed.messages(backend.messages("orders", "s"), Order) as consumer:
        await orders.publish(Order(1), key="c-1", attributes={"trace": "t"})
        message = await consumer.next_message(timeout=1)
        assert message.key == "c-1"
        assert dict(message.attributes) == {"content-type": "application/json", "trace": "t"}
        assert message.data == b'{"id":1,"item":"book","tags":[]}'
        assert message.decoded == Order(1)
        assert message.decoded is message.decoded  # decoded once, kept
        assert typed.content_type(message) == "application/json" and message.delivery_attempt == 1
        await message.ack()
        assert message.state == "acked" and message.settled


async def test_a_bad_payload_fails_on_read_not_on_fetch(backend: broker.Backend) -> None:
    raw = backend.publisher().topic("orders")
    async with typed.messages(backend.messages("orders", "s"), Order) as consumer:
        await raw.publish(OutboundMessage(b'{"id":"x"}'))
        await raw.publish(OutboundMessage(b'{"id":2}'))
        bad = await consumer.next_message(timeout=1)
        good = await consumer.next_message(timeout=1)
        assert good.decoded == Order(2)
        with pytest.raises(DecodeError) as caught:
            bad.decoded  # noqa: B018 - the read raises
        assert caught.value.received is bad
        assert bad.data == b'{"id":"x"}' and bad.state == "pending"


async def test_a_user_content_type_attribute_is_kept(backend: broker.Backend) -> None:
    orders = typed.topic(backend.publisher(), "orders", Order)
    async with backend.messages("orders", "s") as consumer:
        await orders.publish(Order(1), attributes={"content-type": "application/json; charset=utf-8"})
        message = await consumer.next_message(timeout=1)
    assert message.attributes["content-type"] == "application/json; charset=utf-8"
    assert typed.tag_message(message, typed.binding(Order)).decoded == Order(1)


async def test_batch_publish_and_batched_messages(backend: broker.Backend) -> None:
    points = typed.topic(backend.publisher(), "points", typed.binding(Point, format="msgpack"))
    async with typed.batched_messages(
        backend.batched_messages("points", "s", batch_size=10), Point
    ) as batches:
        await points.batch_publish(Point(1, 1), Point(2, 2), keys=["a", "b"])
        batch = await batches.next_batch(timeout=1)
        assert [m.decoded for m in batch] == [Point(1, 1), Point(2, 2)]  # msgpack picked by content type
        assert [m.key for m in batch] == ["a", "b"]
        await broker.ack_all(batch)
    with pytest.raises(ConfigError):
        await points.batch_publish(Point(1, 1), keys=[])


async def test_records_and_batched_records(backend: broker.Backend) -> None:
    payments = typed.topic(backend.publisher(), "payments", Payment)
    await payments.batch_publish(Payment(id=1, amount=1.0), Payment(id=2, amount=2.0))
    async with typed.records(backend.records("payments", "g"), Payment) as records:
        first = await records.next_record(timeout=1)
        assert first.decoded == Payment(id=1, amount=1.0) and first.offset == 0 and first.topic == "payments"
        await first.ack()
    async with typed.batched_records(
        backend.batched_records("payments", "g2", batch_size=5), Payment
    ) as batches:
        batch = await batches.next_batch(timeout=1)
        assert [r.decoded for r in batch] == [Payment(id=1, amount=1.0), Payment(id=2, amount=2.0)]


def test_a_tombstone_decodes_to_none() -> None:
    tombstone = typed.tag_record(Record("t", 0, 5, None, key="k"), typed.binding(Order))
    assert tombstone.decoded is None and tombstone.value is None


async def test_receiver_dead_letters_an_undecodable_message_natively(backend: broker.Backend) -> None:
    raw = backend.publisher().topic("orders")
    handled: list[Order] = []
    receiver = typed.receiver(
        backend.receiver("orders", "s", max_attempts=5, dead_letter_topic="orders-dlq"), Order
    )

    async def handle(message: typed.TypedMessage[Order]) -> None:
        handled.append(message.decoded)
        await message.ack()

    async with backend.messages("orders-dlq", "inspect") as dead:
        task = asyncio.ensure_future(receiver.receive(handle))
        await raw.batch_publish(
            OutboundMessage(b'{"id":1}'), OutboundMessage(b"{oops"), OutboundMessage(b'{"id":3}')
        )
        letter = await dead.next_message(timeout=2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert letter.data == b"{oops"
    assert handled == [Order(1), Order(3)]


async def test_receiver_with_a_retry_policy_dead_letters_with_the_reason(backend: broker.Backend) -> None:
    raw = backend.publisher().topic("orders")
    handled: list[int] = []
    policy = RetryPolicy(max_attempts=3, backoff=FAST, dead_letter=DeadLetterTopic("dlq"))
    receiver = typed.receiver(backend.receiver("orders", "s", retry=policy, concurrency=2), Order)

    async def handle(message: typed.TypedMessage[Order]) -> None:
        handled.append(message.decoded.id)
        await message.ack()

    async with backend.messages("dlq", "inspect") as dead:
        task = asyncio.ensure_future(receiver.receive(handle))
        await raw.batch_publish(
            OutboundMessage(b'{"id":1}'),
            OutboundMessage(b'{"id":2}', attributes={"content-type": "text/csv"}),
            OutboundMessage(b'{"id":3}'),
        )
        letter = await dead.next_message(timeout=2)
        await asyncio.sleep(0.05)
        receiver.stop()
        await task
    assert sorted(handled) == [1, 3]
    assert letter.attributes[ATTR_REASON] == "non-retryable DecodeError"
    assert letter.attributes["content-type"] == "text/csv"
    assert "unknown content type" in letter.attributes["x-dead-letter-error"]


async def test_on_decode_error_hook_settles_the_message(backend: broker.Backend) -> None:
    seen: list[DecodeError] = []

    async def on_error(message: typed.TypedMessage[object], error: DecodeError) -> None:
        seen.append(error)
        await message.ack()

    async def handle(message: typed.TypedMessage[Order]) -> None:
        message.decoded  # noqa: B018 - the read raises

    receiver = typed.receiver(backend.receiver("orders", "s"), Order, on_decode_error=on_error)
    task = asyncio.ensure_future(receiver.receive(handle))
    await backend.publisher().topic("orders").publish(OutboundMessage(b"[]"))
    async with asyncio.timeout(2):
        while not seen:  # noqa: ASYNC110 - polling a list the hook fills
            await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert seen[0].received.state == "acked"


async def test_batched_receiver_settles_only_the_bad_message(backend: broker.Backend) -> None:
    raw = backend.publisher().topic("orders")
    handled: list[int] = []
    dead: list[str] = []

    async def on_error(message: typed.TypedMessage[object], error: DecodeError) -> None:
        dead.append(message.data.decode())
        await message.ack()

    async def handle(batch: list[typed.TypedMessage[Order]]) -> None:
        for message in batch:
            handled.append(message.decoded.id)
            await message.ack()

    source = adapt.batched_receiver(
        backend.batched_messages("orders", "s", batch_size=3, batch_timeout=0.05), nack_delay=0.0
    )
    receiver = typed.batched_receiver(source, Order, on_decode_error=on_error)
    task = asyncio.ensure_future(receiver.receive_batch(handle))
    await raw.batch_publish(
        OutboundMessage(b'{"id":1}'), OutboundMessage(b"bad"), OutboundMessage(b'{"id":3}')
    )
    async with asyncio.timeout(2):
        while 3 not in handled:  # noqa: ASYNC110 - polling a list the handler fills
            await asyncio.sleep(0.01)
    receiver.stop()
    await task
    assert dead == ["bad"]
    assert sorted(set(handled)) == [1, 3]


async def test_streams_from_the_adapters(backend: broker.Backend) -> None:
    orders = typed.topic(backend.publisher(), "orders", Order)
    await orders.batch_publish(Order(1), Order(2))
    async with adapt.message_stream(backend.messages("orders", "s")) as source:
        got = []
        async for message in typed.stream(source, Order):
            got.append(message.decoded.id)
            await message.ack()
            if len(got) == 2:
                break
    assert got == [1, 2]
    async with adapt.record_stream(backend.records("orders", "g")) as records:
        async for record in typed.record_stream(records, Order):
            assert record.decoded == Order(1)
            break


async def test_records_dead_lettered_then_committed_past(backend: broker.Backend) -> None:
    """On a partitioned log a bad record goes to the dead-letter topic and its offset is committed."""
    raw = backend.publisher().topic("log")
    await raw.batch_publish(
        OutboundMessage(b'{"id":1}'), OutboundMessage(b"bad"), OutboundMessage(b'{"id":3}')
    )
    retrier = RetryPolicy(mode="ordered", backoff=FAST, dead_letter=DeadLetterTopic("log-dlq")).bind(
        publisher=backend.publisher()
    )
    handled: list[int] = []

    async def handle(record: typed.TypedRecord[Order]) -> None:
        value = record.decoded
        assert value is not None
        handled.append(value.id)
        await record.ack()

    async with typed.records(backend.records("log", "g"), Order) as records:
        for _ in range(3):
            record = await records.next_record(timeout=1)
            outcome = await retrier.handle(
                record, lambda r: handle(typed.tag_record(r, records.binding))
            )
            assert outcome in ("handled", "dead-lettered")
    assert handled == [1, 3]
    async with backend.records("log-dlq", "inspect") as dead:
        letter = await dead.next_record(timeout=1)
    assert letter.value == b"bad" and letter.attributes[ATTR_REASON] == "non-retryable DecodeError"
    async with backend.records("log", "g") as again:  # everything was committed past
        with pytest.raises(TimeoutError):
            await again.next_record(timeout=0.1)
