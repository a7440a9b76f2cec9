"""Spark: reading Kafka through the ``broker`` data source against the raw client, on one local Tansu.

Setup: ``--messages`` (100,000) records of ``--size`` (100) bytes with keys, in a topic of
``--partitions`` (4) partitions. Each partition ends with a record produced in a batch of its own,
so Tansu's high watermark (which is off by the rest of the last batch, spark.md §4.1) is exact.

raw
    confluent-kafka ``Consumer`` with the backend's reader configuration, partitions assigned at
    offset 0, ``consume(10000)`` until every partition's end; each key and value is touched.
spark batch
    ``spark.read.format("broker")...load().write.format("noop")``: every column of every record
    crosses from the Python workers to the JVM (``noop`` forces all of them).
spark stream
    ``readStream.format("broker")`` to the ``noop`` sink, ``Trigger.AvailableNow``, one micro-batch;
    includes query start and stop (a fresh checkpoint each round; Spark starts a Python process
    for each streaming query's source, about 0.5 s of imports).
stream trigger
    the same query's micro-batch alone (``triggerExecution`` of its progress report).

The session is warmed up first (one read, not timed): the first query in a JVM pays for starting
Python workers and imports. Each figure is the best of ``--rounds`` (5). The target is at least
100,000 rows/s through Spark on 2 cores.

Usage: python bench/spark.py [--messages N] [--size B] [--partitions N] [--rounds N] [--cores N]
"""

from __future__ import annotations

import os
import sys

# Run as a script, bench/ is first on sys.path: keep its modules (bench/queue.py) from shadowing
# the standard library's.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from typing import Any  # noqa: E402

import broker  # noqa: E402
from broker.backends.kafka.backend import KafkaBackend  # noqa: E402
from broker.backends.kafka.rdkafka_config import producer_config, reader_config  # noqa: E402
from broker.backends.kafka.registration import factory  # noqa: E402


async def fill(url: str, topic: str, messages: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer

    backend = broker.connect(url)
    assert isinstance(backend, KafkaBackend)
    async with backend:
        await backend.log().create_topic(topic, partitions)
        settings = backend.settings
    bulk = Producer({**producer_config(settings), "linger.ms": 5})
    payload = b"x" * size
    for i in range(messages - partitions):
        while True:
            try:
                bulk.produce(topic, payload, key=b"key-%d" % (i % 1000), partition=i % partitions)
                break
            except BufferError:
                bulk.poll(0.01)
    bulk.flush()
    single = Producer({**producer_config(settings), "batch.num.messages": 1})
    for p in range(partitions):
        single.produce(topic, payload, key=b"last", partition=p)
    single.flush()


def raw_read(url: str, topic: str, partitions: int, messages: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    backend = broker.connect(url)
    assert isinstance(backend, KafkaBackend)
    settings = backend.settings
    config = {
        **reader_config(settings, settings.consumer_options()),
        "group.id": f"bench-{uuid.uuid4().hex}",
        "fetch.wait.max.ms": 50,
        "fetch.min.bytes": 1,
    }
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    touched = 0
    start = time.perf_counter()
    while seen < messages:
        for message in consumer.consume(min(10_000, messages - seen), 1.0):
            if message.error() is None:
                key = message.key()
                value = message.value()
                touched += len(value) + (len(key) if key else 0)
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def spark_batch(spark: Any, url: str, topic: str) -> float:
    start = time.perf_counter()
    spark.read.format("broker").option("url", url).option("topic", topic).load().write.format("noop").mode(
        "overwrite"
    ).save()
    return time.perf_counter() - start


def spark_count(spark: Any, url: str, topic: str) -> tuple[float, int]:
    start = time.perf_counter()
    rows = spark.read.format("broker").option("url", url).option("topic", topic).load().count()
    return time.perf_counter() - start, rows


def spark_stream(spark: Any, url: str, topic: str) -> tuple[float, float]:
    """Wall time of the whole query, and the micro-batches' own time (``triggerExecution``)."""
    with tempfile.TemporaryDirectory() as checkpoint:
        start = time.perf_counter()
        query = (
            spark.readStream.format("broker")
            .option("url", url)
            .option("topic", topic)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        triggers = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress) / 1000
    return elapsed, triggers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--url", default=None, help="a Kafka URL (default: a Tansu started here)")
    args = parser.parse_args()

    import broker.contrib.spark

    server = None
    url = args.url
    if url is None:
        server = factory.dev_server().start()
        url = server.url
    try:
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        asyncio.run(fill(url, topic, args.messages, args.size, args.partitions))
        started = time.perf_counter()
        spark = broker.contrib.spark.local_session("polybroker-bench", cores=args.cores)
        print(f"session start: {time.perf_counter() - started:.1f} s")
        first, rows = spark_count(spark, url, topic)
        assert rows == args.messages, f"read {rows} rows, expected {args.messages}"
        print(f"first query (Python workers start): {first:.1f} s")
        spark_stream(spark, url, topic)  # warm the streaming path too
        results: dict[str, list[float]] = {
            "raw": [],
            "spark batch": [],
            "spark count": [],
            "spark stream": [],
            "stream trigger": [],
        }
        for _ in range(args.rounds):
            results["raw"].append(raw_read(url, topic, args.partitions, args.messages))
            results["spark batch"].append(spark_batch(spark, url, topic))
            elapsed, rows = spark_count(spark, url, topic)
            assert rows == args.messages
            results["spark count"].append(elapsed)
            wall, triggers = spark_stream(spark, url, topic)
            results["spark stream"].append(wall)
            results["stream trigger"].append(triggers)
        spark.stop()
    finally:
        if server is not None:
            server.stop()
    raw_best = min(results["raw"])
    print(
        f"\n{args.messages:,} records of {args.size} bytes, {args.partitions} partitions, local[{args.cores}]"
    )
    print(f"{'path':<15} {'best s':>8} {'rows/s':>12} {'vs raw':>8}")
    for name, times in results.items():
        best = min(times)
        print(f"{name:<15} {best:>8.3f} {args.messages / best:>12,.0f} {raw_best / best:>8.2f}")
    target = args.messages / min(results["spark batch"])
    verdict = "met" if target >= 100_000 else "NOT met"
    print(f"\ntarget >= 100,000 rows/s through Spark (batch read): {verdict} ({target:,.0f})")


if __name__ == "__main__":
    main()
