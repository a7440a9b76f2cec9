"""Pulsar backend throughput: our path and the raw pulsar-client side by side, on the same broker.

50,000 messages of 100 bytes, producer batching on for both (1000 messages per batch, 1000 in
flight at most), receiver queue 1000 for both.

publish   raw: ``Producer.send_async`` for every message, then wait for every callback.
          ours: one ``Topic.batch_publish`` of all the messages.
consume   raw: ``receive()`` + ``data()`` + ``acknowledge()`` in a loop (the client's textbook loop).
+ ack     ours (batched): ``batched_messages(batch_size=1000)`` + ``broker.ack_all`` - the ratio
          that counts; ours (per message): ``next_message()`` + ``ack()``, printed for reference.

Each side publishes to its own topic through a subscription made beforehand; consumers are opened
after publishing, so each consume phase reads a 50,000-message backlog. Every measurement is the
best of ``--rounds`` runs (the machine is shared). The OutboundMessages (ours) and the payload
(raw) are built before the clock starts. Starts its own pulsar-lite unless ``--url`` is given.

Usage: python bench/pulsar.py [--messages N] [--rounds N] [--url pulsar://host:6650]
"""

from __future__ import annotations

import argparse
import asyncio
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
from backends.pulsar.backend import PulsarBackend
from backends.pulsar.registration import factory
from broker import OutboundMessage

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


def raw_consume(client: Any, topic: str, subscription: str, count: int) -> float:
    consumer = client.subscribe(
        topic, subscription, consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1000
    )
    start = time.perf_counter()
    size = 0
    for _ in range(count):
        message = consumer.receive()
        size += len(message.data())
        consumer.acknowledge(message)
    elapsed = time.perf_counter() - start
    consumer.close()
    assert size == count * len(PAYLOAD)
    return count / elapsed


def run_raw(url: str, count: int) -> tuple[float, float]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        topic = f"bench-raw-{uuid.uuid4().hex}"
        client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared).close()
        published = raw_publish(client, topic, count)
        consumed = raw_consume(client, topic, "bench", count)
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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help="a running Pulsar (default: start pulsar-lite)")
    args = parser.parse_args()
    server = None if args.url else factory.dev_server().start()
    url = args.url or server.url  # type: ignore[union-attr]
    try:
        count, rounds = args.messages, args.rounds
        raw: list[tuple[float, float]] = []
        ours: list[tuple[float, float]] = []
        single: list[tuple[float, float]] = []
        for _ in range(rounds):  # interleaved, so a busy moment does not favour one side
            raw.append(run_raw(url, count))
            ours.append(asyncio.run(run_ours(url, count, batched=True)))
            single.append(asyncio.run(run_ours(url, count, batched=False)))
        raw_pub, raw_con = max(r[0] for r in raw), max(r[1] for r in raw)
        our_pub, our_con = max(r[0] for r in ours), max(r[1] for r in ours)
        one_con = max(r[1] for r in single)
        print(f"pulsar: {count:,} messages of {len(PAYLOAD)} bytes, best of {rounds} ({url})")
        print(f"{'':26}{'raw msgs/s':>14}{'ours msgs/s':>14}{'ours/raw':>10}")
        print(f"{'publish':26}{raw_pub:>14,.0f}{our_pub:>14,.0f}{our_pub / raw_pub:>10.2f}")
        print(f"{'consume+ack (batched)':26}{raw_con:>14,.0f}{our_con:>14,.0f}{our_con / raw_con:>10.2f}")
        print(f"{'consume+ack (per message)':26}{raw_con:>14,.0f}{one_con:>14,.0f}{one_con / raw_con:>10.2f}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
