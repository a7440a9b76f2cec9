"""Topic management for processors and emitters (goka's ``TopicManager`` and ``TopicManagerConfig``).

A processor creates its loop topic, its group table topic and missing output (or, with
``create_partitions``, input) topics through a :class:`TopicManager`. The default,
:class:`LogTopicManager`, creates them on the log with a :class:`TopicManagerConfig`:

* tables (``<group>-table``): ``table_config`` (compacted by default) and ``table_replication``;
* streams (loop, outputs, inputs): ``stream_config``, ``stream_retention`` (``retention.ms``) and
  ``stream_replication``.

Replication is a Kafka notion: on Kafka ``None`` means the connection's ``replication_factor``
setting, a number creates the topic with that many replicas; the in-memory log ignores it.
A processor takes another manager with ``topic_manager=`` (an object with the
:class:`TopicManager` methods, or a function ``log -> manager``: goka's ``WithTopicManagerBuilder``).

:meth:`TopicManager.offset_for_time` is goka's ``GetOffset`` by time: the first offset of a
partition whose record time is at or after a moment (the high watermark when there is none). A
log that offers ``offset_for_time`` it asks the log; otherwise it binary-searches the partition
by record time (a few reads). On Kafka, replication is set through the log's admin client.
"""

from __future__ import annotations

import copy
import datetime
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from broker.backends.kafka.processor.assignment import kafka_log_of
from broker.errors import ConfigError
from broker.log import Log, TopicPartition

__all__ = [
    "LogTopicManager",
    "TopicManager",
    "TopicManagerBuilder",
    "TopicManagerConfig",
    "resolve_topic_manager",
]

#: A moment: POSIX seconds or an aware ``datetime``.
Moment = float | datetime.datetime


