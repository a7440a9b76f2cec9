"""The partitioned-log port: what the Kafka queue and the stream processor need beyond iterators.

Partitions, offsets, watermarks, consumer groups with assignment callbacks, producing with keys
to a chosen partition, committing, and compacted tables. ``broker.backends.kafka`` implements it on
confluent-kafka, ``broker.backends.inmem`` in memory. Records polled here are :class:`~broker.Record`
objects whose ``ack()`` commits through the consumer that polled them.

Offsets follow Kafka: a committed offset is the *next* offset to read; a high watermark is
the offset the next produced record will get.

``send``, ``produce``, ``consumer`` and ``reader`` take an optional ``client_id``: the name the
client reports to the broker (Kafka's ``client.id``, shown by broker tools and quotas; goka's
``WithClientID``). A log with no such notion ignores it (the in-memory log does).
:func:`with_client_id` wraps a log so that every client made through it carries one id.

Two optional, typed parts serve users that need more than records (the marker queue):

* :class:`ReadHints`, taken by ``consumer`` and ``reader``: how fetches should be served (how
  long the broker may hold one, how soon a silent member loses its partitions). A log applies
  what it can, within its own bounds, and ignores the rest.
* :class:`RawBatches`, implemented by a consumer that can hand out the log client's own record
  objects without building a :class:`~broker.Record` for each, with :class:`RawFields` to read
  them (``isinstance(consumer, RawBatches)`` tells).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol, runtime_checkable

from broker.driver.resources import AsyncResource
from broker.errors import ConfigError
from broker.interfaces import Closeable
from broker.message import Record

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "Log",
    "LogConsumer",
    "LogReader",
    "PartitionReading",
    "RawBatches",
    "RawFields",
    "ReadHints",
    "RebalanceListener",
    "StartPosition",
    "TopicPartition",
    "with_client_id",
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
class PartitionReading(Closeable, Protocol):
    """What a :class:`LogConsumer` and a :class:`LogReader` share: polling, seeking, pausing."""

    async def poll(self, max_records: int = 500, timeout: float | None = None) -> list[Record]:
        """Up to ``max_records`` records from the assigned partitions; ``[]`` after ``timeout``."""

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (or OFFSET_BEGINNING / OFFSET_END)."""

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` until resumed."""

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Return records of ``partitions`` again."""


@runtime_checkable
class LogConsumer(PartitionReading, Protocol):
    """A member of a consumer group."""

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit, per partition, the next offset to read."""

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions currently assigned to this member."""


@runtime_checkable
class LogReader(PartitionReading, Protocol):
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


@dataclass(frozen=True, slots=True)
class ReadHints:
    """How a consumer or reader wants its fetches served; ``None`` leaves the log's own setting.

    Hints, not settings: a log applies each within its bounds (Kafka: a session timeout between
    the broker's minimum and the connection's own) and ignores what it has no notion of.
    """

    #: Longest the broker may hold a fetch waiting for more data (seconds).
    max_wait: float | None = None
    #: Bytes a fetch waits for before it returns (1: return as soon as anything is there).
    min_bytes: int | None = None
    #: How soon a member that stopped answering should lose its partitions (seconds).
    failure_timeout: float | None = None
    #: Where a reader continues when a wanted offset is no longer retained.
    out_of_range: StartPosition | None = None

    def __post_init__(self) -> None:
        for name in ("max_wait", "failure_timeout"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"ReadHints.{name} must be >= 0, got {value}")
        if self.min_bytes is not None and self.min_bytes < 1:
            raise ConfigError(f"ReadHints.min_bytes must be >= 1, got {self.min_bytes}")


@dataclass(frozen=True, slots=True)
class RawFields:
    """How to read the log client's own record objects (each a function of one record)."""

    topic: Callable[[Any], str]
    partition: Callable[[Any], int]
    offset: Callable[[Any], int]
    #: The value as bytes (None for a tombstone).
    value: Callable[[Any], bytes | None]
    #: The key as the bytes on the wire (None when it has none).
    key_bytes: Callable[[Any], bytes | None]
    #: The key as text, decoded as :class:`~broker.Record` keys are.
    key: Callable[[Any], str | None]
    #: Truthy when the record carries any header/attribute (cheaper than decoding them).
    has_attributes: Callable[[Any], object]
    #: The attributes, decoded as :class:`~broker.Record` attributes are (a mapping of its own).
    attributes: Callable[[Any], Mapping[str, str]]
    #: The publish time in seconds (None when the log has none).
    publish_time: Callable[[Any], float | None]


@runtime_checkable
class RawBatches(Protocol):
    """Optional part of a :class:`LogConsumer`: batches of the log client's own records.

    For hot paths that read a few fields of every record (the marker queue): no
    :class:`~broker.Record` is built. Commits still go through :meth:`LogConsumer.commit`.
    """

    #: Reads the fields of the records :meth:`fetch_raw` returns.
    raw_fields: RawFields

    async def fetch_raw(self, max_records: int, timeout: float | None) -> Sequence[Any]:
        """Up to ``max_records`` records of the assigned partitions; empty after ``timeout``."""
        ...

    def single_partition(self) -> bool:
        """True when exactly one partition is assigned (offsets of a batch then ascend)."""
        ...


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
        client_id: str | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one record without waiting; await the result for ``(TopicPartition, offset)``.

        ``partition=None`` picks the partition from the key (murmur2) or spreads unkeyed records.
        ``value=None`` writes a tombstone. ``client_id`` picks the producer that reports that id.
        """

    async def produce(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> tuple[TopicPartition, int]:
        """Write one record and wait until the log has it; returns ``(TopicPartition, offset)``.

        By default ``send`` awaited (a class deriving from ``Log`` inherits that).
        """
        return await self.send(
            topic, value, key=key, partition=partition, attributes=attributes, client_id=client_id
        )

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued record was written."""

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start: StartPosition = "earliest",
        listener: RebalanceListener | None = None,
        client_id: str | None = None,
        hints: ReadHints | None = None,
    ) -> LogConsumer:
        """Join ``group`` reading ``topics``; assignment changes reach ``listener``."""

    def reader(self, *, client_id: str | None = None, hints: ReadHints | None = None) -> LogReader:
        """A reader outside any group."""

    async def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``group`` (None where nothing was committed)."""


class _ClientIdLog(AsyncResource, Log):
    """A :class:`Log` that passes one ``client_id`` to every producer, consumer and reader it makes.

    ``produce`` is the port's own: ``send`` (through this client id) awaited.
    """

    def __init__(self, inner: Log, client_id: str) -> None:
        self.inner = inner
        self.client_id = client_id

    def __repr__(self) -> str:
        return f"<{self.inner!r} as client {self.client_id!r}>"

    async def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``name`` on the wrapped log."""
        await self.inner.create_topic(name, partitions, config=config)

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic``."""
        return await self.inner.partitions(topic)

    async def watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        """``(low, high)`` of ``partition``."""
        return await self.inner.watermarks(partition)

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one record through the producer of this client id."""
        return self.inner.send(
            topic,
            value,
            key=key,
            partition=partition,
            attributes=attributes,
            client_id=client_id or self.client_id,
        )

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued record of the wrapped log was written."""
        await self.inner.flush(timeout)

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start: StartPosition = "earliest",
        listener: RebalanceListener | None = None,
        client_id: str | None = None,
        hints: ReadHints | None = None,
    ) -> LogConsumer:
        """A group member reporting this client id."""
        more = {"hints": hints} if hints is not None else {}  # a log may predate hints
        return self.inner.consumer(
            group, topics, start=start, listener=listener, client_id=client_id or self.client_id, **more
        )

    def reader(self, *, client_id: str | None = None, hints: ReadHints | None = None) -> LogReader:
        """A reader reporting this client id."""
        more = {"hints": hints} if hints is not None else {}
        return self.inner.reader(client_id=client_id or self.client_id, **more)

    async def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``group``."""
        return await self.inner.committed(group, partitions)

    async def close(self) -> None:
        """Nothing of its own to close: the wrapped log belongs to whoever made it."""


def with_client_id(log: Log, client_id: str | None) -> Log:
    """``log`` seen as client ``client_id``: its producers, consumers and readers report that id.

    Returns ``log`` itself when ``client_id`` is ``None`` (or when ``log`` already is this client).
    The wrapper shares the log (closing it is a no-op); close ``log`` itself when done.
    """
    if client_id is None:
        return log
    if not client_id:
        raise ConfigError("client_id must be a non-empty string or None")
    if isinstance(log, _ClientIdLog):
        if log.client_id == client_id:
            return log
        log = log.inner
    return _ClientIdLog(log, client_id)
