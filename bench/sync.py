"""The blocking API (``broker.sync``) against the async API and raw confluent-kafka, in one run.

Servers: a local Tansu (Kafka) and a local nats-server (JetStream), started through the backends'
factories (or ``--kafka-url`` / ``--nats-url``). ``--messages`` (200,000) values of ``--size``
(100) bytes, each with a key (``k<i % 1000>``) and one attribute/header (``source=bench``).

publish (every delivery confirmed before the clock stops)
    sync:   one thread, ``topic.publish_nowait(message)`` per message, then ``publisher.flush()``.
    async:  ``topic.batch_publish(*chunk)`` for chunks of ``--chunk`` messages, all in flight.
    raw (Kafka only): confluent-kafka's blocking ``Producer`` with the backend's own librdkafka
            configuration: ``produce(..., callback=on_delivery)`` + ``poll(0)`` per record, then
            ``flush()``; every delivery report counted.
consume (a topic filled before the clock starts; a fresh subscription or group per round)
    sync:   ``for message in backend.messages(...)`` (NATS: ``ack()`` each) /
            ``for record in backend.records(...)`` (Kafka: ``commit()`` of the last, waited).
    async:  ``async for`` over the same consumers, ``await message.ack()`` each / the last
            record's ``await record.ack()``.
    Both sides use their default read-ahead, and both clocks stop inside the consumer's block (its
    close is not timed on either side).

Rounds alternate which side goes first; each side's best and median are printed, and the ratios
of the bests (and of the medians). Beside the wall clock, each round's rates by this process's CPU
time (every thread, the SDK's included) over the same window are printed, and the same ratios by
them: on a shared machine whose CPU speed drifts (a fixed pure-Python loop here takes 540-800 ms
from one second to the next) a round's wall time holds that drift, its CPU time the side's work.
Seven rounds by default, so that each side meets the machine's quiet periods more than once.
Targets: sync publish >= 0.8 of async on both brokers and
>= 0.8 of raw confluent-kafka on Kafka; sync consume >= 0.8 of async.

Usage: python bench/sync.py [--messages N] [--rounds N] [--kafka-url URL] [--nats-url URL]
                            [--only kafka|nats]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import broker
import broker.sync
from broker import OutboundMessage

ATTRIBUTES = {"source": "bench"}
RAW_HEADERS: list[tuple[str, str | bytes | None]] = [("source", b"bench")]
KAFKA_QUERY = "session_timeout=2&heartbeat_interval=0.3&fetch_max_wait=0.1"
TARGETS = {"publish sync/async": 0.8, "publish sync/raw": 0.8, "consume sync/async": 0.8}
#: The same ratios by the process's CPU time (printed beside the targets' wall-clock ones).
CPU_RATIOS: dict[str, tuple[float, float]] = {}


#: One side's round: (messages a second by the wall clock, messages a CPU-second of this process).
Rates = tuple[float, float]


class Start:
    """A round's clocks: the wall clock and this process's CPU time (every thread: the blocking
    API's loop thread and the SDK's own threads included; the servers run in processes of their own)."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def rates(self, count: int) -> Rates:
        """``count`` messages over the time since the start, by each clock."""
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return count / wall, count / max(cpu, 1e-9)


def messages(count: int, size: int) -> list[OutboundMessage]:
    payload = b"x" * size
    return [OutboundMessage(payload, f"k{i % 1000}", ATTRIBUTES) for i in range(count)]


# -- publish ---------------------------------------------------------------------------------
def sync_publish(url: str, topic: str, batch: list[OutboundMessage]) -> Rates:
    with broker.sync.connect(url, timeout=120) as backend:
        publisher = backend.publisher()
        handle = publisher.topic(topic)
        handle.publish(OutboundMessage(b"warm-up"))
        publish = handle.publish_nowait
        start = Start()
        for message in batch:
            publish(message)
        publisher.flush(timeout=300)
        return start.rates(len(batch))


async def async_publish(url: str, topic: str, batch: list[OutboundMessage], chunk: int) -> Rates:
    async with broker.connect(url) as backend:
        handle = backend.publisher().topic(topic)
        await handle.publish(OutboundMessage(b"warm-up"))
        start = Start()
        await asyncio.gather(
            *(handle.batch_publish(*batch[i : i + chunk], timeout=300) for i in range(0, len(batch), chunk))
        )
        return start.rates(len(batch))


