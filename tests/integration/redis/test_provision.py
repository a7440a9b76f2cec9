"""``provision`` on Redis: ``create`` makes streams and groups, ``verify`` names what is missing in a
``ProvisioningError``, ``none`` makes nothing and lets ``UnknownTopic`` surface; neither creates."""

from __future__ import annotations

import pytest
import redis.asyncio as raw_redis

import broker
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer
from broker.errors import ProvisioningError, UnknownTopic


async def test_verify_names_the_missing_stream_group_and_dead_letter_stream(
    redis_server: ProcessServer,
) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    url = f"{redis_server.url}?provision=verify&poll_interval=0.1"
    try:
        async with broker.connect(f"{url}&dead_letter_topic=pv-dlq") as backend:
            with pytest.raises(ProvisioningError) as published:
                await backend.publisher().topic("pv-orders").publish(OutboundMessage(b"x"))
            assert published.value.missing == ("stream 'pv-orders'",)
            with pytest.raises(ProvisioningError) as pinged:
                await backend.ping()
            assert pinged.value.missing == ("stream 'pv-dlq'",)
            with pytest.raises(ProvisioningError) as consumed:
                async with backend.messages("pv-orders", "app") as consumer:
                    await consumer.next_message(timeout=5)
            assert consumed.value.missing == (
                "stream 'pv-orders'",
                "consumer group 'app' of stream 'pv-orders'",
                "stream 'pv-dlq'",
            )
            assert await client.exists("pv-orders", "pv-dlq") == 0  # trying created nothing
            await client.xgroup_create("pv-orders", "app", id="0", mkstream=True)
            await client.xgroup_create("pv-dlq", "inspect", id="0", mkstream=True)
            await backend.ping()
            await backend.publisher().topic("pv-orders").publish(OutboundMessage(b"there"))
            async with backend.messages("pv-orders", "app") as consumer:
                message = await consumer.next_message(timeout=5)
                await message.ack()
            assert message.data == b"there"
            with pytest.raises(ProvisioningError) as no_group:
                async with backend.messages("pv-orders", "other") as consumer:
                    await consumer.next_message(timeout=5)
            assert no_group.value.missing == ("consumer group 'other' of stream 'pv-orders'",)
    finally:
        await client.aclose()


async def test_none_creates_nothing_and_surfaces_unknown_topic(redis_server: ProcessServer) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        async with broker.connect(f"{redis_server.url}?provision=none&poll_interval=0.1") as backend:
            with pytest.raises(UnknownTopic):
                await (
                    backend.publisher()
                    .topic("pn-orders")
                    .batch_publish(OutboundMessage(b"a"), OutboundMessage(b"b"))
                )
            with pytest.raises(UnknownTopic):
                async with backend.messages("pn-orders", "app") as consumer:
                    await consumer.next_message(timeout=5)
            assert await client.exists("pn-orders") == 0
    finally:
        await client.aclose()
