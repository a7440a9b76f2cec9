"""Helpers of the Spark tests: topics with test data, reading topics back, option sets."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable
from typing import Any

import broker
from broker.log import OFFSET_BEGINNING, TopicPartition
from broker.message import OutboundMessage, Record

#: Tansu 0.6 reports the high watermark of a batched partition wrongly (spark.md §4.1): producers of
#: test data send one record per batch, so the end offsets the source plans with are the true ones.
ONE_RECORD_PER_BATCH: dict[str, Any] = {"batch.num.messages": 1}
#: Short waits for single records on Tansu.
TEST_QUERY = "fetch_max_wait=0.05"

#: Hard limit for one Spark query in a test.
QUERY_TIMEOUT = 90


def unique(prefix: str) -> str:
    """A topic name not used before."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kafka_options(url: str) -> dict[str, str]:
    """``broker`` source/sink options for Tansu: one record per produced batch."""
    config = {"url": f"{url}?{TEST_QUERY}", "producer_config": ONE_RECORD_PER_BATCH}
    return {"config": json.dumps(config)}


def kafka_backend(url: str) -> Any:
    """A Kafka backend whose producers write one record per batch."""
    return broker.connect({"url": f"{url}?{TEST_QUERY}", "producer_config": ONE_RECORD_PER_BATCH})


async def _produce(
    backend: Any, topic: str, items: Iterable[tuple[str | None, bytes]], partitions: int
) -> None:
    async with backend:
        log = getattr(backend, "log", None)
        if log is not None and partitions:
            await log().create_topic(topic, partitions)
        messages = [OutboundMessage(value, key) for key, value in items]
        await backend.publisher().topic(topic).batch_publish(*messages)


def produce(backend: Any, topic: str, items: Iterable[tuple[str | None, bytes]], partitions: int = 2) -> None:
    """Publish ``(key, value)`` items to ``topic`` (created with ``partitions`` on Kafka)."""
    asyncio.run(_produce(backend, topic, items, partitions))


async def _read_kafka(backend: Any, topic: str) -> list[Record]:
    async with backend:
        log = backend.log()
        count = await log.partitions(topic)
        tps = [TopicPartition(topic, p) for p in range(count)]
        ends = {tp: (await log.watermarks(tp))[1] for tp in tps}
        reader = log.reader()
        reader.assign({tp: OFFSET_BEGINNING for tp in tps if ends[tp] > 0})
        out: list[Record] = []
        seen = {tp: 0 for tp in tps}
        async with asyncio.timeout(30):
            while any(seen[tp] < ends[tp] for tp in tps):
                for record in await reader.poll(1000, 0.5):
                    out.append(record)
                    tp = TopicPartition(record.topic, record.partition)
                    seen[tp] = record.offset + 1
        return out


def read_kafka(url: str, topic: str) -> list[Record]:
    """Every record of ``topic`` (up to the high watermarks)."""
    return asyncio.run(_read_kafka(kafka_backend(url), topic))


async def _read_jetstream(url: str, subject: str) -> list[Record]:
    backend: Any = broker.connect(url)
    async with backend:
        replay = backend.replay(subject, batch_size=500)
        out: list[Record] = []
        while True:
            batch = await replay.next_batch(timeout=1.0)
            if not batch:
                return out
            out.extend(batch)


def read_jetstream(url: str, subject: str) -> list[Record]:
    """Every message stored for ``subject``."""
    return asyncio.run(_read_jetstream(url, subject))


def collect(rows: list[Any]) -> Any:
    """A ``foreachBatch`` function appending each micro-batch's rows (as dicts) to ``rows``."""

    def each(frame: Any, batch_id: int) -> None:
        rows.extend(r.asDict() for r in frame.collect())

    return each