def raw_kafka_publish(url: str, topic: str, batch: list[OutboundMessage]) -> Rates:
    from confluent_kafka import Producer

    from broker.backends.kafka.rdkafka_config import producer_config

    settings = broker.connect(url).settings  # type: ignore[attr-defined]  # no connection is made
    producer = Producer(producer_config(settings))
    producer.produce(topic, b"warm-up")
    producer.flush()
    delivered = failed = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered, failed
        delivered += 1
        failed += err is not None

    produce, poll, headers = producer.produce, producer.poll, RAW_HEADERS
    records = [(m.key, m.data) for m in batch]
    start = Start()
    for key, value in records:
        while True:
            try:
                produce(topic, value, key, headers=headers, callback=on_delivery)
                break
            except BufferError:
                poll(0.001)
        poll(0)
    producer.flush()
    rates = start.rates(len(records))
    assert delivered == len(records) and not failed, (delivered, failed)
    return rates


# -- consume ---------------------------------------------------------------------------------
def sync_consume(url: str, topic: str, count: int, records: bool) -> Rates:
    with broker.sync.connect(url, timeout=120) as backend:
        if records:
            with backend.records(topic, f"g-{uuid.uuid4().hex[:8]}") as consumer:
                first = consumer.next_record(timeout=60)  # the group join is not timed
                start = Start()
                last, seen = first, 1
                for record in consumer:
                    last = record
                    seen += 1
                    if seen == count:
                        break
                last.commit()
                consumer.commit(timeout=60)
                return start.rates(count)
        with backend.messages(topic, f"s-{uuid.uuid4().hex[:8]}") as stream:
            stream.next_message(timeout=60).ack()
            start = Start()
            seen = 1
            for message in stream:
                message.ack()
                seen += 1
                if seen == count:
                    break
            stream.flush(timeout=60)
            return start.rates(count)


async def async_consume(url: str, topic: str, count: int, records: bool) -> Rates:
    async with broker.connect(url) as backend:
        if records:
            async with backend.records(topic, f"g-{uuid.uuid4().hex[:8]}") as consumer:
                last = await consumer.next_record(timeout=60)
                start = Start()
                seen = 1
                async for record in consumer:
                    last = record
                    seen += 1
                    if seen == count:
                        break
                await last.ack()
                return start.rates(count)  # the clock stops where the sync side's does
        async with backend.messages(topic, f"s-{uuid.uuid4().hex[:8]}") as stream:
            await (await stream.next_message(timeout=60)).ack()
            start = Start()
            seen = 1
            async for message in stream:
                await message.ack()
                seen += 1
                if seen == count:
                    break
            return start.rates(count)


async def create_kafka_topic(url: str, topic: str) -> None:
    async with broker.connect(url) as backend:
        await backend.admin.create_topic(topic, 1)  # type: ignore[attr-defined]


async def fill(url: str, topic: str, batch: list[OutboundMessage], chunk: int) -> None:
    async with broker.connect(url) as backend:
        handle = backend.publisher().topic(topic)
        for i in range(0, len(batch), chunk):
            await handle.batch_publish(*batch[i : i + chunk], timeout=300)


# -- the run ---------------------------------------------------------------------------------
@contextmanager
def servers(args: argparse.Namespace) -> Iterator[dict[str, str]]:
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        if args.only in (None, "kafka"):
            if args.kafka_url:
                urls["kafka"] = args.kafka_url
            else:
                from broker.backends.kafka.registration import factory as kafka

                server = stack.enter_context(kafka.dev_server())
                urls["kafka"] = f"{server.url}?{KAFKA_QUERY}"
        if args.only in (None, "nats"):
            if args.nats_url:
                urls["nats"] = args.nats_url
            else:
                from broker.backends.jetstream.registration import factory as nats

                urls["nats"] = stack.enter_context(nats.dev_server()).url
        yield urls


