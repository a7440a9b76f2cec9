"""Partitioned-log semantics in memory: consumer groups, readers, and the ``broker.log`` port."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence

from broker import Record
from broker.backends.inmem.slices import partition_slice
from broker.backends.inmem.store import InmemBroker, TopicState, wait_for_change, wake
from broker.driver.clock import clock
from broker.driver.log_base import LogBase
from broker.driver.partitioning import Partitioner
from broker.driver.provision import Provision
from broker.driver.resources import AsyncResource, BatchedRecordIteration, RecordIteration
from broker.errors import ClosedError, ConfigError, Timeout, UnknownTopic
from broker.log import (
    OFFSET_BEGINNING,
    OFFSET_END,
    ReadHints,
    RebalanceListener,
    StartPosition,
    TopicPartition,
)

__all__ = ["GroupConsumer", "InmemLog", "InmemReader", "InmemRecordIterator"]

log = logging.getLogger("broker.backends.inmem")


class Group:
    """A consumer group: members in join order, an assignment, committed offsets."""

    def __init__(self, broker: InmemBroker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.members: list[GroupConsumer] = []
        self.committed: dict[TopicPartition, int] = {}
        self.generation = 0

    def join(self, member: GroupConsumer) -> None:
        """Add ``member`` and rebalance."""
        self.members.append(member)
        self.rebalance()

    def leave(self, member: GroupConsumer) -> None:
        """Remove ``member`` and rebalance."""
        if member in self.members:
            self.members.remove(member)
            self.rebalance()

    def topic_created(self, name: str) -> None:
        """Rebalance if a member waits for topic ``name``."""
        if any(name in m.topics for m in self.members):
            self.rebalance()

    def rebalance(self) -> None:
        """Spread every partition of every subscribed topic over the members reading it (round robin)."""
        self.generation += 1
        plan: dict[int, set[TopicPartition]] = {id(m): set() for m in self.members}
        topics = sorted({t for m in self.members for t in m.topics})
        for name in topics:
            topic = self.broker.topics.get(name)
            if topic is None:
                continue
            readers = [m for m in self.members if name in m.topics]
            for p in range(len(topic.partitions)):
                plan[id(readers[p % len(readers)])].add(TopicPartition(name, p))
        for member in self.members:
            member.reassign(frozenset(plan[id(member)]), self.generation)


class _RecordCommitter:
    """Commits for records polled by one group member: forward-only, owned partitions only."""

    __slots__ = ("consumer",)

    def __init__(self, consumer: GroupConsumer) -> None:
        self.consumer = consumer

    async def commit(self, record: Record) -> None:
        consumer = self.consumer
        tp = TopicPartition(record.topic, record.partition)
        if not consumer.owns(tp):
            log.debug("dropping ack of %s@%d: partition no longer assigned", tp, record.offset)
            return
        committed = consumer.group.committed
        if committed.get(tp, -1) < record.offset + 1:
            committed[tp] = record.offset + 1

    async def commit_many(self, records: Sequence[Record]) -> None:
        for record in records:
            await self.commit(record)


def _read(
    topic: TopicState,
    partition: int,
    position: int,
    limit: int,
    committer: _RecordCommitter | None,
    now: float,
) -> tuple[list[Record], int]:
    entries, end = partition_slice(topic.partitions[partition], position, limit)
    name = topic.name
    records: list[Record] = [
        Record(name, partition, offset, value, key, attributes, published, now, None, committer)  # type: ignore[arg-type]
        for offset, value, key, attributes, published in entries
    ]
    return records, end


class _PartitionReader(AsyncResource):
    """Positions over partitions, polling in rotation, waiting on the topics' wake-ups."""

    def __init__(self, broker: InmemBroker) -> None:
        self.broker = broker
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self._closed = False
        self._rotation = 0
        self._committer: _RecordCommitter | None = None
        self._wakeup: set[asyncio.Future[None]] = set()
        self.generation = 0

    def _resolve(self, tp: TopicPartition, offset: int) -> int:
        part = self.broker.topic(tp.topic).partitions[tp.partition]
        if offset == OFFSET_BEGINNING:
            return part.base
        if offset == OFFSET_END:
            return part.high
        if offset < 0:
            raise ConfigError(f"bad offset {offset} for {tp}")
        return offset

    def _read_ready(self, limit: int) -> list[Record]:
        out: list[Record] = []
        live = [tp for tp in self.positions if tp not in self.paused]
        if not live:
            return out
        now = clock.time()
        count = len(live)
        for step in range(count):
            tp = live[(self._rotation + step) % count]
            topic = self.broker.topics.get(tp.topic)
            if topic is None:
                continue
            records, end = _read(
                topic, tp.partition, self.positions[tp], limit - len(out), self._committer, now
            )
            if records:
                self.positions[tp] = end
                out.extend(records)
                if len(out) >= limit:
                    self._rotation = (self._rotation + step + 1) % count
                    break
        return out

    def _waiters(self) -> list[set[asyncio.Future[None]]]:
        names = {tp.topic for tp in self.positions} | self._watched_topics()
        return [self.broker.topics[n].waiters for n in names if n in self.broker.topics] + [self._wakeup]

    def _watched_topics(self) -> set[str]:
        return set()

    def _fault_name(self) -> str:
        """What ``backend.faults.slow_consumer(name)`` names this reader by: its group (none here)."""
        return ""

    async def _before_read(self) -> None:
        """Hook: apply pending rebalances."""

    async def poll(self, max_records: int = 500, timeout: float | None = None) -> list[Record]:
        """Up to ``max_records`` records; ``[]`` when none arrive within ``timeout`` seconds."""
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._closed:
                raise ClosedError("the in-memory log consumer is closed")
            await self._before_read()
            faults = self.broker.faults
            if faults is not None:
                topics = ",".join(sorted({tp.topic for tp in self.positions}))
                faults.before_receive(topics, self._fault_name())
            records = self._read_ready(max_records)
            if records:
                if faults is not None and (delay := faults.receive_delay(self._fault_name())):
                    await asyncio.sleep(delay)
                return records
            wait = None if deadline is None else deadline - loop.time()
            if wait is not None and wait <= 0:
                return []
            await wait_for_change(self._waiters(), wait)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        if partition not in self.positions:
            raise UnknownTopic(f"{partition} is not assigned to this consumer")
        self.positions[partition] = self._resolve(partition, offset)
        wake(self._wakeup)

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop returning records of ``partitions``."""
        self.paused.update(partitions)

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Return records of ``partitions`` again."""
        self.paused.difference_update(partitions)
        wake(self._wakeup)

    def position(self, partition: TopicPartition) -> int:
        """The next offset returned for ``partition``."""
        try:
            return self.positions[partition]
        except KeyError:
            raise UnknownTopic(f"{partition} is not assigned to this reader") from None

    async def close(self) -> None:
        """Stop reading. Idempotent."""
        self._closed = True
        wake(self._wakeup)


