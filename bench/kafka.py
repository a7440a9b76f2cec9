"""Kafka: our path against raw confluent-kafka, side by side on one local Tansu broker.

Both sides use the same librdkafka configuration (the backend's own, built from
``KafkaSettings``) and the same records: ``--messages`` (200,000) values of ``--size`` (100) bytes.

produce
    raw:  ``Producer.produce(topic, value, callback=on_delivery)`` per record, ``poll(0)`` as the
          confluent-kafka examples do, ``flush()`` at the end; every delivery report counted.
    ours: ``Topic.batch_publish(*chunk)`` for chunks of ``--chunk`` records, all chunks in flight
          at once; each call returns once every report of its chunk is in.
consume + commit (a fresh consumer group reading a topic that holds the records)
    raw:  ``consume(batch)``, read every key, value and headers, then a synchronous ``commit()``
          of the batch's end offsets.
    ours: ``batched_records(...).next_batch()``, read every key, value and attributes, then
          ``broker.commit_highest_offsets(batch)`` and ``commit()``, which waits for the broker
          (``ack()`` alone queues the commit without waiting).
    The clock starts at the first non-empty batch (the group join is not timed).

Each phase runs ``--rounds`` (5) times, alternating which side goes first; a side's figure is its
best round (the development machines are shared, so the best round is the least disturbed one),
and the ratio of the medians is printed beside. The ratios ours/raw are printed last; the targets
are at least 0.90 for both (0.95 for consume + commit).

Usage: python bench/kafka.py [--messages N] [--size B] [--batch N] [--rounds N] [--url kafka://...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import broker
from backends.kafka.backend import KafkaBackend
from backends.kafka.rdkafka_config import consumer_config, producer_config
from backends.kafka.registration import factory
from backends.kafka.settings import KafkaSettings
from broker import OutboundMessage

# Group joins on Tansu take about session.timeout/2: keep them short for both sides.
CONSUMER_QUERY = "session_timeout=2&heartbeat_interval=0.3"


def raw_produce(settings: KafkaSettings, topic: str, payloads: list[bytes], *, reports: bool = True) -> float:
    from confluent_kafka import Producer

    producer = Producer(producer_config(settings))
    producer.produce(topic, b"warm-up")
    producer.flush()
    delivered = 0
    failed = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered, failed
        if err is not None:
            failed += 1
        delivered += 1

    produce = producer.produce
    poll = producer.poll
    start = time.perf_counter()
    if reports:
        for payload in payloads:
            while True:
                try:
                    produce(topic, payload, callback=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            poll(0)
    else:  # fire and forget: no delivery report reaches Python (context only, not a ratio)
        for payload in payloads:
            while True:
                try:
                    produce(topic, payload)
                    break
                except BufferError:
                    poll(0.001)
    producer.flush()
    elapsed = time.perf_counter() - start
    assert not reports or (delivered == len(payloads) and failed == 0), (delivered, failed)
    return len(payloads) / elapsed


async def ours_produce(backend: KafkaBackend, topic: str, payloads: list[bytes], chunk: int) -> float:
    messages = [OutboundMessage(p) for p in payloads]
    async with backend.publisher() as publisher:
        handle = publisher.topic(topic)
        await handle.publish(OutboundMessage(b"warm-up"))
        start = time.perf_counter()
        await asyncio.gather(
            *(handle.batch_publish(*messages[i : i + chunk]) for i in range(0, len(messages), chunk))
        )
        elapsed = time.perf_counter() - start
    return len(messages) / elapsed


def raw_consume(settings: KafkaSettings, topic: str, count: int, batch: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    options = settings.consumer_options(batch_size=batch)
    consumer = Consumer(consumer_config(settings, options, f"raw-{uuid.uuid4().hex}"))
    consumer.subscribe([topic])
    received = 0
    start = None
    try:
        while received < count:
            messages = consumer.consume(batch, 1.0)
            if not messages:
                continue
            if start is None:
                start = time.perf_counter()
            ends: dict[tuple[str, int], int] = {}
            for message in messages:
                if message.error() is not None:
                    continue
                message.key(), message.value(), message.headers()
                ends[(message.topic(), message.partition())] = message.offset() + 1  # type: ignore[index,operator]
                received += 1
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False
            )
        assert start is not None
        return count / (time.perf_counter() - start)
    finally:
        consumer.close()


async def ours_consume(backend: KafkaBackend, topic: str, count: int, batch: int) -> float:
    received = 0
    start = None
    async with backend.batched_records(topic, f"ours-{uuid.uuid4().hex}", batch_size=batch) as batches:
        while received < count:
            records = await batches.next_batch()
            if not records:
                continue
            if start is None:
                start = time.perf_counter()
            for record in records:
                record.key, record.value, record.attributes  # noqa: B018 - as the raw side reads them
            received += len(records)
            await broker.commit_highest_offsets(records)
            await batches.commit()  # wait for the broker, as the raw side's synchronous commit
    assert start is not None
    return count / (time.perf_counter() - start)


def best(rates: list[float]) -> float:
    return max(rates)


def line(name: str, raw: list[float], ours: list[float]) -> float:
    ratio = best(ours) / best(raw)
    median_ratio = statistics.median(ours) / statistics.median(raw)
    print(
        f"{name:<18} best raw {best(raw):>9,.0f} msg/s, best ours {best(ours):>9,.0f} msg/s, "
        f"ratio {ratio:.3f} (median ratio {median_ratio:.3f})"
    )
    return ratio


async def run(url: str, args: argparse.Namespace) -> tuple[float, float]:
    backend = broker.connect(f"{url}?{CONSUMER_QUERY}")
    assert isinstance(backend, KafkaBackend)
    settings = backend.settings
    payloads = [
        uuid.uuid4().bytes * (args.size // 16) + b"x" * (args.size % 16) for _ in range(args.messages)
    ]
    produce_raw: list[float] = []
    produce_unchecked: list[float] = []
    produce_ours: list[float] = []
    consume_raw: list[float] = []
    consume_ours: list[float] = []
    async with backend:
        admin = backend.admin
        for round_ in range(args.rounds):
            raw_topic, our_topic = f"bench-raw-{uuid.uuid4().hex}", f"bench-ours-{uuid.uuid4().hex}"
            for name in (raw_topic, our_topic):
                await admin.create_topic(name, args.partitions)
            order = ("raw", "ours") if round_ % 2 == 0 else ("ours", "raw")
            for side in order:
                if side == "raw":
                    produce_raw.append(raw_produce(settings, raw_topic, payloads))
                else:
                    produce_ours.append(await ours_produce(backend, our_topic, payloads, args.chunk))
            produce_unchecked.append(
                raw_produce(settings, f"bench-ff-{uuid.uuid4().hex}", payloads, reports=False)
            )
            # Both topics now hold the same records; read each with a fresh group.
            for side in order:
                if side == "raw":
                    consume_raw.append(raw_consume(settings, raw_topic, args.messages, args.batch))
                else:
                    consume_ours.append(await ours_consume(backend, our_topic, args.messages, args.batch))
            print(
                f"round {round_ + 1}: produce raw {produce_raw[-1]:,.0f} ours {produce_ours[-1]:,.0f}; "
                f"consume+commit raw {consume_raw[-1]:,.0f} ours {consume_ours[-1]:,.0f} msg/s",
                flush=True,
            )
    print()
    unchecked = best(produce_unchecked)
    print(
        f"(context: raw fire-and-forget produce, no delivery reports in Python: best "
        f"{unchecked:,.0f} msg/s; ours/that = {best(produce_ours) / unchecked:.3f})"
    )
    produce_ratio = line("produce", produce_raw, produce_ours)
    consume_ratio = line("consume + commit", consume_raw, consume_ours)
    return produce_ratio, consume_ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--batch", type=int, default=1000, help="records per consumed batch and commit")
    parser.add_argument("--chunk", type=int, default=10_000, help="records per batch_publish call")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", default=None, help="an existing broker (default: start a local Tansu)")
    args = parser.parse_args()
    print(
        f"{args.messages:,} messages of {args.size} bytes, {args.partitions} partition(s), "
        f"consume batches of {args.batch}, {args.rounds} rounds"
    )
    if args.url:
        produce_ratio, consume_ratio = asyncio.run(run(args.url, args))
    else:
        with factory.dev_server() as server:
            print(f"Tansu at {server.url}")
            produce_ratio, consume_ratio = asyncio.run(run(server.url, args))
    print(f"\nproduce ratio ours/raw:          {produce_ratio:.3f} (target >= 0.90)")
    print(f"consume+commit ratio ours/raw:   {consume_ratio:.3f} (target >= 0.95)")


if __name__ == "__main__":
    main()
