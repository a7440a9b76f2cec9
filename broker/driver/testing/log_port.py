"""The contract of the partitioned-log port (:mod:`broker.log`), as one suite every implementation passes.

The marker queue and the stream processor are written against the port only, so what they rely
on is proved here, once, on each implementation. A test module subclasses :class:`LogPortSuite`
and provides a ``log_harness`` fixture returning a :class:`LogHarness` around an open log::

    class TestInmemLogPort(LogPortSuite):
        @pytest.fixture
        async def log_harness(self):
            async with broker.connect("inmem://t") as backend:
                yield InmemLogHarness(backend.log(), instant=True, rebalance="incremental")

Implementations differ in timing (a Kafka group join takes seconds, the in-memory log applies it
at the next poll) and in the rebalance protocol (eager or incremental); both are settings of the
harness, never a reason to fork a test. Needs pytest and pytest-asyncio (the ``test`` extra).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pytest

from broker.driver.partitioning import partition_for
from broker.errors import ClosedError, ConfigError, UnknownTopic
from broker.log import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Log,
    LogConsumer,
    LogReader,
    TopicPartition,
)
from broker.message import Record

__all__ = ["LogHarness", "LogPortSuite", "RecordingListener"]

T = TypeVar("T")

#: Rebalance protocols: ``eager`` revokes a member's whole assignment and assigns the new one
#: (Kafka's default strategies); ``incremental`` revokes and assigns only what moves
#: (Kafka's cooperative-sticky, the in-memory log).
Rebalance = Literal["eager", "incremental"]


@dataclass
class LogHarness:
    """What :class:`LogPortSuite` needs from an implementation: an open log and its timings.

    ``instant`` states the strongest timing a log can promise: a record written is returned by
    the very next ``poll(timeout=0)``, and a group change takes effect at each member's next
    poll. The suite then asserts that (one poll, no retries); otherwise it polls until
    ``patience`` runs out.
    """

    #: The log under test (open; the fixture closes it).
    log: Log
    #: How long to wait for something that should happen (seconds).
    patience: float = 10.0
    #: How long to poll before concluding that nothing will arrive (seconds).
    quiet: float = 1.0
    #: True when writes and group changes are visible at the next poll (see the class docstring).
    instant: bool = False
    #: The rebalance protocol of the log's consumer groups, which fixes what listeners hear.
    rebalance: Rebalance = "eager"
    #: Extra keyword arguments for ``log.consumer(...)`` when a member must notice a topic that is
    #: created after it joined (Kafka: a short metadata refresh interval).
    missing_topic_options: Mapping[str, Any] = field(default_factory=dict)

    def name(self, prefix: str) -> str:
        """A topic or group name not used before."""
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    async def topic_config(self, topic: str) -> Mapping[str, str] | None:
        """The settings ``topic`` has, as the broker reports them; None if this log cannot tell.

        The port has no call for it, so each harness reads it its own way (None skips the check).
        """
        return None


class RecordingListener:
    """A :class:`~broker.log.RebalanceListener` that records what it hears and acts as an application would.

    With ``consumer`` set, ``on_assigned`` seeks the partitions named in ``start_at`` and
    ``on_revoked`` commits the offsets named in ``commit_on_revoke``.
    """

    def __init__(self, consumer: LogConsumer | None = None) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []
        self.owned: set[TopicPartition] = set()
        self.consumer = consumer
        self.start_at: dict[TopicPartition, int] = {}
        self.commit_on_revoke: dict[TopicPartition, int] = {}

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        """Record the event; seek where ``start_at`` says."""
        self.events.append(("assigned", list(partitions)))
        self.owned.update(partitions)
        if self.consumer is not None:
            for tp in partitions:
                if tp in self.start_at:
                    self.consumer.seek(tp, self.start_at[tp])

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Record the event; commit what ``commit_on_revoke`` says for these partitions."""
        self.events.append(("revoked", list(partitions)))
        self.owned.difference_update(partitions)
        if self.consumer is not None and self.commit_on_revoke:
            await self.consumer.commit({tp: o for tp, o in self.commit_on_revoke.items() if tp in partitions})

    def kinds(self) -> list[str]:
        """The kinds of the events heard, in order."""
        return [kind for kind, _ in self.events]