class InmemReader(_PartitionReader):
    """A LogReader: assigned partitions, explicit positions, no group, no commits."""

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        """Read each partition from its offset (or OFFSET_BEGINNING / OFFSET_END)."""
        for tp, offset in positions.items():
            self.broker.topic(tp.topic).tp(tp.partition)
            self.positions[TopicPartition(*tp)] = self._resolve(tp, offset)
        wake(self._wakeup)

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop reading ``partitions``."""
        for tp in partitions:
            self.positions.pop(tp, None)
            self.paused.discard(tp)


class GroupConsumer(_PartitionReader):
    """A LogConsumer: a member of an in-memory consumer group."""

    def __init__(
        self,
        broker: InmemBroker,
        group: str,
        topics: Sequence[str],
        start: StartPosition,
        listener: RebalanceListener | None,
    ) -> None:
        super().__init__(broker)
        if not topics:
            raise ConfigError("a consumer needs at least one topic")
        self.topics = tuple(topics)
        self.start = start
        self.listener = listener
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._target: frozenset[TopicPartition] = frozenset()
        self._committer = _RecordCommitter(self)
        group_state = broker.groups.get(group)
        if group_state is None:
            group_state = broker.groups[group] = Group(broker, group)
        self.group = group_state
        self.group.join(self)

    def reassign(self, target: frozenset[TopicPartition], generation: int) -> None:
        """Called by the group: the new assignment, applied at the next poll."""
        self._target = target
        self.generation = generation
        wake(self._wakeup)

    def _watched_topics(self) -> set[str]:
        return set(self.topics)

    def _fault_name(self) -> str:
        return self.group.name

    async def _before_read(self) -> None:
        target = self._target
        if target == self._assigned:
            return
        revoked = sorted(self._assigned - target)
        added = sorted(target - self._assigned)
        if revoked and self.listener is not None:
            await self.listener.on_revoked(revoked)
        for tp in revoked:
            self.positions.pop(tp, None)
            self.paused.discard(tp)
        self._assigned = self._assigned - set(revoked)
        for tp in added:
            committed = self.group.committed.get(tp)
            if committed is None:
                committed = self._resolve(tp, OFFSET_BEGINNING if self.start == "earliest" else OFFSET_END)
            self.positions[tp] = committed
        self._assigned = self._assigned | set(added)
        if added and self.listener is not None:
            await self.listener.on_assigned(added)

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions assigned to this member at its last poll, less those given away since."""
        return self._assigned & self._target

    def owns(self, tp: TopicPartition) -> bool:
        """True while ``tp`` is this member's: assigned, and not given to another member since.

        The in-memory twin of Kafka's generation fence: once the group moved a partition, the old
        member's commits of it are dropped, even before its next poll applies the revocation.
        """
        return tp in self._assigned and tp in self._target

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit the next offset to read per partition (partitions no longer owned are skipped)."""
        for tp, offset in offsets.items():
            if self.owns(tp):
                self.group.committed[TopicPartition(*tp)] = offset
            else:
                log.debug("skipping commit of %s: not assigned to this member", tp)

    async def close(self) -> None:
        """Leave the group (its partitions move to the remaining members)."""
        if not self._closed:
            if self._assigned and self.listener is not None:
                await self.listener.on_revoked(sorted(self._assigned))
            self.group.leave(self)
            self._assigned = frozenset()
        await super().close()


class InmemRecordIterator(RecordIteration):
    """RecordIterator and BatchedIterator over a group member."""

    def __init__(self, consumer: GroupConsumer, batch_size: int, batch_timeout: float) -> None:
        self._consumer = consumer
        self._buffer: list[Record] = []
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout

    @property
    def consumer(self) -> GroupConsumer:
        """The group member underneath."""
        return self._consumer

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record (``Timeout`` if none within ``timeout`` seconds)."""
        if not self._buffer:
            records = await self._consumer.poll(self.batch_size, timeout)
            if not records:
                raise Timeout(f"no record within {timeout}s")
            records.reverse()
            self._buffer = records
        return self._buffer.pop()

    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """Up to ``batch_size`` records that are ready; ``[]`` after the timeout."""
        if self._buffer:
            batch, self._buffer = self._buffer[::-1], []
            return batch
        return await self._consumer.poll(self.batch_size, self.batch_timeout if timeout is None else timeout)

    async def close(self) -> None:
        """Leave the group; unread buffered records are read again by the next owner."""
        self._buffer = []
        await self._consumer.close()


