"""What is specific to RabbitMQ: the queue topology, dead-lettering, the emulated delay and deadline."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

import broker
from broker import OutboundMessage
from broker.backends.rabbitmq import RabbitmqDevServer
from broker.backends.rabbitmq.backend import RabbitmqBackend
from broker.errors import AckError, AuthenticationFailed, ConfigError


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_dead_letter_goes_to_the_dead_letter_topic(backend: RabbitmqBackend) -> None:
    topic, dlq = _name("orders"), _name("dlq")
    async with (
        backend.messages(dlq, "inspect") as dead,
        backend.messages(topic, "work", dead_letter_topic=dlq) as consumer,
    ):
        await (
            backend.publisher()
            .topic(topic)
            .publish(OutboundMessage(b"poison", key="k", attributes={"a": "1"}))
        )
        message = await consumer.next_message(timeout=5)
        await message.dead_letter("bad input")
        letter = await dead.next_message(timeout=5)
        assert (letter.data, letter.key, dict(letter.attributes)) == (b"poison", "k", {"a": "1"})
        assert letter.id == message.id
        await letter.ack()
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=0.5)


async def test_delivery_attempt_counts_and_the_limit_drops_without_a_dead_letter_topic(
    backend: RabbitmqBackend,
) -> None:
    topic = _name("orders")
    async with backend.messages(topic, "work", max_attempts=3) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
        attempts = []
        for _ in range(3):
            message = await consumer.next_message(timeout=5)
            attempts.append(message.delivery_attempt)
            await message.nack()
        assert attempts == [1, 2, 3]
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=0.5)


async def test_queue_arguments_cannot_change_under_an_existing_subscription(backend: RabbitmqBackend) -> None:
    topic = _name("orders")
    async with backend.messages(topic, "work", max_attempts=3):
        pass
    with pytest.raises(ConfigError, match="other settings"):
        async with backend.messages(topic, "work", max_attempts=4):
            pass
    async with backend.messages(topic, "work", max_attempts=3, ack_deadline=2, prefetch=5):
        pass  # client-side options may differ


async def test_a_delayed_nack_holds_the_message_from_every_consumer(backend: RabbitmqBackend) -> None:
    topic = _name("orders")
    async with backend.messages(topic, "work") as first, backend.messages(topic, "work") as second:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"later"))
        got = await asyncio.wait(
            [asyncio.ensure_future(c.next_message(timeout=5)) for c in (first, second)],
            return_when=asyncio.FIRST_COMPLETED,
        )
        done, pending = got
        message = done.pop().result()
        for task in pending:
            task.cancel()
        started = time.monotonic()
        await message.nack(delay=1.0)
        tasks = [asyncio.ensure_future(c.next_message(timeout=5)) for c in (first, second)]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        again = done.pop().result()
        assert again.data == b"later" and again.delivery_attempt == 2
        assert time.monotonic() - started >= 0.9
        await again.ack()


async def test_ack_after_the_deadline_raises_and_the_message_comes_back(backend: RabbitmqBackend) -> None:
    topic = _name("orders")
    async with backend.messages(topic, "work", ack_deadline=0.3) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"slow"))
        message = await consumer.next_message(timeout=5)
        again = await consumer.next_message(timeout=5)
        with pytest.raises(AckError, match="deadline"):
            await message.ack()
        assert message.state == "pending"
        await again.ack()


async def test_reserved_header_names_round_trip_as_attributes(backend: RabbitmqBackend) -> None:
    topic = _name("orders")
    attributes = {"x-death": "d", "x-delivery-count": "9", "Polybroker-Key": "fake", "n" * 200: "long"}
    async with backend.messages(topic, "work") as consumer:
        await (
            backend.publisher().topic(topic).publish(OutboundMessage(b"x", key="real", attributes=attributes))
        )
        message = await consumer.next_message(timeout=5)
        await message.ack()
    assert message.key == "real"
    assert dict(message.attributes) == attributes
    assert message.delivery_attempt == 1


async def test_topic_exchanges_route_by_key(rabbitmq_server: RabbitmqDevServer) -> None:
    topic = _name("events")
    async with (
        broker.connect(f"{rabbitmq_server.url}?exchange_type=topic&binding_key=eu.*") as eu,
        broker.connect(f"{rabbitmq_server.url}?exchange_type=topic") as everything,
    ):
        async with eu.messages(topic, "eu") as eu_only, everything.messages(topic, "all") as every:
            await (
                eu.publisher()
                .topic(topic)
                .batch_publish(
                    OutboundMessage(b"1", key="eu.de"),
                    OutboundMessage(b"2", key="us.ny"),
                    OutboundMessage(b"3"),
                )
            )
            got = [await every.next_message(timeout=5) for _ in range(3)]
            assert sorted(m.data for m in got) == [b"1", b"2", b"3"]  # "#" matches the empty routing key too
            only = await eu_only.next_message(timeout=5)
            assert only.data == b"1"
            with pytest.raises(TimeoutError):
                await eu_only.next_message(timeout=0.3)


async def test_a_wrong_password_is_an_authentication_failure(rabbitmq_server: RabbitmqDevServer) -> None:
    url = f"rabbitmq://guest:wrong@127.0.0.1:{rabbitmq_server.port}/?connect_timeout=5"
    async with broker.connect(url) as backend:
        with pytest.raises(AuthenticationFailed) as caught:
            await backend.publisher().topic("t").publish(OutboundMessage(b"x"))
        assert "wrong" not in str(caught.value)


async def test_an_ack_racing_an_expired_deadline_is_refused_or_wins_never_both(
    backend: RabbitmqBackend,
) -> None:
    """The emulated deadline returns a message with ``basic.nack`` while the handler may be acking it.

    aio-pika marks a delivery settled only once its frame is written, so both could go out: the
    handler's ack "succeeds" and the broker redelivers the message anyway (and closes the channel
    for the unknown delivery tag). Whichever starts first wins; the other is refused or skipped.
    """
    topic = _name("race")
    async with backend.messages(topic, "work", ack_deadline=30) as consumer:
        publisher = backend.publisher().topic(topic)
        await publisher.batch_publish(OutboundMessage(b"returned"), OutboundMessage(b"acked"))
        returned = await consumer.next_message(timeout=5)
        acked = await consumer.next_message(timeout=5)
        acker = returned.acker
        # The deadline of the first fires and its return is on the wire: the ack must fail.
        acker._requeue_later(returned)  # type: ignore[attr-defined]
        await asyncio.sleep(0)
        with pytest.raises(AckError, match="deadline"):
            await returned.ack()
        # The deadline of the second fires while its ack is being sent: the return is skipped.
        acker._requeue_later(acked)  # type: ignore[attr-defined]
        await acked.ack()
        again = await consumer.next_message(timeout=5)
        assert again.data == b"returned" and again.delivery_attempt == 2
        await again.ack()
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.0)  # the acked one never comes back
    async with backend.messages(topic, "work") as reopened:  # nor after the channel closed
        with pytest.raises(TimeoutError):
            await reopened.next_message(timeout=1.0)
