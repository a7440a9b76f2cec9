"""A Redis stream and consumer group made by others with raw redis-py, consumed under ``provision=none``.

The other service adds entries and creates the group at the stream's start (``XGROUP CREATE
... 0``); polybroker, creating nothing, consumes the group by its own name, gets every entry the
group had not delivered yet, and its acks leave nothing pending in the group.
"""

from __future__ import annotations

import asyncio
import uuid

import redis.asyncio as raw_redis

import broker
from broker.driver.devserver import ProcessServer
from broker.errors import Timeout

PATIENCE = 10.0


async def test_a_group_made_by_raw_redis_py_is_consumed_by_its_name(redis_server: ProcessServer) -> None:
    stream, group = f"their-stream-{uuid.uuid4().hex[:8]}", "their-group"
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        for i in range(2):
            await client.xadd(stream, {"data": f"before-{i}", "attr:n": str(i)})
        await client.xgroup_create(stream, group, id="0")  # the group starts at the stream's start
        await client.xadd(stream, {"data": "after", "attr:n": "2"})
        got = []
        url = f"{redis_server.url}?provision=none&poll_interval=0.1"
        async with asyncio.timeout(4 * PATIENCE), broker.connect(url) as backend:
            async with backend.messages(stream, group) as consumer:
                for _ in range(3):
                    message = await consumer.next_message(timeout=PATIENCE)
                    got.append((message.data, message.attributes["n"]))
                    await message.ack()
                try:
                    extra = await consumer.next_message(timeout=0.3)
                except Timeout:
                    extra = None
        pending = await client.xpending(stream, group)
        groups = await client.xinfo_groups(stream)
    finally:
        await client.aclose()
    assert extra is None, f"one more entry than was added: {extra!r}"
    assert sorted(got) == [(b"after", "2"), (b"before-0", "0"), (b"before-1", "1")]
    assert pending["pending"] == 0
    assert [g["name"] for g in groups] == [group.encode()]  # nothing made beside it
