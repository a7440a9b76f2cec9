"""Interop with Pulsar services that do not use polybroker (pulsar-client on one side), both ways.

The wire places are the ones docs/interop.md lists: the payload is the message data, the key the
partition key, attributes are message properties; polybroker adds nothing of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pulsar as pulsar_client  # type: ignore[import-untyped]

from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from tests.integration.pulsar.server import PulsarTestServer

Name = Callable[..., str]
PATIENCE = 15.0


async def test_raw_pulsar_producer_to_polybroker_consumer(
    pulsar: PulsarTestServer, backend: PulsarBackend, name: Name
) -> None:
    topic, sub = name("interop-in"), name("sub")
    client = pulsar_client.Client(
        pulsar.url, logger=pulsar_client.ConsoleLogger(pulsar_client.LoggerLevel.Error)
    )
    try:
        async with backend.messages(topic, sub) as consumer:
            producer = await asyncio.to_thread(client.create_producer, topic)
            await asyncio.to_thread(
                producer.send, b"\x00raw-data", {"tenant": "acme", "trace": "t-1"}, partition_key="order-7"
            )
            message = await consumer.next_message(timeout=PATIENCE)
            await message.ack()
    finally:
        await asyncio.to_thread(client.close)
    assert message.data == b"\x00raw-data"
    assert message.key == "order-7"
    assert dict(message.attributes) == {"tenant": "acme", "trace": "t-1"}


async def test_polybroker_producer_to_raw_pulsar_consumer(
    pulsar: PulsarTestServer, backend: PulsarBackend, name: Name
) -> None:
    topic, sub = name("interop-out"), name("sub")
    client = pulsar_client.Client(
        pulsar.url, logger=pulsar_client.ConsoleLogger(pulsar_client.LoggerLevel.Error)
    )
    try:
        consumer = await asyncio.to_thread(
            client.subscribe, topic, sub, initial_position=pulsar_client.InitialPosition.Earliest
        )
        sent = OutboundMessage(b"\x00poly-data", key="order-7", attributes={"tenant": "acme", "trace": "t-1"})
        await backend.publisher().topic(topic).publish(sent)
        received = await asyncio.to_thread(consumer.receive, int(PATIENCE * 1000))
        await asyncio.to_thread(consumer.acknowledge, received)
    finally:
        await asyncio.to_thread(client.close)
    assert received.data() == b"\x00poly-data"
    assert received.partition_key() == "order-7"
    assert received.properties() == {"tenant": "acme", "trace": "t-1"}
