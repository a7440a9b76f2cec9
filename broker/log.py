"""The partitioned-log port: what the Kafka queue and the stream processor need beyond iterators.

Partitions, offsets, watermarks, consumer groups with assignment callbacks, producing with keys
to a chosen partition, committing, and compacted tables. ``backends.kafka`` implements it on
confluent-kafka, ``backends.inmem`` in memory. Records polled here are :class:`~broker.Record`
objects whose ``ack()`` commits through the consumer that polled them.

Offsets follow Kafka: a committed offset is the *next* offset to read; a high watermark is
the offset the next produced record will get.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Final, Literal, NamedTuple, Protocol, runtime_checkable

from broker.interfaces import Closeable
from broker.message import Record

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "Log",
    "LogConsumer",
    "LogReader",
    "RebalanceListener",
    "StartPosition",
    "TopicPartition",
]

#: Sentinel offsets for :meth:`LogReader.assign` and :meth:`LogConsumer.seek`.
OFFSET_BEGINNING: Final = -2
OFFSET_END: Final = -1

#: Where a group with no committed offset starts reading.
StartPosition = Literal["earliest", "latest"]


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


@runtime_checkable
class RebalanceListener(Protocol):
    """Called by a :class:`LogConsumer` from inside ``poll()`` when its assignment changes."""

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        """Partitions newly assigned to this member."""

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Partitions taken away; commit what was processed before returning."""


@runtime_checkable
class LogConsumer(Closeable, Protocol):
    """A member of a consumer group."""

    async def poll(self, max_records: int = 500, timeout: float | None = None) -> list[Record]:
        """Up to ``max_records`` records from the assigned partitions; ``[]`` after ``timeout``."""

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit, per partition, the next offset to read."""

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions currently assigned to this member."""

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (or OFFSET_BEGINNING / OFFSET_END)."""

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` until resumed."""

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Return records of ``partitions`` again."""


@runtime_checkable
class LogReader(Closeable, Protocol):
    """Reads partitions outside any consumer group (assign and seek; never commits)."""

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        """Add partitions to read, each from an offset (or OFFSET_BEGINNING / OFFSET_END)."""

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop reading ``partitions``."""

    def position(self, partition: TopicPartition) -> int:
        """The next offset this reader returns for ``partition``.

        Right after ``assign()`` with OFFSET_BEGINNING / OFFSET_END a client library may return that
        sentinel until its first poll resolves it (Kafka does); the in-memory log resolves it at once.
        """

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (or OFFSET_BEGINNING / OFFSET_END)."""

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` until resumed."""

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Return records of ``partitions`` again."""

    async def poll(self, max_records: int = 500, timeout: float | None = None) -> list[Record]:
        """Up to ``max_records`` records from the assigned partitions; ``[]`` after ``timeout``."""


@runtime_checkable
class Log(Closeable, Protocol):
    """A partitioned log: topics, producing, group consumers and free readers."""

    async def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``name``; a no-op when it exists with the same partition count.

        ``config`` carries topic settings such as ``{"cleanup.policy": "compact"}``.
        """

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` (``UnknownTopic`` if it does not exist)."""

    async def watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        """``(low, high)``: the first retained offset and the offset the next record will get."""

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one record without waiting; await the result for ``(TopicPartition, offset)``.

        ``partition=None`` picks the partition from the key (murmur2) or spreads unkeyed records.
        ``value=None`` writes a tombstone.
        """

    async def produce(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> tuple[TopicPartition, int]:
        """Write one record and wait until the log has it; returns ``(TopicPartition, offset)``."""

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued record was written."""

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start: StartPosition = "earliest",
        listener: RebalanceListener | None = None,
    ) -> LogConsumer:
        """Join ``group`` reading ``topics``; assignment changes reach ``listener``."""

    def reader(self) -> LogReader:
        """A reader outside any group."""

    async def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``group`` (None where nothing was committed)."""
