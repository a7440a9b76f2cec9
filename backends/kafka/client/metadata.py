"""Lag and message counts (kefka's ``LagForTopicPartition`` and ``MessageCount``).

``lag(topic, partition, group)`` is the high watermark minus the group's committed offset; when
the group committed nothing it is ``high - low`` (every retained record is still to be read).
``message_count`` is ``high - low``. Both read the watermarks with ``ListOffsets``.

kefka's ``MetadataClient`` is any client with ``Assignment``, ``Committed`` and
``QueryWatermarkOffsets``, a consumer in practice, so that ``LagForTopicPartition`` needs no group.
:class:`MetadataClient` takes a consumer too (the application's ``confluent_kafka.Consumer``, or
a helper :class:`~broker.backends.kafka.client.consumer.Consumer`): then :meth:`MetadataClient.assignment`
is that consumer's, and ``lag()`` without a group is the consumer's lag: ``high - low`` for a
partition it is not assigned, else ``high`` minus its group's committed offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from broker.backends.kafka import sdk
from broker.backends.kafka.admin import KafkaAdmin
from broker.errors import ConfigError
from broker.log import TopicPartition

__all__ = ["MetadataClient", "lag", "lag_from", "message_count"]

#: Config keys an admin client understands (the rest of a consumer/producer config is dropped).
_ADMIN_PREFIXES = (
    "bootstrap.",
    "client.",
    "security.",
    "ssl.",
    "sasl.",
    "enable.ssl",
    "socket.",
    "broker.",
    "api.version",
    "metadata.",
    "topic.metadata",
    "connections.",
    "reconnect.",
    "debug",
    "logger",
    "log_level",
    "log.",
    "client.dns",
    "retry.",
)


def lag_from(low: int, high: int, committed: int | None) -> int:
    """The lag given the watermarks and a committed offset (None: nothing committed)."""
    if committed is None:
        return max(0, high - low)
    return max(0, high - max(committed, low))


def _raw_consumer(source: Any) -> Any:
    """The ``confluent_kafka.Consumer`` behind ``source`` (a raw one, or a helper Consumer), or None."""
    if isinstance(source, Mapping):
        return None
    core = getattr(source, "core", None)
    if core is not None and hasattr(core, "consumer"):
        return core.consumer
    if (
        hasattr(source, "assignment")
        and hasattr(source, "committed")
        and hasattr(source, "get_watermark_offsets")
    ):
        return source
    raise ConfigError(
        f"MetadataClient takes a librdkafka config mapping or a consumer, got {type(source).__name__}"
    )


class MetadataClient:
    """Watermarks, committed offsets, assignment, lag and message counts of a cluster.

    ``source`` is a librdkafka config (a producer's or consumer's: only the connection and
    security keys are used) or a consumer (the application's ``confluent_kafka.Consumer`` or a
    helper ``Consumer``): then :meth:`assignment` and ``lag()`` without a group are that
    consumer's, and its calls go through it.
    """

    def __init__(self, source: Mapping[str, Any] | Any, *, timeout: float = 10.0) -> None:
        self.timeout = timeout
        #: The consumer asked (None for a config).
        self.consumer: Any = _raw_consumer(source)
        self.admin: KafkaAdmin | None = None
        if self.consumer is None:
            admin_config = {k: v for k, v in source.items() if k.startswith(_ADMIN_PREFIXES)}
            self.admin = KafkaAdmin(admin_config, timeout=timeout)

    def _tp(self, topic: str, partition: int) -> Any:
        return sdk.confluent().TopicPartition(topic, partition)

    async def assignment(self) -> list[TopicPartition]:
        """The consumer's assigned partitions (kefka's ``Assignment``); ``ConfigError`` without one."""
        consumer = self._need_consumer("assignment()")
        assigned = await asyncio.to_thread(consumer.assignment)
        return sorted(TopicPartition(tp.topic, tp.partition) for tp in assigned)

    def _need_consumer(self, what: str) -> Any:
        if self.consumer is None:
            raise ConfigError(f"{what} needs a MetadataClient made from a consumer")
        return self.consumer

    async def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """``(low, high)`` of the partition."""
        if self.consumer is not None:
            low, high = await asyncio.to_thread(
                self.consumer.get_watermark_offsets, self._tp(topic, partition), self.timeout, False
            )
            return int(low), int(high)
        assert self.admin is not None
        return await self.admin.watermarks(TopicPartition(topic, partition))

    async def committed(self, group: str | None, topic: str, partition: int) -> int | None:
        """The committed offset of ``group`` (None: the consumer's group; None when nothing committed)."""
        tp = TopicPartition(topic, partition)
        if group is None:
            consumer = self._need_consumer("committed() without a group")
            [found] = await asyncio.to_thread(consumer.committed, [self._tp(topic, partition)], self.timeout)
            return None if found.offset < 0 else int(found.offset)
        if self.admin is None:
            raise ConfigError("committed() for a named group needs a MetadataClient made from a config")
        return (await self.admin.committed(group, [tp]))[tp]

    async def lag(self, topic: str, partition: int, group: str | None = None) -> int:
        """How many records of the partition ``group`` has still to read.

        ``group=None`` (a client made from a consumer): the consumer's lag, kefka's
        ``LagForTopicPartition``: ``high - low`` when the partition is not assigned to it.
        """
        low, high = await self.watermarks(topic, partition)
        if group is None:
            if TopicPartition(topic, partition) not in await self.assignment():
                return max(0, high - low)
        return lag_from(low, high, await self.committed(group, topic, partition))

    async def message_count(self, topic: str, partition: int) -> int:
        """How many records the partition retains (``high - low``)."""
        low, high = await self.watermarks(topic, partition)
        return high - low


def _client(source: MetadataClient | Mapping[str, Any] | Any) -> MetadataClient:
    return source if isinstance(source, MetadataClient) else MetadataClient(source)


async def lag(
    source: MetadataClient | Mapping[str, Any] | Any, topic: str, partition: int, group: str | None = None
) -> int:
    """The lag of ``group`` on one partition (kefka's ``LagForTopicPartition``).

    ``source`` is a MetadataClient, a librdkafka config or a consumer; with a consumer ``group``
    may be left out (the consumer's own).
    """
    return await _client(source).lag(topic, partition, group)


async def message_count(source: MetadataClient | Mapping[str, Any] | Any, topic: str, partition: int) -> int:
    """The number of records one partition retains; ``source`` as for :func:`lag`."""
    return await _client(source).message_count(topic, partition)
