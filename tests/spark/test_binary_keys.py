"""Kafka keys and header values that are not UTF-8: read as bytes, written back byte-exact (Tansu, Spark).

Records are produced and read back with the raw confluent-kafka client, so the bytes on the wire
are what the assertions compare: through the source, the sink, and ``run_group``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from broker.driver.devserver import ProcessServer
from tests.spark.support import (
    ONE_RECORD_PER_BATCH,
    QUERY_TIMEOUT,
    kafka_backend,
    kafka_options,
    produce,
    read_kafka,
    unique,
)

pytestmark = pytest.mark.timeout(240)

RAW_KEY = b"\xff\xfek"
RAW_HEADER = b"\xff\xfeh"
#: Headers of the first record: not UTF-8, text, and a null value (which reads as empty bytes).
HEADERS: list[tuple[str, bytes | None]] = [("bin", RAW_HEADER), ("text", b"plain"), ("null", None)]
#: The same headers as the source yields them.
READ_HEADERS = {"bin": RAW_HEADER, "text": b"plain", "null": b""}


def to_bytes(text: str | None) -> bytes | None:
    """A key or header value the library read, as the bytes it stands for."""
    return None if text is None else text.encode("utf-8", "surrogateescape")


def _servers(tansu: ProcessServer) -> str:
    return tansu.url.removeprefix("kafka://")


def _produce_raw(tansu: ProcessServer, topic: str) -> None:
    """Two records written with the raw client: one with a non-UTF-8 key and headers, one plain."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": _servers(tansu), **ONE_RECORD_PER_BATCH})
    producer.produce(topic, b"v0", RAW_KEY, partition=0, headers=HEADERS)
    producer.flush(30)
    producer.produce(topic, b"v1", b"k1", partition=0)
    assert producer.flush(30) == 0


def _read_raw(tansu: ProcessServer, topic: str, count: int) -> list[Any]:
    """The first ``count`` records of partition 0 of ``topic``, as confluent-kafka messages."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": _servers(tansu), "group.id": unique("raw")})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: read it directly
    out: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out.append(message)
    finally:
        consumer.close()
    assert len(out) == count, f"read {len(out)} of {count} records of {topic}"
    return out


def _headers(message: Any, drop: str = "polybroker-msg-id") -> dict[str, bytes | None]:
    return {name: value for name, value in (message.headers() or []) if name != drop}


def _source(spark: Any, tansu: ProcessServer, topic: str) -> Any:
    return spark.read.format("broker").options(**kafka_options(tansu.url)).option("topic", topic).load()


def test_keys_and_headers_that_are_not_utf8_read_as_the_bytes_on_the_wire(
    spark: Any, tansu: ProcessServer
) -> None:
    topic = unique("bin-read")
    produce(kafka_backend(tansu.url), topic, [], partitions=1)
    _produce_raw(tansu, topic)
    first, second = sorted(_source(spark, tansu, topic).collect(), key=lambda r: r["offset"])
    assert bytes(first["key"]) == RAW_KEY
    assert {name: bytes(value) for name, value in first["attributes"].items()} == READ_HEADERS
    assert bytes(first["value"]) == b"v0"
    assert bytes(second["key"]) == b"k1" and second["attributes"] is None
    # Through the library: the same bytes (its str keeps them as surrogate escapes).
    records = sorted(read_kafka(tansu.url, topic), key=lambda r: r.offset)
    assert [to_bytes(r.key) for r in records] == [RAW_KEY, b"k1"]
    assert {name: to_bytes(value) for name, value in records[0].attributes.items()} == READ_HEADERS


def test_rows_read_from_kafka_are_written_back_byte_exact(spark: Any, tansu: ProcessServer) -> None:
    source, copy, with_tombstone = unique("bin-in"), unique("bin-copy"), unique("bin-tomb")
    for topic in (source, copy, with_tombstone):
        produce(kafka_backend(tansu.url), topic, [], partitions=1)
    _produce_raw(tansu, source)
    rows = _source(spark, tansu, source)
    # Through the publisher (no null value in the batch).
    rows.select("key", "value", "attributes").write.format("broker").options(
        **kafka_options(tansu.url)
    ).option("topic", copy).mode("append").save()
    written = {m.value(): m for m in _read_raw(tansu, copy, 2)}
    assert written[b"v0"].key() == RAW_KEY
    assert _headers(written[b"v0"]) == READ_HEADERS
    assert written[b"v1"].key() == b"k1" and _headers(written[b"v1"]) == {}
    # A batch with a tombstone goes through the Kafka log instead: the same bytes.
    rows.selectExpr(
        "key", "CASE WHEN offset = 0 THEN NULL ELSE value END AS value", "attributes"
    ).write.format("broker").options(**kafka_options(tansu.url)).option("topic", with_tombstone).mode(
        "append"
    ).save()
    by_key = {m.key(): m for m in _read_raw(tansu, with_tombstone, 2)}
    assert sorted(by_key) == sorted([RAW_KEY, b"k1"])
    assert by_key[RAW_KEY].value() is None
    assert _headers(by_key[RAW_KEY]) == READ_HEADERS
    assert by_key[b"k1"].value() == b"v1"


def test_run_group_keeps_keys_and_headers_that_are_not_utf8(
    spark: Any, tansu: ProcessServer, tmp_path: Any
) -> None:
    from broker.backends.kafka.processor import define_group, input, output, persist
    from broker.contrib.spark import run_group

    prefix = unique("bin-group") + "-"
    source, echoed = f"{prefix}in", f"{prefix}echo"
    for topic in (source, echoed):
        produce(kafka_backend(tansu.url), topic, [], partitions=1)
    _produce_raw(tansu, source)

    def echo(ctx: Any, value: bytes) -> None:  # nested: Spark pickles it by value
        ctx.set_value(value)
        ctx.emit(echoed, ctx.key, value, headers={"seen": ctx.headers.get("bin", "-")})

    graph = define_group(
        f"{prefix}g", input(source, "bytes", echo), output(echoed, "bytes"), persist("bytes")
    )
    query = run_group(
        spark,
        graph,
        options=kafka_options(tansu.url),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger={"availableNow": True},
    )
    assert query.awaitTermination(QUERY_TIMEOUT), "the query did not finish"
    assert query.exception() is None
    emitted = {m.value(): m for m in _read_raw(tansu, echoed, 2)}
    assert emitted[b"v0"].key() == RAW_KEY
    assert _headers(emitted[b"v0"])["seen"] == RAW_HEADER  # the callback's str is the same bytes again
    assert emitted[b"v1"].key() == b"k1" and _headers(emitted[b"v1"])["seen"] == b"-"
    table = {m.key(): m.value() for m in _read_raw(tansu, graph.table_topic, 2)}
    assert table == {RAW_KEY: b"v0", b"k1": b"v1"}
