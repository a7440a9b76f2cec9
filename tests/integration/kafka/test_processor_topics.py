"""Per-table and per-stream replication, stream retention and offsets by time on Tansu (issue 34, point 3)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from broker.backends.kafka.admin import KafkaAdmin
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.processor import (
    Context,
    LogTopicManager,
    Processor,
    TopicManagerConfig,
    define_group,
    input,
    loop,
    persist,
)
from tests.integration.kafka.support import unique

pytestmark = pytest.mark.slow


def keep(ctx: Context, value: str) -> None:
    ctx.set_value(value)


async def test_replication_per_table_and_stream_reaches_the_broker(
    exact_backend: KafkaBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = exact_backend.log()
    sent: dict[str, tuple[int, int, dict[str, str] | None]] = {}
    create = KafkaAdmin.create_topic

    async def recording(self: KafkaAdmin, name: str, partitions: int = 1, *, config: Any = None) -> None:
        sent[name] = (partitions, self.replication_factor, dict(config) if config else None)
        await create(self, name, partitions, config=config)

    monkeypatch.setattr(KafkaAdmin, "create_topic", recording)
    topic, group = unique("in"), unique("tm")
    await log.create_topic(topic, 1)
    graph = define_group(group, input(topic, "str", keep), loop("str", keep), persist("str"))
    # Tansu has one broker (and ignores larger factors): 1 replica each, sent per topic kind.
    config = TopicManagerConfig(table_replication=1, stream_replication=1, stream_retention=600.0)
    async with Processor(log, graph, topic_config=config):
        pass
    assert sent[f"{group}-table"] == (1, 1, {"cleanup.policy": "compact"})
    assert sent[f"{group}-loop"] == (1, 1, {"retention.ms": "600000"})
    assert sent[topic][1] == log.admin.replication_factor  # the log's own admin is untouched
    assert await log.partitions(f"{group}-table") == 1 and await log.partitions(f"{group}-loop") == 1


async def test_offset_lookup_by_time_on_kafka(exact_backend: KafkaBackend) -> None:
    log = exact_backend.log()
    topic = unique("timed")
    await log.create_topic(topic, 1)
    manager = LogTopicManager(log)
    stamps = []
    for i in range(3):
        stamps.append(time.time())
        await log.produce(topic, str(i).encode(), partition=0)
        await asyncio.sleep(0.05)
    assert await manager.offset_for_time(topic, 0, stamps[0] - 1) == 0
    assert await manager.offset_for_time(topic, 0, stamps[1]) == 1
    assert await manager.offset_for_time(topic, 0, stamps[2]) == 2
    assert await manager.offset_for_time(topic, 0, time.time() + 3600) == 3  # none: the high watermark
