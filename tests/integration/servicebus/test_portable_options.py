"""The portable option names (:mod:`broker.driver.options`) on Service Bus, through the real SDK
against the FAKE.

``ack_deadline``: the consumer renews the lock of a message it handed out until the deadline and
abandons it then, so an unsettled message comes back about ``ack_deadline`` after it was handed
out, also when that is longer than the entity's lock duration. A lock duration longer than
``ack_deadline`` cannot be shortened by the client (a consumer that stops leaves the message
locked that long), so that is a ``ConfigError`` saying so. ``max_attempts`` dead-letters instead of
redelivering after that many deliveries (on a nack, and on receipt of a message whose lock
expired on its last one); ``dead_letter_topic`` is where dead-lettered messages go.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker import OutboundMessage
from broker.backends.servicebus.consumer import _Settler
from broker.backends.servicebus.settings import ConsumerOptions
from broker.driver.acking import own_acker
from broker.driver.testing.harness import collect
from broker.errors import AckError, ConfigError, UnknownSetting
from tests.servicebus_fake import FakeServiceBus


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def backend(fake_servicebus: FakeServiceBus) -> AsyncIterator[broker.Backend]:
    async with broker.connect(fake_servicebus.settings) as connected:
        yield connected


def test_portable_names_are_consumer_options() -> None:
    options = ConsumerOptions(ack_deadline=30, max_attempts=5, dead_letter_topic="dlq")
    assert (options.ack_deadline, options.max_attempts, options.dead_letter_topic) == (30, 5, "dlq")
    with pytest.raises(ConfigError, match="not both"):
        ConsumerOptions(ack_deadline=30, lock_renewal=60)
    with pytest.raises(ConfigError, match="peek_lock"):
        ConsumerOptions(ack_deadline=30, receive_mode="receive_and_delete")
    with pytest.raises(ConfigError):
        ConsumerOptions(max_attempts=0)


async def test_messages_accepts_the_portable_names(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    try:
        consumer = backend.messages(queue, "", ack_deadline=30, max_attempts=5, dead_letter_topic=_name("d"))
    except UnknownSetting as exc:  # pragma: no cover - the defect this guards against
        pytest.fail(f"a portable option name was refused: {exc}")
    await consumer.close()


@pytest.mark.parametrize(("lock", "deadline"), [(1.0, 1.0), (1.0, 3.0)])
async def test_unacked_message_comes_back_after_about_ack_deadline(
    fake_servicebus: FakeServiceBus, backend: broker.Backend, lock: float, deadline: float
) -> None:
    """With the lock as long as the deadline, and shorter (renewed until the deadline)."""
    queue = _name("q")
    fake_servicebus.create_queue(queue, lock_duration=lock)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"late"))
    async with backend.messages(queue, "", ack_deadline=deadline) as consumer:
        (first,) = await collect(consumer, 1, 10, ack=False)
        handed_out = time.monotonic()
        (again,) = await collect(consumer, 1, deadline + 10)
        took = time.monotonic() - handed_out
    assert again.id == first.id and again.delivery_attempt == 2
    assert deadline - 0.3 <= took <= deadline + 1.5, f"redelivered after {took:.2f}s"


async def test_ack_deadline_shorter_than_the_lock_is_a_config_error(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue, lock_duration=30)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"x"))
    async with backend.messages(queue, "", ack_deadline=2) as consumer:
        with pytest.raises(ConfigError, match="lock duration is about 30s"):
            await consumer.next_message(timeout=10)
    # The message was given back, not lost: it is there for a consumer that can honour its deadline.
    async with backend.messages(queue, "", ack_deadline=30) as consumer:
        (message,) = await collect(consumer, 1, 10)
    assert message.data == b"x"


async def test_max_attempts_dead_letters_on_the_last_nack(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue, max_delivery_count=10)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"poison"))
    async with backend.messages(queue, "", max_attempts=2) as consumer:
        for attempt in (1, 2):
            (message,) = await collect(consumer, 1, 10, ack=False)
            assert message.delivery_attempt == attempt
            await message.nack()
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.0)
    (letter,) = fake_servicebus.dead_letters(queue)
    assert letter["body"] == b"poison"


async def test_max_attempts_dead_letters_a_message_whose_lock_expired_on_the_last_try(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    queue, dead = _name("q"), _name("dead")
    fake_servicebus.create_queue(queue, lock_duration=1, max_delivery_count=10)
    fake_servicebus.create_queue(dead)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"poison"))
    async with backend.messages(queue, "", max_attempts=1, dead_letter_topic=dead) as consumer:
        await collect(consumer, 1, 10, ack=False)  # never settled: the lock runs out
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=2.5)
    async with backend.messages(dead, "") as letters:
        (letter,) = await collect(letters, 1, 10)
    assert letter.data == b"poison"
    assert letter.attributes["DeadLetterReason"] == "MaxDeliveryCountExceeded"


async def test_a_late_ack_of_a_message_returned_at_its_deadline_is_counted_once(
    fake_servicebus: FakeServiceBus, backend: broker.Backend
) -> None:
    """The receiver's count of unsettled messages (which decides when a session is released) stays
    right when a message abandoned at its deadline is acked late: the late ack raises, and the
    redelivered copy still counts as unsettled until it is acked."""
    queue = _name("q")
    fake_servicebus.create_queue(queue, lock_duration=1.0)
    await backend.publisher().topic(queue).batch_publish(OutboundMessage(b"a"), OutboundMessage(b"b"))
    async with backend.messages(queue, "", ack_deadline=1.0) as consumer:
        first, second = await collect(consumer, 2, 10, ack=False)
        settler = own_acker(first)
        assert isinstance(settler, _Settler) and own_acker(second) is settler
        await second.ack()
        (again,) = await collect(consumer, 1, 10, ack=False)  # ``first``, back after its deadline
        assert again.data == first.data and again.delivery_attempt == 2
        assert own_acker(again) is settler and settler.outstanding == 1
        with pytest.raises(AckError, match="deadline"):
            await first.ack()
        assert settler.outstanding == 1, "the late ack counted the returned message a second time"
        await again.ack()
        assert settler.outstanding == 0
