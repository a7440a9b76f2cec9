"""Redis Streams: our path and raw redis-py doing the same commands, in one run, on one local redis-server.

Publish: N messages of 100 bytes, in pipelined batches, every ``XADD`` answered.
  raw   a redis-py pipeline (no ``MULTI``) of ``XADD`` per batch, executed;
  ours  ``topic.batch_publish(*batch)`` (one pipeline of ``XADD`` per batch).
Consume + ack, batched: the same N messages, read by a consumer group in batches, each batch acked.
  raw   ``XREADGROUP ... COUNT batch >`` then one ``XACK`` of the batch's ids;
  ours  ``backend.batched_messages(..., batch_size=batch).next_batch()`` + ``broker.ack_all(batch)``.
Consume + ack, one by one (the shape of ``messages()``): the same N messages again, each acked on its own.
  raw   ``XREADGROUP ... COUNT 10 >`` then ``await XACK`` of each entry in turn;
  ours  ``backend.messages(..., prefetch=10)``: ``next_message()`` + ``await message.ack()``.

Both sides use redis-py's asyncio client (with hiredis when installed) over one connection pool,
on a stream of their own (the same server, started through the backend's factory, with its
append-only file turned off: with the dev server's ``appendfsync always`` every ``XADD``, ``XACK``
and ``XREADGROUP`` waits for an fsync of a disk the team shares, and the file's rewrites stall
whichever side runs then; that wait, the same for both sides, drowns the client work being
compared). The sides run in alternating order each round, over an even number of rounds by
default, so each goes first as often as the other (on the shared machine the side that goes first
is sometimes the faster, for either side); each side's
best and median are printed (the machine is shared, so the best round is the least disturbed
one). Targets: ours / raw >= 0.95, best and median, for publish and for batched consume + ack.

Run it under the team's benchmark lock, with the project's virtualenv:

    flock /work/notes/bench.lock .venv/bin/python bench/redis.py [--messages N] [--batch N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and this file would shadow the
# ``redis`` package it measures against: take the folder off.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import redis.asyncio as raw_redis

import broker
from broker import OutboundMessage
from broker.backends.redis.backend import RedisBackend
from broker.backends.redis.registration import factory

PAYLOAD = b"x" * 100
#: Entries one read brings in the one-by-one rounds (both sides).
PREFETCH = 10


async def raw_round(host: str, port: int, count: int, batch: int) -> tuple[float, float, float]:
    """Publish, batched consume + ack and one-by-one consume + ack with raw redis-py."""
    client = raw_redis.Redis(host=host, port=port)
    try:
        stream = "raw-" + uuid.uuid4().hex[:8]
        await client.xgroup_create(stream, "batch", id="0", mkstream=True)
        await client.xgroup_create(stream, "each", id="0")
        start = time.perf_counter()
        for first in range(0, count, batch):
            pipeline = client.pipeline(transaction=False)
            for _ in range(min(batch, count - first)):
                pipeline.xadd(stream, {"data": PAYLOAD})
            await pipeline.execute()
        publish = count / (time.perf_counter() - start)
        assert await client.xlen(stream) == count

        received = 0
        start = time.perf_counter()
        while received < count:
            reply = await client.xreadgroup("batch", "c", {stream: ">"}, count=batch, block=1000)
            entries = [(entry_id, fields) for _, got in reply for entry_id, fields in got]
            await client.xack(stream, "batch", *(entry_id for entry_id, _ in entries))
            received += len(entries)
        batched = count / (time.perf_counter() - start)

        received = 0
        start = time.perf_counter()
        while received < count:
            reply = await client.xreadgroup("each", "c", {stream: ">"}, count=PREFETCH, block=1000)
            for _, got in reply:
                for entry_id, _fields in got:
                    await client.xack(stream, "each", entry_id)
                    received += 1
        each = count / (time.perf_counter() - start)
        await client.delete(stream)
        return publish, batched, each
    finally:
        await client.aclose()


async def ours_round(url: str, count: int, batch: int) -> tuple[float, float, float]:
    """The same three phases through the backend."""
    backend = broker.connect(url)
    assert isinstance(backend, RedisBackend)
    async with backend:
        stream = "ours-" + uuid.uuid4().hex[:8]
        client = backend.connection.client()
        await client.xgroup_create(stream, "batch", id="0", mkstream=True)
        await client.xgroup_create(stream, "each", id="0")
        topic = backend.publisher().topic(stream)
        messages = [OutboundMessage(PAYLOAD) for _ in range(count)]
        start = time.perf_counter()
        for first in range(0, count, batch):
            await topic.batch_publish(*messages[first : first + batch])
        publish = count / (time.perf_counter() - start)
        assert await client.xlen(stream) == count

        received = 0
        async with backend.batched_messages(stream, "batch", batch_size=batch) as consumer:
            start = time.perf_counter()
            while received < count:
                got = await consumer.next_batch(timeout=5)
                await broker.ack_all(got)
                received += len(got)
            batched = count / (time.perf_counter() - start)

        received = 0
        async with backend.messages(stream, "each", prefetch=PREFETCH) as each_consumer:
            start = time.perf_counter()
            while received < count:
                message = await each_consumer.next_message(timeout=5)
                await message.ack()
                received += 1
            each = count / (time.perf_counter() - start)
        await client.delete(stream)
        return publish, batched, each


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    names = ("publish", "consume+ack batched", "consume+ack one by one")
    raw: list[list[float]] = [[], [], []]
    ours: list[list[float]] = [[], [], []]
    with factory.dev_server() as server:
        admin = raw_redis.Redis(host=server.host, port=server.port)
        await admin.config_set("appendonly", "no")  # see the module: the disk would dominate
        await admin.aclose()
        print(f"redis-server at {server.url}; {args.messages:,} messages of {len(PAYLOAD)} bytes", end="")
        print(f", batch {args.batch}")
        host, port = server.host, server.port
        for round_ in range(1, args.rounds + 1):
            order = ["raw", "ours"] if round_ % 2 else ["ours", "raw"]  # no side always goes first
            results: dict[str, tuple[float, float, float]] = {}
            for side in order:
                if side == "raw":
                    results[side] = await raw_round(host, port, args.messages, args.batch)
                else:
                    results[side] = await ours_round(server.url, args.messages, args.batch)
            for i in range(3):
                raw[i].append(results["raw"][i])
                ours[i].append(results["ours"][i])
            print(
                f"round {round_}: "
                + " | ".join(
                    f"{name} raw {results['raw'][i]:8,.0f}/s ours {results['ours'][i]:8,.0f}/s"
                    for i, name in enumerate(names)
                )
            )

    def cell(rates: list[float]) -> str:
        return f"{max(rates):>9,.0f} ({statistics.median(rates):>8,.0f})"

    print()
    print(f"{'msgs/s, best (median)':26}{'raw redis-py':>20}{'ours':>20}{'best':>7}{'median':>8}")
    met = True
    for i, name in enumerate(names):
        best = max(ours[i]) / max(raw[i])
        median = statistics.median(ours[i]) / statistics.median(raw[i])
        if i < 2:
            met = met and best >= 0.95 and median >= 0.95
        print(f"{name:26}{cell(raw[i]):>20}{cell(ours[i]):>20}{best:7.2f}{median:8.2f}")
    print(
        "targets (ours / raw >= 0.95 best and median: publish, consume+ack batched):",
        "met" if met else "NOT met",
    )


if __name__ == "__main__":
    asyncio.run(main())
