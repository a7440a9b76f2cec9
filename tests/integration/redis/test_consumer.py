"""The Redis consumer's read-ahead and ack batching: fewer round trips, nothing lost.

Round trips are counted with the server's ``INFO commandstats`` (counts, not clocks)."""

from __future__ import annotations

import asyncio

import redis.asyncio as raw_redis

import broker
from broker import OutboundMessage
from broker.backends.redis.backend import RedisBackend
from broker.driver.devserver import ProcessServer
from broker.errors import AckError


async def _calls(client: raw_redis.Redis, command: str) -> int:
    stats = await client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_read_ahead_entries_left_on_close_go_to_another_consumer_at_once(
    backend: RedisBackend, redis_server: ProcessServer
) -> None:
    """One ``XREADGROUP`` reads ``prefetch`` entries; what a closing consumer read but did not hand
    out is claimable at once by another consumer of the group, long before the ack deadline."""
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        sent = [OutboundMessage(str(i).encode()) for i in range(20)]
        async with backend.messages("ahead", "app", prefetch=10, ack_deadline=60) as first:
            await backend.publisher().topic("ahead").batch_publish(*sent)
            reads = await _calls(client, "xreadgroup")
            taken = [await first.next_message(timeout=10) for _ in range(3)]
            assert await _calls(client, "xreadgroup") - reads == 1  # one read brought all three
            summary = await client.xpending("ahead", "app")
            assert summary["pending"] == 10  # read ahead: pending in the group
            await broker.ack_all(taken)
        got = []
        async with backend.messages("ahead", "app", ack_deadline=60) as second:
            while len(got) < 17:
                message = await second.next_message(timeout=5)  # far below the 60 s deadline
                got.append(message)
                await message.ack()
        datas = sorted(int(m.data) for m in taken + got)
        assert datas == list(range(20))  # nothing lost, nothing twice
        assert (await client.xpending("ahead", "app"))["pending"] == 0
    finally:
        await client.aclose()


async def test_acks_made_close_together_share_one_xack_and_each_sees_its_error(
    backend: RedisBackend, redis_server: ProcessServer
) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        async with backend.messages("acks", "app", prefetch=50) as consumer:
            await backend.publisher().topic("acks").batch_publish(*(OutboundMessage(b"m") for _ in range(40)))
            messages = [await consumer.next_message(timeout=10) for _ in range(40)]
            before = await _calls(client, "xack")
            await asyncio.gather(*(m.ack() for m in messages))
            xacks = await _calls(client, "xack") - before
            assert xacks <= 2, f"40 concurrent acks took {xacks} XACKs"
            assert (await client.xpending("acks", "app"))["pending"] == 0
            publish = backend.publisher().topic("acks").batch_publish
            await publish(OutboundMessage(b"a"), OutboundMessage(b"b"))
            doomed = [await consumer.next_message(timeout=10) for _ in range(2)]
            await client.delete("acks")
            await client.set("acks", "not a stream any more")  # every XACK now fails: WRONGTYPE
            results = await asyncio.gather(*(m.ack() for m in doomed), return_exceptions=True)
            assert [type(r) for r in results] == [AckError, AckError]
            assert results[0] is not results[1]  # each caller gets its own error
    finally:
        await client.aclose()
