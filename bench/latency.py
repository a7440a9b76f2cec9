"""Kafka send -> receive latency at a steady rate: the textbook loop, ours against raw confluent-kafka.

One producer thread (raw confluent-kafka, ``linger.ms=0``) writes ``--rate`` records per second for
``--seconds`` seconds, each carrying its send time; the consumer under test reads them as they come
and the latency of a record is its receive time minus its send time. Both consumers run with their
library's defaults on the same local Tansu broker:

raw
    ``Consumer`` with librdkafka's defaults (auto-commit every 5 s) and the loop of the
    confluent-kafka examples: ``msg = consumer.poll(1.0)``, read key, value and headers.
ours
    ``backend.records(topic, group)`` with the connection's defaults and the textbook loop:
    ``async for record in records: ...; await record.ack()`` (an ack queues its commit, see
    ``broker.backends.kafka.records``).

The clock starts once the consumer has its partition (the group join is not measured). Each side
runs ``--rounds`` (3) times, alternating which goes first; p50 and p99 of every round are printed,
then the median round of each side and the ratios ours/raw. Goals (issue: speed): p50 and p99
within 1.2x of raw, and ours keeps up with the rate (it received everything within a second of the
last send).

Usage: python bench/latency.py [--rate N] [--seconds S] [--rounds N] [--url kafka://...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import threading
import time
import uuid

import broker
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.registration import factory

STAMP = struct.Struct("!d")


def produce_steadily(servers: str, topic: str, rate: int, seconds: float) -> None:
    """Send ``rate`` records per second for ``seconds``, each valued with its send time."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, STAMP.pack(time.time()), key=b"k", headers=[("h", b"v")])
        producer.poll(0)
    producer.flush()


def percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def raw_side(servers: str, topic: str, rate: int, seconds: float) -> list[float]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": f"raw-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(0.1)
    sender = threading.Thread(target=produce_steadily, args=(servers, topic, rate, seconds))
    sender.start()
    latencies: list[float] = []
    total = int(rate * seconds)
    try:
        while len(latencies) < total:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            message.key(), message.headers()
            latencies.append(time.time() - STAMP.unpack(message.value())[0])
    finally:
        sender.join()
        consumer.close()
    return latencies


async def ours_side(
    backend: KafkaBackend, servers: str, topic: str, rate: int, seconds: float
) -> list[float]:
    latencies: list[float] = []
    total = int(rate * seconds)
    async with backend.records(topic, f"ours-{uuid.uuid4().hex}") as records:
        while not records.assignment():
            try:
                await records.next_record(timeout=0.1)
            except broker.errors.Timeout:
                pass
        sender = threading.Thread(target=produce_steadily, args=(servers, topic, rate, seconds))
        sender.start()
        try:
            async for record in records:
                record.key, record.attributes  # noqa: B018 - read as the raw side does
                latencies.append(time.time() - STAMP.unpack(record.value or b"")[0])
                await record.ack()
                if len(latencies) >= total:
                    break
        finally:
            await asyncio.to_thread(sender.join)
    return latencies


async def run(url: str, args: argparse.Namespace) -> None:
    backend = broker.connect(url)
    assert isinstance(backend, KafkaBackend)
    servers = backend.settings.servers
    results: dict[str, list[tuple[float, float]]] = {"raw": [], "ours": []}
    async with backend:
        for round_ in range(args.rounds):
            order = ("raw", "ours") if round_ % 2 == 0 else ("ours", "raw")
            for side in order:
                topic = f"latency-{uuid.uuid4().hex}"
                await backend.admin.create_topic(topic, 1)
                if side == "raw":
                    latencies = await asyncio.to_thread(raw_side, servers, topic, args.rate, args.seconds)
                else:
                    latencies = await ours_side(backend, servers, topic, args.rate, args.seconds)
                p50, p99 = percentiles(latencies)
                results[side].append((p50, p99))
                print(
                    f"round {round_ + 1} {side:<4}: {len(latencies):,} records at {args.rate:,}/s, "
                    f"send->receive p50 {p50 * 1000:7.1f} ms, p99 {p99 * 1000:7.1f} ms",
                    flush=True,
                )
    print()
    medians = {
        side: tuple(statistics.median(r[i] for r in rounds) for i in (0, 1))
        for side, rounds in results.items()
    }
    for side, (p50, p99) in medians.items():
        print(f"{side:<4} (median round): p50 {p50 * 1000:7.1f} ms, p99 {p99 * 1000:7.1f} ms")
    raw50, raw99 = medians["raw"]
    ours50, ours99 = medians["ours"]
    print(f"ratio ours/raw: p50 {ours50 / raw50:.2f}, p99 {ours99 / raw99:.2f} (goal <= 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=int, default=2000, help="records per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=None, help="an existing broker (default: start a local Tansu)")
    args = parser.parse_args()
    if args.url:
        asyncio.run(run(args.url, args))
    else:
        with factory.dev_server() as server:
            print(f"Tansu at {server.url}")
            asyncio.run(run(server.url, args))


if __name__ == "__main__":
    main()