def rounds(sides: dict[str, Callable[[], Rates]], count: int) -> dict[str, list[Rates]]:
    """Run every side ``count`` times, rotating which goes first; rates per side."""
    rates: dict[str, list[Rates]] = {name: [] for name in sides}
    names = list(sides)
    for round_ in range(count):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            rates[name].append(sides[name]())
        print(
            "  round",
            round_ + 1,
            " ".join(f"{n} {rates[n][-1][0]:>10,.0f}/s" for n in names),
            "  (by CPU time:",
            " ".join(f"{n} {rates[n][-1][1]:>10,.0f}/s" for n in names) + ")",
            flush=True,
        )
    return rates


def report(
    broker_name: str, phase: str, rates: dict[str, list[Rates]], ratios: dict[str, tuple[float, float]]
) -> None:
    for name, values in rates.items():
        walls = [wall for wall, _ in values]
        best, median = max(walls), statistics.median(walls)
        print(f"  {broker_name} {phase} {name:6} best {best:>10,.0f}/s median {median:>10,.0f}/s")
    sync = rates["sync"]
    for other in (n for n in rates if n != "sync"):
        theirs = rates[other]
        best = max(w for w, _ in sync) / max(w for w, _ in theirs)
        median = statistics.median(w for w, _ in sync) / statistics.median(w for w, _ in theirs)
        ratios[f"{broker_name}: {phase} sync/{other}"] = (best, median)
        cpu_best = max(c for _, c in sync) / max(c for _, c in theirs)
        cpu_median = statistics.median(c for _, c in sync) / statistics.median(c for _, c in theirs)
        CPU_RATIOS[f"{broker_name}: {phase} sync/{other}"] = (cpu_best, cpu_median)


def bench_broker(
    name: str,
    url: str,
    args: argparse.Namespace,
    batch: list[OutboundMessage],
    ratios: dict[str, tuple[float, float]],
) -> None:
    """Publish and consume rounds on one broker; the ratios go into ``ratios``."""
    kafka = name == "kafka"

    def topic() -> str:
        made = f"sync-bench-{uuid.uuid4().hex[:8]}"
        if kafka:  # one partition, made before the clock starts (as bench/kafka.py does)
            asyncio.run(create_kafka_topic(url, made))
        return made

    publish: dict[str, Callable[[], Rates]] = {
        "sync": lambda: sync_publish(url, topic(), batch),
        "async": lambda: asyncio.run(async_publish(url, topic(), batch, args.chunk)),
    }
    if kafka:
        publish["raw"] = lambda: raw_kafka_publish(url, topic(), batch)
    report(name, "publish", rounds(publish, args.rounds), ratios)

    filled = topic()
    asyncio.run(fill(url, filled, batch, args.chunk))
    consume: dict[str, Callable[[], Rates]] = {
        "sync": lambda: sync_consume(url, filled, args.messages, kafka),
        "async": lambda: asyncio.run(async_consume(url, filled, args.messages, kafka)),
    }
    report(name, "consume", rounds(consume, args.rounds), ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=10_000, help="messages per async batch_publish call")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--kafka-url", default=None)
    parser.add_argument("--nats-url", default=None)
    parser.add_argument("--only", choices=["kafka", "nats"], default=None)
    args = parser.parse_args()
    batch = messages(args.messages, args.size)
    ratios: dict[str, tuple[float, float]] = {}
    print(
        f"{args.messages:,} messages of {args.size} bytes with a key and an attribute, {args.rounds} rounds"
    )
    with servers(args) as urls:
        for name, url in urls.items():
            print(f"{name} at {url}")
            bench_broker(name, url, args, batch, ratios)
    print()
    print(f"{'ratio':<36} {'best':>6} {'median':>7}   by CPU time: best median")
    for key, (best, median) in ratios.items():
        cpu_best, cpu_median = CPU_RATIOS[key]
        target = TARGETS.get(key.split(": ", 1)[1])
        verdict = (
            f"  (target >= {target:.2f}: best {'met' if best >= target else 'NOT met'}, "
            f"median {'met' if median >= target else 'NOT met'})"
            if target
            else ""
        )
        print(f"{key:<36} {best:>6.3f} {median:>7.3f}   {cpu_best:>16.3f} {cpu_median:>6.3f}{verdict}")


if __name__ == "__main__":
    main()