async def _eventually(h: LogHarness, what: str, attempt: Callable[[], Awaitable[T | None]]) -> T:
    """The first non-None result of ``attempt``: at once on an instant log, else within patience."""
    if h.instant:
        result = await attempt()
        if result is None:
            raise AssertionError(f"{what}: not at the first poll, though the log is instant")
        return result
    try:
        async with asyncio.timeout(h.patience):
            while True:
                result = await attempt()
                if result is not None:
                    return result
    except TimeoutError:
        raise AssertionError(f"{what}: not within {h.patience}s") from None


async def _take(
    h: LogHarness, source: LogConsumer | LogReader, count: int, *, limit: int | None = None
) -> list[Record]:
    """Poll until ``count`` records came, asking for up to ``limit`` (so extras show up).

    On an instant log this is one ``poll(limit, timeout=0)``.
    """
    limit = max(count, limit or count)
    out: list[Record] = []

    async def attempt() -> list[Record] | None:
        out.extend(await source.poll(limit - len(out), timeout=0 if h.instant else 0.5))
        return out if len(out) >= count else None

    return await _eventually(h, f"{count} record(s)", attempt)


async def _settle(h: LogHarness, *members: LogConsumer, partitions: int) -> None:
    """Poll every member until each owns something and together they own ``partitions``."""

    async def attempt() -> bool | None:
        await asyncio.gather(*(m.poll(1, timeout=0 if h.instant else 0.1) for m in members))
        owned = [m.assignment() for m in members]
        return True if all(owned) and sum(len(o) for o in owned) == partitions else None

    await _eventually(h, f"{len(members)} member(s) sharing {partitions} partition(s)", attempt)


async def _numbered_topic(h: LogHarness, name: str, count: int) -> str:
    """A new one-partition topic (``h.name(name)``) holding ``count`` records ``b"0"``, ``b"1"``, ..."""
    topic = h.name(name)
    await h.log.create_topic(topic, 1)
    for i in range(count):
        await h.log.produce(topic, str(i).encode())
    return topic


