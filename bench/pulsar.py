"""Pulsar backend throughput: our path and the raw pulsar-client side by side, on the same broker.

50,000 messages of 100 bytes, producer batching on for both (1000 messages per batch, 1000 in
flight at most), receiver queue 1000 for both.

publish   raw: ``Producer.send_async`` for every message, then wait for every callback.
          ours: one ``Topic.batch_publish`` of all the messages.
consume   batched: raw ``batch_receive()`` (policy: up to 1000 messages) + ``data()`` +
+ ack       ``acknowledge()`` of each - the client's fastest path - against ours
            ``batched_messages(batch_size=1000)`` + ``broker.ack_all``: the ratio that counts.
          per message: raw ``receive()`` + ``data()`` + ``acknowledge()`` (the textbook loop)
            against ours ``next_message()`` + ``ack()``.

Each side publishes to its own topic through a subscription made beforehand; consumers are opened
after publishing, so each consume phase reads a 50,000-message backlog. The four sides run in a
different order each round; each figure is the best of ``--rounds`` runs (the machine is shared),
with the ratio of the medians beside it. The OutboundMessages (ours) and the payload
(raw) are built before the clock starts. Starts its own pulsar-lite unless ``--url`` is given.

Usage: python bench/pulsar.py [--messages N] [--rounds N] [--url pulsar://host:6650]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and this file would shadow the
# ``pulsar`` package it measures.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import pulsar  # type: ignore[import-untyped]

import broker
from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from broker.backends.pulsar.registration import factory

PAYLOAD = b"x" * 100
OPTIONS = "batching=true&batching_max_messages=1000&max_pending_messages=1000&receiver_queue_size=1000"


def raw_publish(client: Any, topic: str, count: int) -> float:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        max_pending_messages=1000,
        block_if_queue_full=True,
    )
    done = threading.Event()
    acked = 0
    failed: list[Any] = []

    def callback(result: Any, message_id: Any) -> None:
        nonlocal acked
        if result != pulsar.Result.Ok:
            failed.append(result)
        acked += 1
        if acked == count:
            done.set()

    start = time.perf_counter()
    for _ in range(count):
        producer.send_async(PAYLOAD, callback)
    producer.flush()
    done.wait()
    elapsed = time.perf_counter() - start
    producer.close()
    assert not failed, failed[:3]
    return count / elapsed


def raw_consume(client: Any, topic: str, subscription: str, count: int, batched: bool) -> float:
    consumer = client.subscribe(
        topic,
        subscription,
        consumer_type=pulsar.ConsumerType.Shared,
        receiver_queue_size=1000,
        batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(1000, -1, 100),
    )
    size = 0
    if batched:
        received = 0
        start = time.perf_counter()
        while received < count:
            for message in consumer.batch_receive():
                size += len(message.data())
                consumer.acknowledge(message)
                received += 1
    else:
        start = time.perf_counter()
        for _ in range(count):
            message = consumer.receive()
            size += len(message.data())
            consumer.acknowledge(message)
    elapsed = time.perf_counter() - start
    consumer.close()
    assert size == count * len(PAYLOAD)
    return count / elapsed


def run_raw(url: str, count: int, batched: bool) -> tuple[float, float]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        topic = f"bench-raw-{uuid.uuid4().hex}"
        client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared).close()
        published = raw_publish(client, topic, count)
        consumed = raw_consume(client, topic, "bench", count, batched)
        return published, consumed
    finally:
        client.close()


async def run_ours(url: str, count: int, batched: bool) -> tuple[float, float]:
    async with broker.connect(f"{url}?{OPTIONS}") as backend:
        assert isinstance(backend, PulsarBackend)
        topic = f"bench-ours-{uuid.uuid4().hex}"
        await backend.create_subscription(topic, "bench")
        messages = [OutboundMessage(PAYLOAD) for _ in range(count)]
        handle = backend.publisher().topic(topic)
        await handle.publish(OutboundMessage(b"warm-up"))  # the producer is made outside the clock
        start = time.perf_counter()
        await handle.batch_publish(*messages)
        published = count / (time.perf_counter() - start)
        size = 0
        total = count + 1  # with the warm-up message
        if batched:
            async with backend.batched_messages(topic, "bench", batch_size=1000) as batches:
                start = time.perf_counter()
                received = 0
                while received < total:
                    batch = await batches.next_batch()
                    await broker.ack_all(batch)
                    received += len(batch)
                    size += sum(len(m.data) for m in batch)
                consumed = count / (time.perf_counter() - start)
        else:
            async with backend.messages(topic, "bench") as consumer:
                start = time.perf_counter()
                for _ in range(total):
                    message = await consumer.next_message()
                    size += len(message.data)
                    await message.ack()
                consumed = count / (time.perf_counter() - start)
        assert size == count * len(PAYLOAD) + len(b"warm-up")
        return published, consumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", help="a running Pulsar (default: start pulsar-lite)")
    args = parser.parse_args()
    server = None if args.url else factory.dev_server().start()
    url = args.url or server.url  # type: ignore[union-attr]
    try:
        count, rounds = args.messages, args.rounds
        runs: dict[str, list[tuple[float, float]]] = {"raw": [], "raw-one": [], "ours": [], "ours-one": []}
        for round_ in range(rounds):
            sides = list(runs)
            shift = round_ % len(sides)
            for side in sides[shift:] + sides[:shift]:  # no side always goes first
                batched = not side.endswith("-one")
                if side.startswith("raw"):
                    runs[side].append(run_raw(url, count, batched))
                else:
                    runs[side].append(asyncio.run(run_ours(url, count, batched=batched)))

        def figures(side: str, phase: int) -> tuple[float, float]:
            values = [r[phase] for r in runs[side]]
            return max(values), statistics.median(values)

        print(f"pulsar: {count:,} messages of {len(PAYLOAD)} bytes, best of {rounds} ({url})")
        print(f"{'':26}{'raw msgs/s':>14}{'ours msgs/s':>14}{'ours/raw':>10}{'median ratio':>14}")
        publish = [r for side in ("raw", "raw-one") for r in runs[side]]
        our_publish = [r for side in ("ours", "ours-one") for r in runs[side]]
        rows = [
            (
                "publish",
                (max(r[0] for r in publish), statistics.median(r[0] for r in publish)),
                (max(r[0] for r in our_publish), statistics.median(r[0] for r in our_publish)),
            ),
            ("consume+ack (batched)", figures("raw", 1), figures("ours", 1)),
            ("consume+ack (per message)", figures("raw-one", 1), figures("ours-one", 1)),
        ]
        for name, (raw_best, raw_median), (our_best, our_median) in rows:
            print(
                f"{name:26}{raw_best:>14,.0f}{our_best:>14,.0f}{our_best / raw_best:>10.2f}"
                f"{our_median / raw_median:>14.2f}"
            )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
