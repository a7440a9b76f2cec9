"""What a processor keeps per owned partition: stores, pending table writes, offsets, stats."""

from __future__ import annotations

from broker.backends.kafka.processor.stats import InputStats, OutputStats, PartitionStats, table_stats
from broker.backends.kafka.processor.storage import Storage
from broker.backends.kafka.processor.table import PartitionTable
from broker.log import TopicPartition

__all__ = ["PartitionState"]


class PartitionState:
    """One partition number owned by a processor (the same number of every co-partitioned topic)."""

    __slots__ = (
        "committed",
        "deferred",
        "dirty",
        "inputs",
        "joins",
        "next_offsets",
        "outputs",
        "partition",
        "store",
        "table",
    )

    def __init__(
        self, partition: int, table: PartitionTable | None, joins: dict[str, PartitionTable]
    ) -> None:
        self.partition = partition
        self.table = table
        #: The group table's store (``None`` without a persist edge).
        self.store: Storage | None = table.storage if table is not None else None
        self.joins = joins
        #: Table writes of the current batch, coalesced per key (``None``: a tombstone).
        self.dirty: dict[str, bytes | None] = {}
        #: Next input offset to commit per topic partition, as processed.
        self.next_offsets: dict[TopicPartition, int] = {}
        #: Offsets last committed.
        self.committed: dict[TopicPartition, int] = {}
        #: Messages whose commit is deferred: token -> (topic partition, offset).
        self.deferred: dict[int, tuple[TopicPartition, int]] = {}
        self.inputs: dict[str, InputStats] = {}
        self.outputs: dict[str, OutputStats] = {}

    def commit_offsets(self) -> dict[TopicPartition, int]:
        """What can be committed now: processed offsets, held back by deferred messages."""
        out: dict[TopicPartition, int] = {}
        held: dict[TopicPartition, int] = {}
        for tp, offset in self.deferred.values():
            if tp not in held or offset < held[tp]:
                held[tp] = offset
        for tp, offset in self.next_offsets.items():
            limit = held.get(tp)
            target = offset if limit is None else min(offset, limit)
            if target > self.committed.get(tp, -1):
                out[tp] = target
        return out

    def stats(self) -> PartitionStats:
        """A snapshot of this partition's statistics (lag not filled in)."""
        return PartitionStats(
            inputs={
                k: InputStats(v.count, v.bytes, v.last_offset, v.lag, v.delay) for k, v in self.inputs.items()
            },
            outputs={k: OutputStats(v.count, v.bytes) for k, v in self.outputs.items()},
            table=table_stats(self.table) if self.table is not None else None,
            joins={k: table_stats(t) for k, t in self.joins.items()},
        )
