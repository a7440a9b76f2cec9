"""``provision`` on Service Bus (the fake, through its HTTP management API): entities others made.

``verify`` publishes to and consumes a queue, and a topic's subscription, made beforehand by
someone else; a missing queue, topic or subscription is a ``ProvisioningError`` naming it
(publishing, consuming, and ``ping()`` for the settings' ``dead_letter_topic``), and nothing is
created by trying. The fake checks no token: the Manage right each mode needs cannot be tested here.
"""

from __future__ import annotations

import uuid

import pytest

import broker
from broker import OutboundMessage
from broker.errors import ProvisioningError
from tests.servicebus_fake import FakeServiceBus

PATIENCE = 10.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_provision_verify_uses_a_queue_and_a_subscription_made_by_others(
    fake_servicebus: FakeServiceBus,
) -> None:
    queue, topic, subscription = _name("q"), _name("t"), _name("s")
    fake_servicebus.create_queue(queue)
    fake_servicebus.create_topic(topic)
    fake_servicebus.create_subscription(topic, subscription)
    async with broker.connect({**fake_servicebus.settings, "provision": "verify"}) as backend:
        async with backend.messages(queue, ""):  # the queue is found: entering raises nothing
            pass
        await backend.publisher().topic(topic).publish(OutboundMessage(b"to the topic"))
        async with backend.messages(topic, subscription) as consumer:
            message = await consumer.next_message(timeout=PATIENCE)
            await message.ack()
    assert message.data == b"to the topic"


async def test_provision_verify_names_missing_entities_and_creates_none(
    fake_servicebus: FakeServiceBus,
) -> None:
    topic, absent = _name("t"), _name("absent")
    fake_servicebus.create_topic(topic)
    settings = {**fake_servicebus.settings, "provision": "verify"}
    async with broker.connect({**settings, "dead_letter_topic": absent}) as backend:
        with pytest.raises(ProvisioningError) as pinged:
            await backend.ping()
        assert pinged.value.missing == (f"queue or topic {absent!r}",)
    async with broker.connect(settings) as backend:
        with pytest.raises(ProvisioningError) as published:
            await backend.publisher().topic(absent).publish(OutboundMessage(b"x"))
        assert published.value.missing == (f"queue or topic {absent!r}",)
        with pytest.raises(ProvisioningError) as queued:
            async with backend.messages(absent, ""):
                pass
        assert queued.value.missing == (f"queue {absent!r}",)
        with pytest.raises(ProvisioningError) as subscribed:
            async with backend.messages(absent, "sub"):
                pass
        assert subscribed.value.missing == (f"subscription 'sub' of topic {absent!r}", f"topic {absent!r}")
        with pytest.raises(ProvisioningError) as only_sub:
            async with backend.messages(topic, "sub"):
                pass
        assert only_sub.value.missing == (f"subscription 'sub' of topic {topic!r}",)
    namespace = fake_servicebus.namespace
    assert absent not in namespace.queues and absent not in namespace.topics
    assert "sub" not in namespace.topics[topic].subscriptions
