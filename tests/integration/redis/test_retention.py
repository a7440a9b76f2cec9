"""Retention on Redis: none by default; ``max_length`` / ``max_age`` trim as entries are added (opt-in);
a pending entry trimmed away is counted as lost by the consumer that finds it (``lost``)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as raw_redis

import broker
from broker import OutboundMessage
from broker.backends.redis.backend import RedisBackend
from broker.driver.devserver import ProcessServer
from broker.errors import ConfigError


async def test_max_length_and_max_age_trim_only_when_asked(redis_server: ProcessServer) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    batch = [OutboundMessage(b"m") for _ in range(300)]
    try:
        async with broker.connect(redis_server.url) as keeping:
            await keeping.publisher().topic("rt-all").batch_publish(*batch)
        async with broker.connect(f"{redis_server.url}?max_length=100") as trimming:
            await trimming.publisher().topic("rt-len").batch_publish(*batch)
        assert await client.xlen("rt-all") == 300  # no trimming by default
        assert 100 <= await client.xlen("rt-len") < 300  # whole nodes go: at least 100 stay
        for i in range(1, 201):  # entries from 1970: older than any max_age
            await client.xadd("rt-age", {"data": b"old"}, id=f"1-{i}")
        async with broker.connect(f"{redis_server.url}?max_age=3600") as aging:
            await aging.publisher().topic("rt-age").publish(OutboundMessage(b"new"))
        assert await client.xlen("rt-age") < 201
        with pytest.raises(ConfigError):
            broker.connect(f"{redis_server.url}?max_length=10&max_age=60")
        with pytest.raises(ConfigError):
            broker.connect(f"{redis_server.url}?max_length=0")
    finally:
        await client.aclose()


async def test_pending_entries_trimmed_away_are_counted_as_lost(
    backend: RedisBackend, redis_server: ProcessServer
) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        async with backend.messages("rt-lost", "app", ack_deadline=0.2, prefetch=3) as consumer:
            await (
                backend.publisher().topic("rt-lost").batch_publish(*(OutboundMessage(b"m") for _ in range(3)))
            )
            taken = [await consumer.next_message(timeout=5) for _ in range(3)]  # pending, never acked
            await client.xtrim("rt-lost", maxlen=0)  # Redis trims pending entries too
            with pytest.raises(asyncio.TimeoutError):  # the claim finds them deleted: nothing to deliver
                await consumer.next_message(timeout=1.0)
            assert (len(taken), consumer.lost) == (3, 3)
    finally:
        await client.aclose()
