"""Table partitions kept in local storage: recovery from the table topic, then catch-up.

Shared by the group table, joined tables and views. Recovery reads one partition from the
store's offset (or the topic's low watermark) to the high watermark seen when it starts, applying
each record through the update callback, then marks the store recovered. A
:class:`TableFollower` keeps partitions caught up afterwards (views and joins).

If the store's offset is past the topic's high watermark the topic was recreated: the local
state is dropped and the partition is recovered from the beginning (goka stops with "delete
the local cache" instead).

Recovery checks that the first keys of each partition are where the configured partitioner puts
them (:class:`KeyPlacement`): a table written with another partitioner (goka hashes with FNV-1a,
librdkafka's default producer with CRC32, we and the Java client with murmur2) raises
:class:`~broker.backends.kafka.processor.errors.PartitionerMismatch` naming the one that fits, instead
of lookups that silently miss.
"""

from __future__ import annotations

import enum
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from broker import Record
from broker.backends.kafka.processor.errors import PartitionerMismatch
from broker.backends.kafka.processor.storage import MemoryStorage, Storage
from broker.driver.partitioning import Partitioner, partitioner_by_name
from broker.log import Log, LogReader, TopicPartition

__all__ = [
    "STALL_PERIOD",
    "KeyPlacement",
    "PartitionTable",
    "RecoveryStats",
    "TableFollower",
    "TableStatus",
    "UpdateCallback",
    "default_update",
    "mark_running",
    "recover",
]

log = _module_log = logging.getLogger("broker.backends.kafka.processor")

#: How a table record reaches the store: ``update(storage, partition, key, value)``.
UpdateCallback = Callable[[Storage, int, str, bytes | None], None]


def default_update(storage: Storage, partition: int, key: str, value: bytes | None) -> None:
    """A tombstone deletes the key, anything else replaces its value."""
    if value is None:
        storage.delete(key)
    else:
        storage.set(key, value)


class TableStatus(enum.IntEnum):
    """Where a table partition is in its life (ordered: readable from CONNECTING on)."""

    STOPPED = 0
    INITIALIZING = 1
    CONNECTING = 2
    RECOVERING = 3
    #: Recovery read everything; the store persists what it loaded in bulk (goka's
    #: ``PartitionPreparing``), and the owner has not started using the partition yet.
    PREPARING = 4
    RUNNING = 5


#: A table partition still behind its high watermark that read nothing for this many seconds is
#: *stalled* (goka checks for two minutes without a message).
STALL_PERIOD = 120.0


@dataclass(slots=True)
class RecoveryStats:
    """Progress of one partition's recovery."""

    #: First offset read (the store's offset, or the topic's low watermark).
    start_offset: int = 0
    #: Next offset to read.
    offset: int = 0
    #: The high watermark recovery runs to.
    hwm: int = 0
    #: When recovery started and finished (POSIX seconds).
    started: float | None = None
    finished: float | None = None

    @property
    def remaining(self) -> int:
        """Records left to recover."""
        return max(0, self.hwm - self.offset)


@dataclass(slots=True)
class PartitionTable:
    """One partition of a table topic in a local store."""

    topic: str
    partition: int
    storage: Storage
    update: UpdateCallback = default_update
    status: TableStatus = TableStatus.INITIALIZING
    recovery: RecoveryStats = field(default_factory=RecoveryStats)
    #: Records applied since recovery finished (catch-up) or writes made by the owner.
    writes: int = 0
    #: Table records read into the store (recovery and catch-up), their payload bytes, the last
    #: one's offset and timestamp, and when a record was last read (or recovery started).
    read_count: int = 0
    read_bytes: int = 0
    last_offset: int = -1
    last_time: float | None = None
    progress_at: float = field(default_factory=time.time)

    @property
    def stalled(self) -> bool:
        """True while recovering behind the high watermark with nothing read for ``STALL_PERIOD``."""
        if self.status not in (TableStatus.CONNECTING, TableStatus.RECOVERING):
            return False
        if self.recovery.offset >= self.recovery.hwm:
            return False
        return time.time() - self.progress_at >= STALL_PERIOD

    @property
    def tp(self) -> TopicPartition:
        """The table topic's partition."""
        return TopicPartition(self.topic, self.partition)

    def apply(self, records: Iterable[Record]) -> int:
        """Apply ``records`` of this partition; returns how many moved the offset."""
        update = self.update
        storage = self.storage
        partition = self.partition
        last = -1
        count = 0
        size = 0
        stamp = None
        for record in records:
            key = record.key
            value = record.value
            if key is not None:
                update(storage, partition, key, value)
            else:
                log.warning("skipping a record without key in table %s at offset %d", self.tp, record.offset)
            if value is not None:
                size += len(value)
            last = record.offset
            stamp = record.publish_time
            count += 1
        if last >= 0:
            storage.set_offset(last + 1)
            self.read_count += count
            self.read_bytes += size
            self.last_offset = last
            self.last_time = stamp
            self.progress_at = time.time()
        return count


