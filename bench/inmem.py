"""In-memory backend throughput, in one process.

(a) ``batch_publish`` + batched iterator + ``ack_all``: 1,000,000 messages of 100 bytes
    (target: >= 1,000,000 msgs/s end to end);
(b) one-by-one ``publish`` + ``async for`` + ``ack``: 300,000 messages (target: >= 300,000 msgs/s).

The OutboundMessages are built before the clock starts (the same for every path); the timed
part is publish, consume and ack. A producer and a consumer task run concurrently.

Each path runs ``--rounds`` times (default 3) and prints its best and median. There is no raw SDK
for an in-process broker, so a calibration line times the same producer/consumer pair over a bare
``asyncio.Queue`` (no acks, no delivery state): it is this machine's ceiling for the loop, and the
ratio to it is comparable across machines where the absolute figures are not.

Usage: python bench/inmem.py [--messages N] [--single N] [--batch N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
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


async def calibration(count: int) -> float:
    """The same producer/consumer pair over a bare asyncio.Queue: the machine's ceiling."""
    queue: asyncio.Queue[OutboundMessage] = asyncio.Queue()
    messages = [OutboundMessage(b"x" * 100) for _ in range(count)]
    received = 0

    async def produce() -> None:
        for i, message in enumerate(messages):
            queue.put_nowait(message)
            if i % 256 == 0:
                await asyncio.sleep(0)

    async def consume() -> None:
        nonlocal received
        while received < count:
            await queue.get()
            received += 1

    start = time.perf_counter()
    await asyncio.gather(produce(), consume())
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages for (a)")
    parser.add_argument("--single", type=int, default=300_000, help="messages for (b)")
    parser.add_argument("--batch", type=int, default=1000, help="batch size for (a)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each path (best and median)")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"a": [], "b": [], "q": []}
    for _ in range(args.rounds):
        rates["a"].append(asyncio.run(batched(args.messages, args.batch)))
        rates["b"].append(asyncio.run(one_by_one(args.single)))
        rates["q"].append(asyncio.run(calibration(args.single)))

    def line(label: str, values: list[float]) -> str:
        return f"{label:<48} best {max(values):>9,.0f}  median {statistics.median(values):>9,.0f} msgs/s"

    share = statistics.median(rates["b"]) / statistics.median(rates["q"])
    print(line("calibration, bare asyncio.Queue (no acks):", rates["q"]))
    print(line("(a) batch_publish + batched iterator + ack_all:", rates["a"]) + " (target 1,000,000)")
    print(line("(b) publish + async for + ack:", rates["b"]) + f" (target 300,000; {share:.2f} of the queue)")


if __name__ == "__main__":
    main()
