"""``provision`` on Pub/Sub (the emulator): an estate whose topics and subscriptions others made.

``verify`` and ``none`` consume a subscription the raw google-cloud-pubsub client created, named by its
full ``projects/P/subscriptions/S`` path, and publish to its topic; a missing topic or subscription
is a ``ProvisioningError`` naming it (publishing, consuming, and ``ping()`` for the settings'
dead-letter topic), and nothing is created by trying. The emulator has no IAM: permission-denied
answers cannot be tested here.
"""

from __future__ import annotations

import uuid

import pytest

import broker
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer
from broker.errors import ConfigError, ProvisioningError, UnknownTopic
from tests.integration.pubsub.test_interop import PATIENCE, raw_clients


@pytest.mark.parametrize("mode", ["verify", "none"])
async def test_provision_verify_and_none_consume_a_raw_subscription_by_its_full_path(
    pubsub_emulator: ProcessServer, mode: str
) -> None:
    with raw_clients(pubsub_emulator) as (_, subscriber, topic):
        subscription = topic.replace("/topics/", "/subscriptions/")
        subscriber.create_subscription(name=subscription, topic=topic)
        async with broker.connect(f"{pubsub_emulator.url}&provision={mode}") as backend:
            await backend.ping()
            async with backend.messages(topic, subscription) as consumer:
                await backend.publisher().topic(topic).publish(OutboundMessage(b"estate"))
                message = await consumer.next_message(timeout=PATIENCE)
                await message.ack()
    assert message.data == b"estate"


async def test_provision_verify_names_what_is_missing_and_creates_nothing(
    pubsub_emulator: ProcessServer,
) -> None:
    project = f"verify-{uuid.uuid4().hex[:8]}"
    base = f"pubsub://{project}?{pubsub_emulator.url.split('?', 1)[1]}"  # a project of its own
    topic, subscription = "absent", "absent-sub"
    full_topic = f"projects/{project}/topics/{topic}"
    full_subscription = f"projects/{project}/subscriptions/{subscription}"
    async with broker.connect(f"{base}&provision=verify&dead_letter_topic=letters") as backend:
        with pytest.raises(ProvisioningError) as pinged:
            await backend.ping()
        assert pinged.value.missing == (f"topic 'projects/{project}/topics/letters'",)
    async with broker.connect(f"{base}&provision=verify") as backend:
        with pytest.raises(ProvisioningError) as published:
            await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
        assert published.value.missing == (f"topic {full_topic!r}",)
        with pytest.raises(ProvisioningError) as consumed:
            async with backend.messages(topic, subscription):
                pass
        assert consumed.value.missing == (f"subscription {full_subscription!r}", f"topic {full_topic!r}")
    async with broker.connect(f"{base}&provision=none") as backend:  # verify created nothing
        with pytest.raises(UnknownTopic):
            await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
    with pytest.raises(ConfigError, match="create_missing"):
        broker.connect(f"{base}&provision=verify&create_missing=true")
