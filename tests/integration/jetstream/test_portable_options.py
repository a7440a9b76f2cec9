"""The portable option names (:mod:`broker.driver.options`) on JetStream: accepted, mapped, honoured.

``ack_deadline`` is the consumer's ``ack_wait``, ``max_attempts`` its ``max_deliver`` and
``dead_letter_topic`` the subject a message is republished to when it is dead-lettered.
"""

from __future__ import annotations

import time

import pytest

from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.backends.jetstream.settings import JetStreamSettings
from broker.errors import ConfigError
from broker.testing import collect
from tests.integration.jetstream.helpers import unique


def test_portable_names_map_to_jetstream_options() -> None:
    options = JetStreamSettings().consumer_options(
        {"ack_deadline": 2.5, "max_attempts": 3, "dead_letter_topic": "dead.letters"}
    )
    assert options.ack_wait == 2.5
    assert options.max_deliver == 3
    assert options.dead_letter_subject == "dead.letters"
    with pytest.raises(ConfigError, match="not both"):
        JetStreamSettings().consumer_options({"max_attempts": 3, "max_deliver": 3})
    with pytest.raises(ConfigError):
        JetStreamSettings().consumer_options({"ack_deadline": 0})


@pytest.mark.parametrize("deadline", [1.0, 2.0])
async def test_unacked_message_comes_back_after_about_ack_deadline(
    backend: JetStreamBackend, deadline: float
) -> None:
    topic, sub = unique("t"), unique("c")
    async with backend.messages(topic, sub, ack_deadline=deadline) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"late"))
        (first,) = await collect(consumer, 1, 10, ack=False)
        handed_out = time.monotonic()
        (again,) = await collect(consumer, 1, deadline + 5)
        took = time.monotonic() - handed_out
    assert again.id == first.id and again.delivery_attempt == 2
    assert deadline - 0.2 <= took <= deadline + 1.0, f"redelivered after {took:.2f}s"


async def test_max_attempts_dead_letters_to_dead_letter_topic(backend: JetStreamBackend) -> None:
    topic, sub, dead = unique("t"), unique("c"), unique("dead")
    async with backend.messages(dead, "reader") as letters:
        async with backend.messages(topic, sub, max_attempts=2, dead_letter_topic=dead) as consumer:
            await backend.publisher().topic(topic).publish(OutboundMessage(b"poison"))
            for attempt in (1, 2):
                (message,) = await collect(consumer, 1, 10, ack=False)
                assert message.delivery_attempt == attempt
                await message.nack()
            with pytest.raises(TimeoutError):
                await consumer.next_message(timeout=1.0)
        (letter,) = await collect(letters, 1, 10)
    assert letter.data == b"poison"
