"""The broker data source on NATS JetStream: stream sequences as offsets, Nats-Msg-Id on writes."""

from __future__ import annotations

from typing import Any

import pytest

import broker
from broker.driver.devserver import ProcessServer
from tests.spark.support import QUERY_TIMEOUT, collect, produce, read_jetstream, unique

pytestmark = pytest.mark.timeout(180)


def _items(first: int, count: int) -> list[tuple[str, bytes]]:
    return [(f"k{i % 3}", f"m{i}".encode()) for i in range(first, first + count)]


def test_stream_reads_a_subject_and_restarts_with_exactly_the_new_messages(
    spark: Any, nats: ProcessServer, checkpoint: str
) -> None:
    base = unique("orders").replace("-", "_")
    url = f"{nats.url}?stream={base}&subjects={base}.*"  # one stream, two subjects: sparse sequences
    subject, other = f"{base}.eu", f"{base}.us"
    produce(broker.connect(url), subject, _items(0, 40), partitions=0)
    rows: list[dict[str, Any]] = []

    def run() -> None:
        query = (
            spark.readStream.format("broker")
            .option("url", url)
            .option("topic", subject)
            .load()
            .writeStream.foreachBatch(collect(rows))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(QUERY_TIMEOUT)
        assert query.exception() is None

    run()
    assert [bytes(r["value"]) for r in rows] == [f"m{i}".encode() for i in range(40)]
    assert [r["offset"] for r in rows] == list(range(1, 41))  # stream sequences, in order
    assert {bytes(r["key"]).decode() for r in rows} == {"k0", "k1", "k2"}  # keys read as binary
    produce(broker.connect(url), other, _items(0, 5), partitions=0)
    produce(broker.connect(url), subject, _items(40, 10), partitions=0)
    produce(broker.connect(url), other, _items(5, 5), partitions=0)  # the stream ends with another subject
    run()
    assert [bytes(r["value"]) for r in rows] == [f"m{i}".encode() for i in range(50)]
    assert [r["offset"] for r in rows[40:]] == list(range(46, 56))
    batch = spark.read.format("broker").option("url", url).option("topic", subject).load()
    assert batch.count() == 50


def test_writes_carry_nats_msg_id_so_the_server_drops_replays(spark: Any, nats: ProcessServer) -> None:
    subject = unique("written").replace("-", ".")
    frame = spark.createDataFrame(
        [(f"id-{i}", f"k{i}", f"payload {i}") for i in range(30)], "id string, key string, value string"
    )
    for _ in range(2):  # the second write repeats every id: JetStream stores each message once
        frame.write.format("broker").option("url", nats.url).option("topic", subject).mode("append").save()
    stored = read_jetstream(nats.url, subject)
    assert sorted(r.value for r in stored) == sorted(f"payload {i}".encode() for i in range(30))  # type: ignore[type-var]
    assert {r.attributes["Nats-Msg-Id"] for r in stored} == {f"id-{i}" for i in range(30)}
    assert {r.key for r in stored} == {f"k{i}" for i in range(30)}