@dataclass(frozen=True, slots=True)
class TopicManagerConfig:
    """How a topic manager creates tables and streams (goka's ``TopicManagerConfig``)."""

    #: Replicas of a created table topic (Kafka; None: the connection's ``replication_factor``).
    table_replication: int | None = None
    #: Replicas of a created stream topic (Kafka; None: the connection's ``replication_factor``).
    stream_replication: int | None = None
    #: Retention of a created stream topic, in seconds (``retention.ms``; None: the broker's default).
    stream_retention: float | None = None
    #: Topic settings of a created table topic.
    table_config: Mapping[str, str] = field(default_factory=lambda: {"cleanup.policy": "compact"})
    #: Topic settings of a created stream topic (``stream_retention`` is added to them).
    stream_config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("table_replication", "stream_replication"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be an integer >= 1 or None, got {value!r}")
        if self.stream_retention is not None and not self.stream_retention > 0:
            raise ConfigError(f"stream_retention must be > 0 seconds or None, got {self.stream_retention}")

    def stream_settings(self) -> dict[str, str]:
        """The topic settings of a created stream."""
        settings = {k: str(v) for k, v in self.stream_config.items()}
        if self.stream_retention is not None:
            settings["retention.ms"] = str(int(self.stream_retention * 1000))
        return settings


@runtime_checkable
class TopicManager(Protocol):
    """Creates and inspects the topics of processors (goka's ``TopicManager``)."""

    async def ensure_table(self, topic: str, partitions: int) -> None:
        """Create table topic ``topic`` when missing (ConfigError if it exists with another count)."""

    async def ensure_stream(self, topic: str, partitions: int) -> None:
        """Create stream topic ``topic`` when missing (ConfigError if it exists with another count)."""

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` (``UnknownTopic`` if it does not exist)."""

    async def offset_for_time(self, topic: str, partition: int, when: Moment) -> int:
        """The first offset whose record time is >= ``when`` (the high watermark if none)."""


#: Makes the topic manager of a log (goka's ``TopicManagerBuilder``).
TopicManagerBuilder = Callable[[Log], TopicManager]


def posix_seconds(when: Moment, what: str) -> float:
    """``when`` (POSIX seconds or an aware ``datetime``) as POSIX seconds; a naive ``datetime``,
    whose zone is unknown, is a ``ConfigError`` naming ``what``."""
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:
            raise ConfigError(f"{what} must be timezone-aware (e.g. tzinfo=datetime.UTC)")
        return when.timestamp()
    return float(when)


class LogTopicManager:
    """The default :class:`TopicManager`: creates topics on ``log`` per ``config``."""

    def __init__(self, log_port: Log, config: TopicManagerConfig | None = None) -> None:
        self.log = log_port
        self.config = config or TopicManagerConfig()

    def __repr__(self) -> str:
        return f"<LogTopicManager {self.config!r}>"

    async def ensure_table(self, topic: str, partitions: int) -> None:
        """Create table ``topic`` (``table_config``, ``table_replication``) when missing."""
        config = {k: str(v) for k, v in self.config.table_config.items()}
        await self._create(topic, partitions, config, self.config.table_replication)

    async def ensure_stream(self, topic: str, partitions: int) -> None:
        """Create stream ``topic`` (``stream_config``, ``stream_retention``, ``stream_replication``)."""
        await self._create(topic, partitions, self.config.stream_settings(), self.config.stream_replication)

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic``."""
        return await self.log.partitions(topic)

    async def _create(
        self, topic: str, partitions: int, config: dict[str, str], replication: int | None
    ) -> None:
        if replication is None:
            await self.log.create_topic(topic, partitions, config=config or None)
        else:
            await _create_with_replication(self.log, topic, partitions, replication, config)

    async def offset_for_time(self, topic: str, partition: int, when: Moment) -> int:
        """The first offset of ``topic[partition]`` whose record time is >= ``when``.

        A log with an ``offset_for_time(TopicPartition, seconds)`` of its own answers; otherwise a
        binary search over the partition reads a few records (record times growing with offsets).
        """
        seconds = posix_seconds(when, "a datetime for offset_for_time")
        tp = TopicPartition(topic, partition)
        native = getattr(kafka_log_of(self.log) or self.log, "offset_for_time", None)
        if callable(native):
            return int(await native(tp, seconds))
        return await _offset_by_search(self.log, tp, seconds)


async def _create_with_replication(
    log_port: Log, topic: str, partitions: int, replication: int, config: dict[str, str]
) -> None:
    """Create ``topic`` with ``replication`` replicas, by whatever the log offers for it.

    A log whose ``create_topic`` takes ``replication_factor`` gets it; the Kafka log creates through
    a copy of its admin front end (sharing its client) with the factor set; a log with neither (the
    in-memory log) has no replicas to set.
    """
    create: Any = log_port.create_topic
    if "replication_factor" in inspect.signature(create).parameters:
        await create(topic, partitions, config=config or None, replication_factor=replication)
        return
    admin = getattr(kafka_log_of(log_port), "admin", None)
    if admin is None or not hasattr(admin, "replication_factor"):
        await create(topic, partitions, config=config or None)
        return
    _ = admin.client  # made now, so that the copy shares it (and its closing)
    replicated = copy.copy(admin)
    replicated.replication_factor = replication
    try:
        await replicated.create_topic(topic, partitions, config=config or None)
    except ConfigError as exc:
        raise ConfigError(f"cannot create topic {topic!r} with {replication} replica(s): {exc}") from exc


async def _offset_by_search(log_port: Log, tp: TopicPartition, seconds: float) -> int:
    """Binary search of ``tp`` by record time (record times are taken to grow with offsets)."""
    low, high = await log_port.watermarks(tp)
    if low >= high:
        return high
    reader = log_port.reader()
    best = high
    target_ms = math.floor(seconds * 1000)
    try:
        lo, hi = low, high
        assigned = False
        while lo < hi:
            mid = (lo + hi) // 2
            if assigned:
                reader.seek(tp, mid)
            else:
                reader.assign({tp: mid})
                assigned = True
            record = await _first_record(reader, tp, high)
            if record is None:  # nothing from mid on (a gap up to the end)
                hi = mid
                continue
            stamp = record.publish_time
            # In milliseconds, as Kafka keeps record times.
            if stamp is not None and round(stamp * 1000) >= target_ms:
                best = min(best, record.offset)
                hi = mid
            else:
                lo = record.offset + 1
    finally:
        await reader.close()
    return best


async def _first_record(reader: Any, tp: TopicPartition, high: int) -> Any:
    """The first record the reader gives for ``tp`` (None once its position reaches ``high``)."""
    for _ in range(50):
        for record in await reader.poll(1, 0.5):
            if record.topic == tp.topic and record.partition == tp.partition:
                return record
        if reader.position(tp) >= high:
            return None
    return None


def resolve_topic_manager(
    manager: TopicManager | TopicManagerBuilder | None, log_port: Log, config: TopicManagerConfig
) -> TopicManager:
    """``manager`` (an object, or a builder called with ``log_port``), or a :class:`LogTopicManager`."""
    if manager is None:
        return LogTopicManager(log_port, config)
    if isinstance(manager, TopicManager):
        return manager
    if callable(manager):
        built = manager(log_port)
        if not isinstance(built, TopicManager):
            raise ConfigError(f"the topic manager builder returned {built!r}, not a TopicManager")
        return built
    raise ConfigError(f"topic_manager must be a TopicManager or a function of the log, got {manager!r}")
