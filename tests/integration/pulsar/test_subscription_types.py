"""Existing Pulsar subscriptions of every type, made by the raw pulsar-client, consumed by name.

Another service made the subscription (``Shared``, ``Exclusive``, ``Failover`` or ``Key_Shared``)
and closed its consumer; the subscription keeps the backlog. Under ``provision=none`` polybroker
consumes it by its own name (the subscription argument) with the consumer setting
``subscription_type`` of the same type, and gets every message exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pulsar as pulsar_client  # type: ignore[import-untyped]
import pytest

import broker
from broker.errors import Timeout
from tests.integration.pulsar.server import PulsarTestServer

PATIENCE = 15.0

#: polybroker's ``subscription_type`` -> the raw client's consumer type.
TYPES = {
    "shared": pulsar_client.ConsumerType.Shared,
    "exclusive": pulsar_client.ConsumerType.Exclusive,
    "failover": pulsar_client.ConsumerType.Failover,
    "key_shared": pulsar_client.ConsumerType.KeyShared,
}


def _make_estate(url: str, topic: str, subscription: str, kind: str, count: int) -> None:
    """The other service: subscribe with type ``kind``, close, then publish ``count`` keyed messages."""
    client = pulsar_client.Client(url, logger=pulsar_client.ConsoleLogger(pulsar_client.LoggerLevel.Error))
    try:
        made = client.subscribe(
            topic,
            subscription,
            consumer_type=TYPES[kind],
            initial_position=pulsar_client.InitialPosition.Latest,
        )
        made.close()  # the subscription stays, with its type and its backlog
        producer = client.create_producer(topic)
        for i in range(count):
            producer.send(f"{kind}-{i}".encode(), partition_key=f"k{i % 2}", properties={"n": str(i)})
        producer.close()
    finally:
        client.close()


@pytest.mark.parametrize("kind", sorted(TYPES))
async def test_an_existing_subscription_of_each_type_is_consumed_by_its_name(
    pulsar: PulsarTestServer, name: Callable[..., str], kind: str
) -> None:
    topic, subscription = name(f"estate-{kind}"), name("their-sub")
    await asyncio.to_thread(_make_estate, pulsar.url, topic, subscription, kind, 4)
    async with (
        asyncio.timeout(4 * PATIENCE),
        broker.connect(f"{pulsar.url}?provision=none") as backend,
        backend.messages(topic, subscription, subscription_type=kind) as consumer,
    ):
        got = []
        for _ in range(4):
            message = await consumer.next_message(timeout=PATIENCE)
            got.append((message.data, message.key, message.attributes["n"]))
            await message.ack()
        with pytest.raises(Timeout):
            await consumer.next_message(timeout=0.3)
    assert sorted(got) == [(f"{kind}-{i}".encode(), f"k{i % 2}", str(i)) for i in range(4)]
