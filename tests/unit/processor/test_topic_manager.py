"""Topic management: TopicManagerConfig, a pluggable topic manager, offsets by time (issue 34, point 3)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import pytest

from broker.backends.inmem import InmemLog
from broker.backends.kafka.processor import (
    Context,
    Emitter,
    LogTopicManager,
    Processor,
    TopicManager,
    TopicManagerConfig,
    define_group,
    input,
    loop,
    output,
    persist,
)
from broker.errors import ConfigError
from broker.log import TopicPartition
from tests.unit.processor.support import (
    FlakyLog,
    as_log,
    table_log,  # noqa: F401 - the ``log`` fixture
)


class RecordingLog(FlakyLog):
    """Records every ``create_topic`` call: (name, partitions, config)."""

    def __init__(self, inner: InmemLog) -> None:
        super().__init__(inner)
        self.created: dict[str, tuple[int, dict[str, str] | None]] = {}

    async def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        self.created[name] = (partitions, dict(config) if config else None)
        await super().create_topic(name, partitions, config=config)


def relay(ctx: Context, value: str) -> None:
    ctx.set_value(value)
    ctx.emit("out", ctx.key, value)
    if value == "again":
        ctx.loopback(ctx.key, "looped")


def looped(ctx: Context, value: str) -> None:
    ctx.set_value(value)


GRAPH = define_group(
    "tm", input("in", "str", relay), loop("str", looped), output("out", "str"), persist("str")
)


async def test_tables_and_streams_get_their_settings(log: InmemLog) -> None:
    recording = RecordingLog(log)
    await log.create_topic("in", 2)
    config = TopicManagerConfig(stream_retention=3600.0, stream_config={"segment.ms": "60000"})
    async with Processor(as_log(recording), GRAPH, topic_config=config):
        pass
    assert recording.created["tm-table"] == (2, {"cleanup.policy": "compact"})
    stream = {"segment.ms": "60000", "retention.ms": "3600000"}
    assert recording.created["tm-loop"] == (2, stream)
    assert recording.created["out"] == (2, stream)  # a missing output is a stream


async def test_the_processor_takes_a_topic_manager_or_a_builder(log: InmemLog) -> None:
    await log.create_topic("in", 2)
    calls: list[tuple[str, str, int]] = []

    class Recorder(LogTopicManager):
        async def ensure_table(self, topic: str, partitions: int) -> None:
            calls.append(("table", topic, partitions))
            await super().ensure_table(topic, partitions)

        async def ensure_stream(self, topic: str, partitions: int) -> None:
            calls.append(("stream", topic, partitions))
            await super().ensure_stream(topic, partitions)

    manager = Recorder(log)
    assert isinstance(manager, TopicManager)
    proc = Processor(log, GRAPH, topic_manager=manager)
    assert proc.topic_manager is manager
    async with proc:
        pass
    assert ("table", "tm-table", 2) in calls and ("stream", "tm-loop", 2) in calls
    built: list[Any] = []

    def builder(port: Any) -> TopicManager:
        built.append(port)
        return Recorder(port)

    async with Processor(log, GRAPH, topic_manager=builder):
        pass
    assert len(built) == 1
    with pytest.raises(ConfigError):
        Processor(log, GRAPH, topic_manager=lambda port: 42)
    # An emitter creates its missing topic through a manager too.
    calls.clear()
    async with Emitter(log, "fresh", "str", create_partitions=3, topic_manager=manager) as emitter:
        await emitter.emit_sync("k", "v")
    assert calls == [("stream", "fresh", 3)]


def test_the_config_is_checked() -> None:
    for bad in ({"table_replication": 0}, {"stream_replication": -1}, {"stream_retention": 0.0}):
        with pytest.raises(ConfigError):
            TopicManagerConfig(**bad)  # type: ignore[arg-type]
    assert TopicManagerConfig(stream_retention=1.5).stream_settings() == {"retention.ms": "1500"}


async def test_offset_for_time_on_a_log_without_a_time_index(log: InmemLog) -> None:
    await log.create_topic("events", 1)
    manager = LogTopicManager(log)
    assert await manager.offset_for_time("events", 0, 0.0) == 0  # empty: the high watermark
    for i in range(5):
        await log.produce("events", str(i).encode(), partition=0)
    reader = log.reader()
    reader.assign({TopicPartition("events", 0): 0})
    records = await reader.poll(10, 1.0)
    await reader.close()
    third = records[2].publish_time
    assert third is not None
    assert await manager.offset_for_time("events", 0, third) <= 2
    assert await manager.offset_for_time("events", 0, 0.0) == 0
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    assert await manager.offset_for_time("events", 0, later) == 5
    with pytest.raises(ConfigError):
        await manager.offset_for_time("events", 0, datetime.datetime(2024, 1, 1))  # naive
