"""The acknowledging source (journal, ack on commit), run on a JetStream durable consumer (mode=ack)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import broker
from broker.driver.devserver import ProcessServer
from tests.spark.support import QUERY_TIMEOUT, collect, produce, unique

pytestmark = pytest.mark.timeout(180)


async def _pending(url: str, subject: str, consumer: str) -> tuple[int, int]:
    """``(not delivered, delivered and not acknowledged)`` of the consumer.

    Acknowledgements are sent asynchronously, so this waits a little for the count to reach zero.
    """
    backend: Any = broker.connect(url)
    async with backend:
        stream = await backend.provisioner.stream_for(subject)
        for _ in range(50):
            info = await backend.connection.jsm.consumer_info(stream, consumer)
            if info.num_ack_pending == 0:
                break
            await asyncio.sleep(0.1)
        return info.num_pending, info.num_ack_pending


def test_every_message_is_read_once_and_acknowledged_when_committed(
    spark: Any, nats: ProcessServer, tmp_path: Path
) -> None:
    subject = unique("queue").replace("-", "_")
    checkpoint = str(tmp_path / "checkpoint")
    produce(broker.connect(nats.url), subject, [("k", f"q{i}".encode()) for i in range(45)], partitions=0)
    rows: list[dict[str, Any]] = []

    def run() -> None:
        query = (
            spark.readStream.format("broker")
            .option("url", nats.url)
            .option("topic", subject)
            .option("mode", "ack")
            .option("subscription", "spark")
            .option("journal", str(tmp_path / "journal"))
            .option("maxRecordsPerTrigger", 20)
            .load()
            .writeStream.foreachBatch(collect(rows))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(QUERY_TIMEOUT)
        assert query.exception() is None

    run()
    assert sorted(bytes(r["value"]) for r in rows) == sorted(f"q{i}".encode() for i in range(45))
    assert len({r["id"] for r in rows}) == 45  # the broker's message ids, for de-duplication
    assert [r["offset"] for r in rows] == list(range(45))  # journal sequence numbers
    assert asyncio.run(_pending(nats.url, subject, "spark")) == (0, 0)  # nothing left unacknowledged
    produce(broker.connect(nats.url), subject, [("k", f"q{i}".encode()) for i in range(45, 50)], partitions=0)
    run()
    assert sorted(bytes(r["value"]) for r in rows) == sorted(f"q{i}".encode() for i in range(50))
    assert asyncio.run(_pending(nats.url, subject, "spark")) == (0, 0)
    assert list((tmp_path / "journal").glob("*.arrow")) == []  # committed batches leave no journal
