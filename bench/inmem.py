"""In-memory backend throughput, in one process.

(a) ``batch_publish`` + batched iterator + ``ack_all``: 1,000,000 messages of 100 bytes
    (target: >= 1,000,000 msgs/s end to end);
(b) one-by-one ``publish`` + ``async for`` + ``ack``: 300,000 messages (target: >= 300,000 msgs/s).

The OutboundMessages are built before the clock starts (the same for every path); the timed
part is publish, consume and ack. A producer and a consumer task run concurrently.

Usage: python bench/inmem.py [--messages N] [--batch N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import broker
from broker import OutboundMessage


async def batched(count: int, batch: int) -> float:
    backend = broker.connect(f"inmem://bench-{uuid.uuid4().hex}?batch_size={batch}")
    async with backend:
        topic = backend.publisher().topic("bench")
        consumer = backend.batched_messages("bench", "sub", batch_size=batch)
        payload = b"x" * 100
        chunks = [[OutboundMessage(payload) for _ in range(batch)] for _ in range(count // batch)]
        received = 0

        async def produce() -> None:
            for chunk in chunks:
                await topic.batch_publish(*chunk)
                await asyncio.sleep(0)

        async def consume() -> None:
            nonlocal received
            while received < count:
                messages = await consumer.next_batch()
                await broker.ack_all(messages)
                received += len(messages)

        start = time.perf_counter()
        await asyncio.gather(produce(), consume())
        elapsed = time.perf_counter() - start
        assert received == count
        return count / elapsed


async def one_by_one(count: int) -> float:
    backend = broker.connect(f"inmem://bench-{uuid.uuid4().hex}")
    async with backend:
        topic = backend.publisher().topic("bench")
        consumer = backend.messages("bench", "sub")
        payload = b"x" * 100
        messages = [OutboundMessage(payload) for _ in range(count)]
        received = 0

        async def produce() -> None:
            for i, message in enumerate(messages):
                await topic.publish(message)
                if i % 256 == 0:
                    await asyncio.sleep(0)

        async def consume() -> None:
            nonlocal received
            async for message in consumer:
                await message.ack()
                received += 1
                if received == count:
                    return

        start = time.perf_counter()
        await asyncio.gather(produce(), consume())
        elapsed = time.perf_counter() - start
        return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages for (a)")
    parser.add_argument("--single", type=int, default=300_000, help="messages for (b)")
    parser.add_argument("--batch", type=int, default=1000, help="batch size for (a)")
    args = parser.parse_args()
    rate_a = asyncio.run(batched(args.messages, args.batch))
    print(f"(a) batch_publish + batched iterator + ack_all: {rate_a:,.0f} msgs/s (target 1,000,000)")
    rate_b = asyncio.run(one_by_one(args.single))
    print(f"(b) publish + async for + ack:                  {rate_b:,.0f} msgs/s (target 300,000)")


if __name__ == "__main__":
    main()
