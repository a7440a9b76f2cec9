"""Statistics of processors and views (snapshots; the processor updates its own counters)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from broker.backends.kafka.processor.table import PartitionTable, RecoveryStats, TableStatus

__all__ = [
    "InputStats",
    "OutputStats",
    "PartitionStats",
    "ProcessorStats",
    "TableStats",
    "ViewStats",
    "table_stats",
]


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
    #: Seconds between the last message's timestamp and when it was processed (goka's
    #: ``InputStats.Delay``; 0 when the message carried no timestamp). For a table: when it was read.
    delay: float = 0.0


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
    #: Recovering behind the high watermark with nothing read for ``table.STALL_PERIOD`` seconds
    #: (goka's ``TableStats.Stalled``).
    stalled: bool = False
    #: What was read into the table (recovery and catch-up): count, bytes, last offset, delay.
    input: InputStats = field(default_factory=InputStats)


@dataclass(slots=True)
class PartitionStats:
    """One partition owned by a processor."""

    inputs: dict[str, InputStats] = field(default_factory=dict)
    outputs: dict[str, OutputStats] = field(default_factory=dict)
    table: TableStats | None = None
    joins: dict[str, TableStats] = field(default_factory=dict)
    #: When this snapshot was taken (POSIX seconds; goka's ``PartitionProcStats.Now``).
    now: float = field(default_factory=time.time)


@dataclass(slots=True)
class ViewStats:
    """A view: its partitions' table stats."""

    partitions: dict[int, TableStats] = field(default_factory=dict)


@dataclass(slots=True)
class ProcessorStats:
    """A processor: its owned partitions and its lookup views."""

    group: dict[int, PartitionStats] = field(default_factory=dict)
    lookups: dict[str, ViewStats] = field(default_factory=dict)


def table_stats(table: PartitionTable) -> TableStats:
    """A snapshot of ``table``'s statistics."""
    delay = 0.0
    if table.last_time is not None:
        delay = max(0.0, table.progress_at - table.last_time)
    lag = max(0, table.recovery.hwm - table.recovery.offset) if table.status < TableStatus.PREPARING else 0
    return TableStats(
        table.status,
        table.recovery,
        table.writes,
        table.stalled,
        InputStats(table.read_count, table.read_bytes, table.last_offset, lag, delay),
    )
