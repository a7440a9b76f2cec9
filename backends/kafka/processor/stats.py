"""Statistics of processors and views (snapshots; the processor updates its own counters)."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.backends.kafka.processor.table import RecoveryStats, TableStatus

__all__ = ["InputStats", "OutputStats", "PartitionStats", "ProcessorStats", "TableStats", "ViewStats"]


@dataclass(slots=True)
class InputStats:
    """One input topic of one partition."""

    #: Messages processed (nil messages dropped by ``NilHandling.IGNORE`` included).
    count: int = 0
    #: Payload bytes processed.
    bytes: int = 0
    #: Offset of the last message processed (-1: none yet).
    last_offset: int = -1
    #: Messages behind the high watermark (filled in by ``Processor.stats()``).
    lag: int = 0


@dataclass(slots=True)
class OutputStats:
    """Messages emitted (or looped back) to one topic from one partition."""

    count: int = 0
    bytes: int = 0


@dataclass(slots=True)
class TableStats:
    """One table partition: status, recovery progress, writes."""

    status: TableStatus
    recovery: RecoveryStats
    writes: int = 0


@dataclass(slots=True)
class PartitionStats:
    """One partition owned by a processor."""

    inputs: dict[str, InputStats] = field(default_factory=dict)
    outputs: dict[str, OutputStats] = field(default_factory=dict)
    table: TableStats | None = None
    joins: dict[str, TableStats] = field(default_factory=dict)


@dataclass(slots=True)
class ViewStats:
    """A view: its partitions' table stats."""

    partitions: dict[int, TableStats] = field(default_factory=dict)


@dataclass(slots=True)
class ProcessorStats:
    """A processor: its owned partitions and its lookup views."""

    group: dict[int, PartitionStats] = field(default_factory=dict)
    lookups: dict[str, ViewStats] = field(default_factory=dict)