class InmemBatchedRecordIterator(InmemRecordIterator):
    """The batched view: ``async for`` yields non-empty batches."""

    __aiter__ = BatchedRecordIteration.__aiter__  # type: ignore[assignment]


class InmemLog(LogBase):
    """The ``broker.log.Log`` port on an in-memory broker (``produce`` writes at once, like ``send``)."""

    closed_message = "the in-memory log is closed"

    def __init__(
        self,
        broker: InmemBroker,
        partitioner: Partitioner,
        default_partitions: int = 1,
        provision: Provision = "create",
    ) -> None:
        self.broker = broker
        self.partitioner = partitioner
        self.default_partitions = default_partitions
        #: Whether ``send`` creates a missing topic (``create``) or raises (see ``provided_topic``).
        self.provision = provision
        self._closed = False
        self._children: list[AsyncResource] = []

    async def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``name`` (no-op if it exists with the same partition count)."""
        self._check()
        self.broker.create_topic(name, partitions, config)

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic``."""
        self._check()
        return len(self.broker.topic(topic).partitions)

    async def watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        """``(low, high)`` of ``partition``."""
        self._check()
        topic = self.broker.topic(partition.topic)
        part = topic.partitions[topic.tp(partition.partition).partition]
        return part.base, part.high

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
        """Write now; the awaitable yields ``(TopicPartition, offset)`` (``client_id`` is ignored)."""
        self._check_send(value, key, attributes)
        state = self.broker.provided_topic(topic, self.default_partitions, self.provision)
        p, offset = self.broker.append_record(state, value, key, attributes, partition, self.partitioner)
        fut: asyncio.Future[tuple[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        fut.set_result((TopicPartition(topic, p), offset))
        return fut

    async def flush(self, timeout: float | None = None) -> None:
        """Nothing is ever queued in memory."""
        self._check()

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start: StartPosition = "earliest",
        listener: RebalanceListener | None = None,
        client_id: str | None = None,
        hints: ReadHints | None = None,
    ) -> GroupConsumer:
        """Join ``group`` reading ``topics`` (``client_id`` and ``hints`` are ignored: no broker)."""
        self._check()
        return self._adopt(GroupConsumer(self.broker, group, topics, start, listener))

    def reader(self, *, client_id: str | None = None, hints: ReadHints | None = None) -> InmemReader:
        """A reader outside any group (``client_id`` and ``hints`` are ignored)."""
        self._check()
        return self._adopt(InmemReader(self.broker))

    async def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``group``."""
        state = self.broker.groups.get(group)
        committed = state.committed if state is not None else {}
        return {tp: committed.get(tp) for tp in partitions}
