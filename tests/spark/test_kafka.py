"""The broker data source on Kafka (Tansu): batch and streaming reads and writes, restarts."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from broker.driver.devserver import ProcessServer
from tests.spark.support import (
    QUERY_TIMEOUT,
    collect,
    kafka_backend,
    kafka_options,
    produce,
    read_kafka,
    unique,
)

pytestmark = pytest.mark.timeout(180)


def _items(first: int, count: int) -> list[tuple[str, bytes]]:
    return [(f"k{i % 7}", f"v{i}".encode()) for i in range(first, first + count)]


def test_batch_read_returns_every_record_with_its_position(spark: Any, tansu: ProcessServer) -> None:
    topic = unique("read")
    produce(kafka_backend(tansu.url), topic, _items(0, 200), partitions=3)
    frame = spark.read.format("broker").options(**kafka_options(tansu.url)).option("topic", topic).load()
    rows = frame.collect()
    assert len(rows) == 200
    assert sorted(bytes(r["value"]) for r in rows) == sorted(f"v{i}".encode() for i in range(200))
    assert sorted(bytes(r["key"]) for r in rows) == sorted(k.encode() for k, _ in _items(0, 200))  # binary
    per_partition = collections.defaultdict(list)
    for r in rows:
        assert r["topic"] == topic and r["timestamp"] is not None and r["id"] is None
        per_partition[r["partition"]].append(r["offset"])
    assert sorted(per_partition) == [0, 1, 2]
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))  # every offset once, in order
    ranged = (
        spark.read.format("broker")
        .options(**kafka_options(tansu.url))
        .option("topic", topic)
        .option("startingOffsets", f'{{"{topic}": {{"0": 2, "1": -1, "2": -2}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"0": 5, "1": -1, "2": -1}}}}')
        .load()
    )
    counts = collections.Counter(r["partition"] for r in ranged.collect())
    assert counts[0] == 3 and counts[1] == 0 and counts[2] == len(per_partition[2])


def test_stream_restarts_from_the_checkpoint_with_exactly_the_new_rows(
    spark: Any, tansu: ProcessServer, checkpoint: str
) -> None:
    topic = unique("stream")
    backend_url = tansu.url
    produce(kafka_backend(backend_url), topic, _items(0, 120), partitions=2)
    rows: list[dict[str, Any]] = []

    def run() -> None:
        query = (
            spark.readStream.format("broker")
            .options(**kafka_options(backend_url))
            .option("topic", topic)
            .option("maxRecordsPerTrigger", 50)
            .load()
            .writeStream.foreachBatch(collect(rows))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(QUERY_TIMEOUT), "the query did not finish"
        assert query.exception() is None

    run()
    assert sorted(bytes(r["value"]) for r in rows) == sorted(f"v{i}".encode() for i in range(120))
    produce(kafka_backend(backend_url), topic, _items(120, 30), partitions=2)
    run()
    values = [bytes(r["value"]) for r in rows]
    assert len(values) == 150 and len(set(values)) == 150  # no loss, no duplicates across the restart
    run()  # nothing new: nothing read
    assert len(rows) == 150


def test_stream_write_publishes_every_row_with_a_message_id(
    spark: Any, tansu: ProcessServer, checkpoint: str
) -> None:
    source, target = unique("upper-in"), unique("upper-out")
    produce(kafka_backend(tansu.url), source, _items(0, 80), partitions=2)
    produce(kafka_backend(tansu.url), target, [], partitions=2)
    query = (
        spark.readStream.format("broker")
        .options(**kafka_options(tansu.url))
        .option("topic", source)
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value", "map('source', topic) as attributes")
        .writeStream.format("broker")
        .options(**kafka_options(tansu.url))
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT)
    records = read_kafka(tansu.url, target)
    assert sorted(r.value for r in records) == sorted(f"V{i}".encode() for i in range(80))  # type: ignore[type-var]
    assert sorted(r.key or "" for r in records) == sorted(k for k, _ in _items(0, 80))  # binary keys, written
    ids = [r.attributes["polybroker-msg-id"] for r in records]
    assert len(set(ids)) == 80
    assert all(r.attributes["source"] == source for r in records)
    assert all(i.startswith(str(query.id)) for i in ids)


def test_batch_write_routes_rows_by_their_topic_column(spark: Any, tansu: ProcessServer) -> None:
    first, second = unique("route-a"), unique("route-b")
    for topic in (first, second):
        produce(kafka_backend(tansu.url), topic, [], partitions=1)
    frame = spark.createDataFrame(
        [(first, "a", b"1"), (second, "b", b"2"), (first, None, b"3")],
        "topic string, key string, value binary",
    )
    frame.write.format("broker").options(**kafka_options(tansu.url)).mode("append").save()
    assert sorted(r.value for r in read_kafka(tansu.url, first)) == [b"1", b"3"]  # type: ignore[type-var]
    [only] = read_kafka(tansu.url, second)
    assert only.key == "b" and only.value == b"2"
