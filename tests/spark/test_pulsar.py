"""The broker data source on Pulsar (pulsar-lite): packed message ids as offsets, restarts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import broker
from tests.spark.support import QUERY_TIMEOUT, collect, produce, unique

pytest.importorskip("pulsar", reason="the pulsar extra (pulsar-client) is not installed")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pulsar_url() -> Iterator[str]:
    from broker.backends.pulsar.registration import factory

    with factory.dev_server() as server:
        yield server.url


def test_stream_restarts_from_the_checkpoint(spark: Any, pulsar_url: str, checkpoint: str) -> None:
    topic = unique("pulsar-in")
    produce(broker.connect(pulsar_url), topic, [(f"k{i}", f"p{i}".encode()) for i in range(30)], partitions=0)
    rows: list[dict[str, Any]] = []

    def run() -> None:
        query = (
            spark.readStream.format("broker")
            .option("url", pulsar_url)
            .option("topic", topic)
            .load()
            .writeStream.foreachBatch(collect(rows))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(QUERY_TIMEOUT)
        assert query.exception() is None

    run()
    assert [bytes(r["value"]) for r in rows] == [f"p{i}".encode() for i in range(30)]
    more = [(f"k{i}", f"p{i}".encode()) for i in range(30, 40)]
    produce(broker.connect(pulsar_url), topic, more, partitions=0)
    run()
    assert [bytes(r["value"]) for r in rows] == [f"p{i}".encode() for i in range(40)]
    offsets = [r["offset"] for r in rows]
    assert offsets == sorted(offsets) and len(set(offsets)) == 40
    assert spark.read.format("broker").option("url", pulsar_url).option("topic", topic).load().count() == 40