def _crc32_partition(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


#: Partitioners a table may have been written with, by the name an error gives them.
_KNOWN: dict[str, Partitioner] = {
    "murmur2": partitioner_by_name("murmur2"),
    "fnv1a": partitioner_by_name("fnv1a"),
    "crc32": _crc32_partition,
}
_ADVICE = {
    "murmur2": "partitioner='murmur2' (Kafka's Java client and ours)",
    "fnv1a": "partitioner='fnv1a' (goka's)",
    "crc32": (
        "a producer with librdkafka's default partitioner (CRC32, 'consistent_random') wrote them: "
        "write the table's input with partitioner 'murmur2_random' (or pass a CRC32 partitioner function)"
    ),
}


class KeyPlacement:
    """Checks that a table's keys sit in the partitions the configured partitioner gives them.

    The first ``sample`` keyed records of each partition read during recovery are checked (a
    table written by one producer places every key the same way, so a sample tells).
    """

    def __init__(self, partitioner: Partitioner, name: str, partitions: int, *, sample: int = 64) -> None:
        self.partitioner = partitioner
        self.name = name
        self.partitions = partitions
        self.sample = sample
        self._seen: dict[TopicPartition, list[bytes]] = {}

    def check(self, tp: TopicPartition, records: Iterable[Record]) -> None:
        """Raise ``PartitionerMismatch`` if one of the first keys of ``tp`` belongs elsewhere."""
        if self.partitions < 2:
            return
        seen = self._seen.setdefault(tp, [])
        if len(seen) >= self.sample:
            return
        misplaced: tuple[str, int] | None = None
        for record in records:
            if record.key is None:
                continue
            key = record.key.encode("utf-8", "surrogateescape")
            seen.append(key)
            expected = self.partitioner(key, self.partitions)
            if expected != tp.partition and misplaced is None:
                misplaced = (record.key, expected)
            if len(seen) >= self.sample:
                break
        if misplaced is not None:  # explained with every key sampled (the more, the surer the fit)
            raise PartitionerMismatch(self._explain(tp, misplaced[0], misplaced[1], seen))

    def _explain(self, tp: TopicPartition, key: str, expected: int, keys: list[bytes]) -> str:
        fits = [
            name
            for name, partition_of in _KNOWN.items()
            if all(partition_of(k, self.partitions) == tp.partition for k in keys)
        ]
        what = (
            f"table {tp.topic!r}: key {key!r} is in partition {tp.partition}, but the configured "
            f"partitioner ({self.name}) puts it in partition {expected} of {self.partitions}; "
            "lookups would miss such keys and emits would land where the table's writers do not look"
        )
        if fits:
            return f"{what}. The keys fit {fits[0]}: use {_ADVICE[fits[0]]}"
        known = ", ".join(_KNOWN)
        return f"{what}. The keys fit none of {known}: pass the writers' partitioner as a function"


def partitioner_name(partitioner: object) -> str:
    """How an error names a configured partitioner (a name, or a function's name)."""
    if isinstance(partitioner, str):
        return partitioner
    return getattr(partitioner, "__name__", repr(partitioner))


async def _start_offset(
    log_port: Log, table: PartitionTable, logger: logging.Logger | None = None
) -> tuple[int, int]:
    """``(start, high)`` for recovering ``table``."""
    log = logger or _module_log
    low, high = await log_port.watermarks(table.tp)
    local = table.storage.offset()
    if local is not None and local > high:
        log.warning(
            "local store of %s is at offset %d but the topic ends at %d: the topic was recreated; "
            "dropping the local state and recovering from the beginning",
            table.tp,
            local,
            high,
        )
        table.storage.clear()
        local = None
    if local is not None and local < low:
        log.warning(
            "local store of %s is at offset %d but the topic now starts at %d: records %d..%d were "
            "deleted (retention) before this store read them; their updates are missing from it",
            table.tp,
            local,
            low,
            local,
            low - 1,
        )
    start = low if local is None else max(local, low)
    return start, high


async def recover(
    log_port: Log,
    tables: Sequence[PartitionTable],
    *,
    batch_size: int = 10_000,
    poll_timeout: float = 0.5,
    flush_every: int = 50_000,
    placement: KeyPlacement | None = None,
    owner: str = "a table",
    logger: logging.Logger | None = None,
) -> None:
    """Bring every table of ``tables`` up to its topic's current high watermark, in parallel.

    ``placement`` checks where the first keys of each partition are (``PartitionerMismatch``).
    Tables kept in memory (the default storage) are read from the beginning at every start:
    ``owner`` (``"processor 'g'"``) names who does that in the warning that says so (not logged
    for a store that already holds a part of its table, such as a hot standby's). ``logger``
    receives the warnings (default: the module's logger).
    """
    log = logger or _module_log
    targets: dict[TopicPartition, int] = {}
    positions: dict[TopicPartition, int] = {}
    by_tp: dict[TopicPartition, PartitionTable] = {}
    from_start: set[TopicPartition] = set()
    for table in tables:
        table.status = TableStatus.CONNECTING
        table.progress_at = time.time()
        start, high = await _start_offset(log_port, table, log)
        if table.storage.offset() is None:  # an empty store: not a standby's tail
            from_start.add(table.tp)
        table.recovery = RecoveryStats(start, start, high, time.time())
        if start >= high:
            if table.storage.offset() is None or high > (table.storage.offset() or 0):
                table.storage.set_offset(high)
            _finish(table)
            continue
        table.status = TableStatus.RECOVERING
        targets[table.tp] = high
        positions[table.tp] = start
        by_tp[table.tp] = table
    if not targets:
        return
    volatile = [
        tp for tp, table in by_tp.items() if isinstance(table.storage, MemoryStorage) and tp in from_start
    ]
    if volatile:
        in_memory = sorted({tp.topic for tp in volatile})
        again = sum(targets[tp] - positions[tp] for tp in volatile)
        log.warning(
            "%s keeps %s in memory: it reads %d records from the beginning now, and again at every "
            "restart; leave storage unset on Kafka (tables on disk under the data directory) or pass "
            "storage=lmdb_storage(<directory>) to read only what is new",
            owner,
            ", ".join(in_memory),
            again,
        )
    reader = log_port.reader()
    unflushed = dict.fromkeys(targets, 0)

    def apply(records: list[Record]) -> None:
        grouped: dict[TopicPartition, list[Record]] = {}
        for record in records:
            grouped.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        for tp, items in grouped.items():
            table = by_tp[tp]
            if placement is not None:
                placement.check(tp, items)
            unflushed[tp] += table.apply(items)
            table.recovery.offset = items[-1].offset + 1
            if unflushed[tp] >= flush_every:
                table.storage.flush()
                unflushed[tp] = 0

    try:
        reader.assign(positions)
        pending = dict(targets)
        while pending:
            apply(await reader.poll(batch_size, poll_timeout))
            for tp in [tp for tp, high in pending.items() if reader.position(tp) >= high]:
                del pending[tp]
        # Read what is already there past the high watermarks seen at the start (some brokers,
        # Tansu among them, report the high watermark of a batched topic too low).
        while records := await reader.poll(batch_size, 0):
            apply(records)
    finally:
        await reader.close()
    for tp in targets:
        table = by_tp[tp]
        table.recovery.offset = max(table.recovery.offset, table.recovery.hwm)
        if (table.storage.offset() or 0) < table.recovery.hwm:
            table.storage.set_offset(table.recovery.hwm)
        _finish(table)


def _finish(table: PartitionTable) -> None:
    """Recovery is done: PREPARING while the store persists its bulk load; the owner sets RUNNING."""
    table.status = TableStatus.PREPARING
    table.storage.mark_recovered()
    table.recovery.finished = time.time()


def mark_running(tables: Iterable[PartitionTable]) -> None:
    """The owner starts using ``tables`` (after :func:`recover`): they are RUNNING."""
    for table in tables:
        if table.status is TableStatus.PREPARING:
            table.status = TableStatus.RUNNING


class TableFollower:
    """Keeps recovered table partitions up to date by reading their topics as records arrive."""

    def __init__(self, log_port: Log, *, batch_size: int = 5000) -> None:
        self._log = log_port
        self._reader: LogReader | None = None
        self.batch_size = batch_size
        self.tables: dict[TopicPartition, PartitionTable] = {}

    def add(self, tables: Iterable[PartitionTable]) -> None:
        """Follow ``tables`` from their stores' offsets."""
        positions: dict[TopicPartition, int] = {}
        for table in tables:
            self.tables[table.tp] = table
            positions[table.tp] = table.storage.offset() or 0
        if positions:
            if self._reader is None:
                self._reader = self._log.reader()
            self._reader.assign(positions)

    def remove(self, tps: Iterable[TopicPartition]) -> list[PartitionTable]:
        """Stop following ``tps``; returns their tables."""
        gone = [self.tables.pop(tp) for tp in tps if tp in self.tables]
        if gone and self._reader is not None:
            self._reader.unassign([t.tp for t in gone])
        return gone

    async def step(self, timeout: float | None) -> int:
        """Apply what arrived within ``timeout`` seconds; returns how many records."""
        if self._reader is None or not self.tables:
            return 0
        records = await self._reader.poll(self.batch_size, timeout)
        if not records:
            return 0
        grouped: dict[TopicPartition, list[Record]] = {}
        for record in records:
            grouped.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        for tp, items in grouped.items():
            table = self.tables.get(tp)
            if table is None:
                continue
            table.writes += table.apply(items)
            table.storage.flush()
        return len(records)

    async def close(self) -> None:
        """Close the reader (the stores stay open: their owner closes them)."""
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
