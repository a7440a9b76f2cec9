"""``provision`` on Pulsar (pulsar-lite): ``create`` and ``none``; ``verify`` is refused.

The client cannot check that a topic exists (a lookup answers for any name; pulsar-lite serves no
admin REST API), so ``verify`` is a ``ConfigError`` naming the modes offered. ``none`` consumes a
subscription another service made with the raw pulsar-client, and publishes to its topic.
pulsar-lite always auto-creates topics and subscriptions and checks no permissions: a broker with
auto-creation off (``TopicNotFound``) and permission answers are not testable here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pulsar as pulsar_client  # type: ignore[import-untyped]
import pytest

import broker
from broker import OutboundMessage
from broker.errors import ConfigError
from tests.integration.pulsar.server import PulsarTestServer

PATIENCE = 15.0


async def test_provision_none_consumes_a_subscription_made_by_the_raw_client(
    pulsar: PulsarTestServer, name: Callable[..., str]
) -> None:
    topic, sub = name("estate"), name("their-sub")
    client = pulsar_client.Client(
        pulsar.url, logger=pulsar_client.ConsoleLogger(pulsar_client.LoggerLevel.Error)
    )
    try:
        made = await asyncio.to_thread(
            client.subscribe, topic, sub, initial_position=pulsar_client.InitialPosition.Earliest
        )
        await asyncio.to_thread(made.close)  # the subscription stays, with its backlog
    finally:
        await asyncio.to_thread(client.close)
    async with broker.connect(f"{pulsar.url}?provision=none") as backend:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"estate"))
        async with backend.messages(topic, sub) as consumer:
            message = await consumer.next_message(timeout=PATIENCE)
            await message.ack()
    assert message.data == b"estate"


def test_provision_verify_is_refused_naming_the_modes_offered(pulsar: PulsarTestServer) -> None:
    with pytest.raises(ConfigError, match=r"pulsar: provision='verify' is not implemented.*'create', 'none'"):
        broker.connect(f"{pulsar.url}?provision=verify")
