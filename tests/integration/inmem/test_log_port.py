"""The broker.log port on the in-memory broker: partitions, groups, readers, commits."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence

import pytest

import broker
from backends.inmem import InmemBackend, InmemLog
from broker.errors import ClosedError, ConfigError, UnknownTopic
from broker.log import OFFSET_BEGINNING, OFFSET_END, Log, LogConsumer, LogReader, TopicPartition
from broker.partitioning import partition_for


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://log-{uuid.uuid4().hex}")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        self.events.append(("assigned", list(partitions)))

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        self.events.append(("revoked", list(partitions)))


async def test_it_implements_the_port(log: InmemLog) -> None:
    assert isinstance(log, Log)
    assert isinstance(log.reader(), LogReader)
    assert isinstance(log.consumer("g", ["t"]), LogConsumer)


async def test_topics_partitions_and_watermarks(log: InmemLog) -> None:
    await log.create_topic("table", 4, config={"cleanup.policy": "compact"})
    await log.create_topic("table", 4)  # idempotent
    with pytest.raises(ConfigError):
        await log.create_topic("table", 2)
    assert await log.partitions("table") == 4
    with pytest.raises(UnknownTopic):
        await log.partitions("missing")
    tp = TopicPartition("table", 2)
    assert await log.watermarks(tp) == (0, 0)
    assert await log.produce("table", b"a", partition=2) == (tp, 0)
    assert await log.produce("table", None, key="gone", partition=2) == (tp, 1)  # tombstone
    assert await log.watermarks(tp) == (0, 2)
    with pytest.raises(UnknownTopic):
        await log.produce("table", b"x", partition=9)


async def test_keys_go_to_the_kafka_partition(log: InmemLog) -> None:
    await log.create_topic("keyed", 6)
    for key in ("alice", "bob", "carol", "dave"):
        tp, _ = await log.produce("keyed", b"v", key=key)
        assert tp.partition == partition_for(key.encode(), 6)


async def test_reader_from_beginning_end_and_offset(log: InmemLog) -> None:
    await log.create_topic("r", 1)
    for i in range(5):
        await log.produce("r", str(i).encode())
    tp = TopicPartition("r", 0)
    reader = log.reader()
    reader.assign({tp: OFFSET_BEGINNING})
    assert [r.offset for r in await reader.poll(10, timeout=0)] == [0, 1, 2, 3, 4]
    reader.seek(tp, 3)
    assert [r.value for r in await reader.poll(10, timeout=0)] == [b"3", b"4"]
    reader.assign({tp: OFFSET_END})
    assert reader.position(tp) == 5
    assert await reader.poll(10, timeout=0.05) == []
    await log.produce("r", b"5")
    assert [r.offset for r in await reader.poll(10, timeout=1)] == [5]
    reader.unassign([tp])
    with pytest.raises(UnknownTopic):
        reader.position(tp)
    await reader.close()
    with pytest.raises(ClosedError):
        await reader.poll(1, timeout=0)


async def test_group_members_split_partitions_and_rebalance(log: InmemLog) -> None:
    await log.create_topic("g", 4)
    first_listener, second_listener = Listener(), Listener()
    first = log.consumer("group", ["g"], listener=first_listener)
    await first.poll(1, timeout=0)
    assert len(first.assignment()) == 4
    second = log.consumer("group", ["g"], listener=second_listener)
    await first.poll(1, timeout=0)
    await second.poll(1, timeout=0)
    assert len(first.assignment()) == 2 and len(second.assignment()) == 2
    assert first.assignment().isdisjoint(second.assignment())
    assert first_listener.events[-1][0] == "revoked"
    await second.close()
    await first.poll(1, timeout=0)
    assert len(first.assignment()) == 4
    assert [kind for kind, _ in first_listener.events] == ["assigned", "revoked", "assigned"]


async def test_commit_and_resume_in_a_new_member(log: InmemLog) -> None:
    await log.create_topic("c", 1)
    for i in range(6):
        await log.produce("c", str(i).encode())
    consumer = log.consumer("cg", ["c"])
    records = await consumer.poll(4, timeout=0)
    await records[2].ack()  # commits offset 3
    await records[1].ack()  # never moves the commit backwards
    tp = TopicPartition("c", 0)
    assert await log.committed("cg", [tp]) == {tp: 3}
    await consumer.close()
    again = log.consumer("cg", ["c"])
    assert [r.value for r in await again.poll(10, timeout=0)] == [b"3", b"4", b"5"]
    await again.commit({tp: 1})  # explicit commits set the offset as given
    assert await log.committed("cg", [tp]) == {tp: 1}


async def test_acks_from_a_revoked_partition_are_dropped(log: InmemLog) -> None:
    await log.create_topic("rv", 2)
    await log.produce("rv", b"x", partition=0)
    await log.produce("rv", b"y", partition=1)
    first = log.consumer("rg", ["rv"])
    records = await first.poll(10, timeout=0)
    second = log.consumer("rg", ["rv"])
    await first.poll(1, timeout=0)
    await second.poll(1, timeout=0)
    lost = next(r for r in records if TopicPartition(r.topic, r.partition) not in first.assignment())
    await lost.ack()
    assert (await log.committed("rg", [TopicPartition("rv", lost.partition)])) == {
        TopicPartition("rv", lost.partition): None
    }


async def test_a_member_waiting_for_a_missing_topic_gets_it_when_created(log: InmemLog) -> None:
    consumer = log.consumer("late", ["later"], start="earliest")
    assert await consumer.poll(1, timeout=0.05) == []
    await log.produce("later", b"first")
    assert [r.value for r in await consumer.poll(1, timeout=1)] == [b"first"]


async def test_pause_and_resume(log: InmemLog) -> None:
    await log.create_topic("p", 1)
    await log.produce("p", b"1")
    consumer = log.consumer("pg", ["p"])
    await consumer.poll(1, timeout=0)  # join
    tp = TopicPartition("p", 0)
    consumer.seek(tp, 0)
    consumer.pause([tp])
    assert await consumer.poll(1, timeout=0.05) == []
    consumer.resume([tp])
    assert [r.value for r in await consumer.poll(1, timeout=0)] == [b"1"]


async def test_start_latest_skips_old_records(log: InmemLog) -> None:
    await log.produce("old", b"before")
    consumer = log.consumer("lg", ["old"], start="latest")
    assert await consumer.poll(1, timeout=0.05) == []
    await log.produce("old", b"after")
    assert [r.value for r in await consumer.poll(1, timeout=1)] == [b"after"]