class LogPortSuite:
    """The behaviours of a :class:`broker.log.Log` that the queue and the processor rely on."""

    async def test_it_implements_the_port(self, log_harness: LogHarness) -> None:
        h = log_harness
        assert isinstance(h.log, Log)
        reader = h.log.reader()
        consumer = h.log.consumer(h.name("g"), [h.name("t")])
        assert isinstance(reader, LogReader)
        assert isinstance(consumer, LogConsumer)
        await reader.close()
        await consumer.close()

    async def test_topics_partitions_watermarks_and_config(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        table = h.name("table")
        await log.create_topic(table, 4, config={"cleanup.policy": "compact"})
        await log.create_topic(table, 4)  # idempotent
        with pytest.raises(ConfigError):
            await log.create_topic(table, 2)
        assert await log.partitions(table) == 4
        with pytest.raises(UnknownTopic):
            await log.partitions(h.name("missing"))
        config = await h.topic_config(table)
        if config is not None:
            assert config.get("cleanup.policy") == "compact"
        tp = TopicPartition(table, 2)
        assert await log.watermarks(tp) == (0, 0)
        assert await log.produce(table, b"a", partition=2) == (tp, 0)
        assert await log.produce(table, None, key="gone", partition=2) == (tp, 1)  # tombstone
        assert await log.watermarks(tp) == (0, 2)
        with pytest.raises(UnknownTopic):
            await log.produce(table, b"x", partition=9)

    async def test_keys_go_to_the_kafka_partition(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        keyed = h.name("keyed")
        await log.create_topic(keyed, 6)
        for key in ("alice", "bob", "carol", "dave"):
            tp, _ = await log.produce(keyed, b"v", key=key)
            assert tp.partition == partition_for(key.encode(), 6)

    async def test_send_queues_without_waiting_and_flush_waits(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        topic = h.name("send")
        await log.create_topic(topic, 1)
        pending = [log.send(topic, str(i).encode(), attributes={"i": str(i)}) for i in range(50)]
        await log.flush(h.patience)
        results = [await p for p in pending]
        assert [offset for _, offset in results] == list(range(50))
        reader = log.reader()
        reader.assign({TopicPartition(topic, 0): OFFSET_BEGINNING})
        records = await _take(h, reader, 50)
        assert [r.attributes["i"] for r in records] == [str(i) for i in range(50)]
        await reader.close()

    async def test_reader_from_beginning_end_and_offset(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        topic = await _numbered_topic(h, "r", 5)
        tp = TopicPartition(topic, 0)
        reader = log.reader()
        reader.assign({tp: OFFSET_BEGINNING})
        assert [r.offset for r in await _take(h, reader, 5, limit=10)] == [0, 1, 2, 3, 4]
        assert reader.position(tp) == 5
        reader.seek(tp, 3)
        assert [r.value for r in await _take(h, reader, 2, limit=10)] == [b"3", b"4"]
        reader.assign({tp: OFFSET_END})
        assert await reader.poll(10, timeout=h.quiet) == []
        await log.produce(topic, b"5")
        assert [r.offset for r in await _take(h, reader, 1, limit=10)] == [5]
        assert reader.position(tp) == 6
        async with log.reader() as idle:  # nothing assigned: nothing to read
            assert await idle.poll(1, timeout=0) == []
        reader.unassign([tp])
        with pytest.raises(UnknownTopic):
            reader.position(tp)
        await reader.close()
        with pytest.raises(ClosedError):
            await reader.poll(1, timeout=0)

    async def test_group_members_split_partitions_and_rebalance(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        topic, group = h.name("g"), h.name("group")
        await log.create_topic(topic, 4)
        everything = {TopicPartition(topic, p) for p in range(4)}
        first_listener, second_listener = RecordingListener(), RecordingListener()
        first = log.consumer(group, [topic], listener=first_listener)
        await _settle(h, first, partitions=4)
        assert first.assignment() == everything
        assert first_listener.owned == everything, "on_assigned did not announce the assignment"
        heard_before_join = len(first_listener.events)

        second = log.consumer(group, [topic], listener=second_listener)
        await _settle(h, first, second, partitions=4)
        assert len(first.assignment()) == 2 and len(second.assignment()) == 2
        assert first.assignment().isdisjoint(second.assignment())
        # What the listeners heard adds up to what each member owns.
        assert first_listener.owned == first.assignment()
        assert second_listener.owned == second.assignment()
        assert "revoked" in first_listener.kinds()[heard_before_join:]
        moved = second.assignment()
        if h.rebalance == "incremental":  # only what moves is revoked
            assert first_listener.events == [("assigned", sorted(everything)), ("revoked", sorted(moved))]
        else:  # eager: everything is revoked, then the new share assigned
            assert first_listener.events[-2][0] == "revoked"
            assert first_listener.events[-1] == ("assigned", sorted(first.assignment()))

        await second.close()
        assert second_listener.events[-1] == ("revoked", sorted(moved))
        assert second_listener.owned == set()
        await _settle(h, first, partitions=4)
        assert first.assignment() == everything
        assert first_listener.owned == everything
        kinds = first_listener.kinds()
        if h.rebalance == "incremental":
            assert first_listener.events == [
                ("assigned", sorted(everything)),
                ("revoked", sorted(moved)),
                ("assigned", sorted(moved)),
            ]
        else:
            assert kinds[0] == "assigned" and kinds[-1] == "assigned" and "revoked" in kinds
            assert set(first_listener.events[-1][1]) == everything
        await first.close()

    async def test_commit_in_on_revoked_and_resume_in_a_new_member(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        topic = await _numbered_topic(h, "c", 6)
        group = h.name("cg")
        tp = TopicPartition(topic, 0)
        consumer = log.consumer(group, [topic])
        records = await _take(h, consumer, 4)
        await records[2].ack()  # commits offset 3
        await records[1].ack()  # never moves the commit backwards
        assert await log.committed(group, [tp]) == {tp: 3}
        await consumer.close()
        listener = RecordingListener()
        again = log.consumer(group, [topic], listener=listener)
        listener.consumer = again
        assert [r.value for r in await _take(h, again, 3, limit=10)] == [b"3", b"4", b"5"]
        await again.commit({tp: 1})  # explicit commits set the offset as given
        assert await log.committed(group, [tp]) == {tp: 1}
        listener.commit_on_revoke = {tp: 6}
        await again.close()  # leaving the group revokes: the listener commits inside on_revoked
        assert listener.events[-1] == ("revoked", [tp])
        assert await log.committed(group, [tp]) == {tp: 6}

    async def test_on_assigned_can_choose_the_start_offset(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        topic, group = h.name("seek"), h.name("sg")
        await log.create_topic(topic, 2)
        for i in range(4):
            await log.produce(topic, f"p0-{i}".encode(), partition=0)
            await log.produce(topic, f"p1-{i}".encode(), partition=1)
        listener = RecordingListener()
        consumer = log.consumer(group, [topic], listener=listener)
        listener.consumer = consumer
        listener.start_at = {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 1}
        records = await _take(h, consumer, 4, limit=10)
        assert sorted(r.value or b"" for r in records) == [b"p0-3", b"p1-1", b"p1-2", b"p1-3"]
        await consumer.close()

    async def test_acks_from_a_revoked_partition_are_dropped(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        topic, group = h.name("rv"), h.name("rg")
        await log.create_topic(topic, 2)
        await log.produce(topic, b"x", partition=0)
        await log.produce(topic, b"y", partition=1)
        first = log.consumer(group, [topic])
        records = await _take(h, first, 2, limit=10)
        second = log.consumer(group, [topic])
        await _settle(h, first, second, partitions=2)
        lost = next(r for r in records if TopicPartition(r.topic, r.partition) not in first.assignment())
        await lost.ack()
        tp = TopicPartition(topic, lost.partition)
        assert await log.committed(group, [tp]) == {tp: None}
        await first.close()
        await second.close()

    async def test_a_member_waiting_for_a_missing_topic_gets_it_when_created(
        self, log_harness: LogHarness
    ) -> None:
        h, log = log_harness, log_harness.log
        later = h.name("later")
        consumer = log.consumer(h.name("late"), [later], start="earliest", **h.missing_topic_options)
        assert await consumer.poll(1, timeout=h.quiet) == []
        await log.produce(later, b"first")
        assert [r.value for r in await _take(h, consumer, 1)] == [b"first"]
        await consumer.close()

    async def test_pause_and_resume(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        topic = await _numbered_topic(h, "p", 3)
        consumer = log.consumer(h.name("pg"), [topic])
        await _settle(h, consumer, partitions=1)  # may read a record: the seek below rewinds
        tp = TopicPartition(topic, 0)
        consumer.seek(tp, 0)
        consumer.pause([tp])
        assert await consumer.poll(10, timeout=h.quiet) == []
        consumer.resume([tp])
        assert [r.value for r in await _take(h, consumer, 3, limit=10)] == [b"0", b"1", b"2"]
        await consumer.close()

    async def test_start_latest_skips_old_records(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        old = h.name("old")
        await log.create_topic(old, 1)
        await log.produce(old, b"before")
        consumer = log.consumer(h.name("lg"), [old], start="latest")
        assert await consumer.poll(10, timeout=h.quiet) == []
        # Where "latest" is resolved some time after the join, probe until the member reads
        # something; an instant log reads the first probe.
        seen: list[Record] = []

        async def probe() -> list[Record] | None:
            await log.produce(old, b"probe")
            seen.extend(await consumer.poll(10, timeout=0 if h.instant else 0.2))
            return seen or None

        await _eventually(h, "a record written after the join", probe)
        await log.produce(old, b"after")
        while seen[-1].value != b"after":
            seen.extend(await _take(h, consumer, 1, limit=10))
        assert b"before" not in [r.value for r in seen]
        offsets = [r.offset for r in seen]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "skipped or read twice"
        if h.instant:
            assert [r.value for r in seen] == [b"probe", b"after"]
        await consumer.close()

    async def test_closing_the_log_closes_its_members(self, log_harness: LogHarness) -> None:
        h, log = log_harness, log_harness.log
        consumer = log.consumer(h.name("cl"), [h.name("t")])
        reader = log.reader()
        await log.close()
        await log.close()
        with pytest.raises(ClosedError):
            await consumer.poll(1, timeout=0)
        with pytest.raises(ClosedError):
            await reader.poll(1, timeout=0)
        with pytest.raises(ClosedError):
            log.reader()
