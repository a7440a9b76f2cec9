"""Lag and message counts (kefka's ``LagForTopicPartition`` and ``MessageCount``).

``lag(topic, partition, group)`` is the high watermark minus the group's committed offset; when
the group committed nothing it is ``high - low`` (every retained record is still to be read).
``message_count`` is ``high - low``. Both read the watermarks with ``ListOffsets``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.backends.kafka.admin import KafkaAdmin
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


class MetadataClient:
    """Watermarks, committed offsets, lag and message counts of a cluster.

    ``config`` may be a producer's or consumer's librdkafka config: only the connection and
    security keys are used.
    """

    def __init__(self, config: Mapping[str, Any], *, timeout: float = 10.0) -> None:
        admin_config = {k: v for k, v in config.items() if k.startswith(_ADMIN_PREFIXES)}
        self.admin = KafkaAdmin(admin_config, timeout=timeout)

    async def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """``(low, high)`` of the partition."""
        return await self.admin.watermarks(TopicPartition(topic, partition))

    async def committed(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset of ``group`` (None when it committed nothing)."""
        tp = TopicPartition(topic, partition)
        return (await self.admin.committed(group, [tp]))[tp]

    async def lag(self, topic: str, partition: int, group: str) -> int:
        """How many records of the partition ``group`` has still to read."""
        low, high = await self.watermarks(topic, partition)
        return lag_from(low, high, await self.committed(group, topic, partition))

    async def message_count(self, topic: str, partition: int) -> int:
        """How many records the partition retains (``high - low``)."""
        low, high = await self.watermarks(topic, partition)
        return high - low


def _client(source: MetadataClient | Mapping[str, Any]) -> MetadataClient:
    return source if isinstance(source, MetadataClient) else MetadataClient(source)


async def lag(source: MetadataClient | Mapping[str, Any], topic: str, partition: int, group: str) -> int:
    """The lag of ``group`` on one partition; ``source`` is a MetadataClient or a librdkafka config."""
    return await _client(source).lag(topic, partition, group)


async def message_count(source: MetadataClient | Mapping[str, Any], topic: str, partition: int) -> int:
    """The number of records one partition retains; ``source`` as for :func:`lag`."""
    return await _client(source).message_count(topic, partition)
