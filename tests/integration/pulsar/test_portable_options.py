"""The portable option names (:mod:`broker.driver.options`) on Pulsar: accepted, mapped, and honoured.

``ack_deadline`` is the consumer's ack timeout: an unacknowledged message comes back about
``ack_deadline`` after it was handed out - not before, and not much later (the client checks
its timeouts about once a second). The client refuses ack timeouts below 10 s, so a shorter
``ack_deadline`` is a ``ConfigError`` that says so, never silently something else.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from broker.backends.pulsar.settings import MIN_ACK_TIMEOUT, PulsarSettings
from broker.errors import ConfigError
from broker.testing import collect

Name = Callable[..., str]


def test_portable_names_map_to_pulsar_options() -> None:
    options = PulsarSettings().consumer_options(
        {"ack_deadline": 12, "max_attempts": 3, "dead_letter_topic": "dlq"}
    )
    assert options.ack_timeout == 12.0
    assert options.max_attempts == 3 and options.dead_letter_topic == "dlq"


def test_ack_deadline_below_the_client_floor_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"at least 10 seconds.*Pulsar client"):
        PulsarSettings().consumer_options({"ack_deadline": 2})
    with pytest.raises(ConfigError, match="not both"):
        PulsarSettings().consumer_options({"ack_deadline": 12, "ack_timeout": 12})


async def test_messages_takes_the_portable_names(backend: PulsarBackend, name: Name) -> None:
    with pytest.raises(ConfigError, match="at least 10"):
        backend.messages(name("topic"), name("sub"), ack_deadline=1)
    consumer = backend.messages(
        name("topic"), name("sub"), ack_deadline=MIN_ACK_TIMEOUT, max_attempts=3, dead_letter_topic=name("d")
    )
    async with consumer:
        assert consumer.options.ack_timeout == MIN_ACK_TIMEOUT
        assert consumer.options.max_attempts == 3


@pytest.mark.slow
async def test_unacked_message_comes_back_after_about_ack_deadline(
    backend: PulsarBackend, name: Name
) -> None:
    topic, sub = name("topic"), name("sub")
    deadline = MIN_ACK_TIMEOUT
    async with backend.messages(topic, sub, ack_deadline=deadline) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"late"))
        (first,) = await collect(consumer, 1, 10, ack=False)
        handed_out = time.monotonic()
        with pytest.raises(TimeoutError):  # not before the deadline
            await consumer.next_message(timeout=deadline - 1.0)
        (again,) = await collect(consumer, 1, 5)
        took = time.monotonic() - handed_out
    assert again.id == first.id and again.delivery_attempt == 2
    assert deadline - 0.5 <= took <= deadline + 3.0, f"redelivered after {took:.1f}s"


async def test_max_attempts_dead_letters_to_dead_letter_topic(backend: PulsarBackend, name: Name) -> None:
    topic, sub, dlq = name("topic"), name("sub"), name("dlq")
    await backend.create_subscription(dlq, "reader")
    async with backend.messages(topic, sub, max_attempts=2, dead_letter_topic=dlq) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"poison"))
        for attempt in (1, 2):
            (message,) = await collect(consumer, 1, 10, ack=False)
            assert message.delivery_attempt == attempt
            await message.nack()
        with pytest.raises(TimeoutError):
            await consumer.next_message(timeout=1.5)
    async with backend.messages(dlq, "reader") as dead:
        (letter,) = await collect(dead, 1, 10)
    assert letter.data == b"poison"
