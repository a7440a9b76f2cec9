"""Pub/Sub (Google's emulator) through Spark: the sink's id attribute and the acknowledging source."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import broker
from tests.spark.support import QUERY_TIMEOUT, collect, unique

pytest.importorskip("google.cloud.pubsub_v1", reason="the pubsub extra is not installed")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pubsub_url() -> Iterator[str]:
    from broker.backends.pubsub.registration import factory

    with factory.dev_server() as server:
        yield server.url


async def _subscribe(url: str, topic: str, subscription: str) -> None:
    backend: Any = broker.connect(url)
    async with backend:
        await backend.ensure_subscription(topic, subscription)


def test_written_rows_are_read_back_by_the_acknowledging_source(
    spark: Any, pubsub_url: str, tmp_path: Path
) -> None:
    topic, subscription = unique("ps-topic"), unique("ps-sub")
    asyncio.run(_subscribe(pubsub_url, topic, subscription))  # Pub/Sub keeps messages for subscriptions only
    frame = spark.createDataFrame([(f"row {i}",) for i in range(25)], "value string")
    frame.write.format("broker").option("url", pubsub_url).option("topic", topic).mode("append").save()
    rows: list[dict[str, Any]] = []
    query = (
        spark.readStream.format("broker")
        .option("url", pubsub_url)
        .option("topic", topic)
        .option("subscription", subscription)
        .option("journal", str(tmp_path / "journal"))
        .load()
        .writeStream.foreachBatch(collect(rows))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert query.exception() is None
    assert sorted(bytes(r["value"]) for r in rows) == sorted(f"row {i}".encode() for i in range(25))
    ids = {bytes(r["attributes"]["polybroker-msg-id"]).decode() for r in rows}  # the sink's deterministic ids
    assert len(ids) == 25
    assert len({r["id"] for r in rows}) == 25  # Pub/Sub's own message ids
