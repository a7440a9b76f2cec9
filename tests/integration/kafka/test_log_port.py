"""The broker.log port on Kafka (Tansu): the behaviours tests/integration/inmem/test_log_port.py checks.

Waits are longer than in memory (group joins take about a second); anything that reads a high
watermark uses the one-record-per-batch producer (Tansu's watermark bug).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from backends.kafka import sdk
from backends.kafka.backend import KafkaBackend
from backends.kafka.log import KafkaLog, KafkaLogConsumer
from broker.errors import ClosedError, ConfigError, UnknownTopic
from broker.log import OFFSET_BEGINNING, OFFSET_END, Log, LogConsumer, LogReader, TopicPartition
from broker.message import Record
from broker.partitioning import partition_for
from tests.integration.kafka.support import unique

PATIENCE = 15.0


@pytest.fixture
async def log(exact_backend: KafkaBackend) -> AsyncIterator[KafkaLog]:
    async with exact_backend.log() as opened:
        yield opened


class Listener:
    def __init__(self, consumer: KafkaLogConsumer | None = None) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []
        self.consumer = consumer
        self.start_at: dict[TopicPartition, int] = {}
        self.commit_on_revoke: dict[TopicPartition, int] = {}

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        self.events.append(("assigned", list(partitions)))
        if self.consumer is not None:
            for tp in partitions:
                if tp in self.start_at:
                    self.consumer.seek(tp, self.start_at[tp])

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        self.events.append(("revoked", list(partitions)))
        if self.consumer is not None and self.commit_on_revoke:
            await self.consumer.commit({tp: o for tp, o in self.commit_on_revoke.items() if tp in partitions})


async def poll_until(consumer: LogConsumer | LogReader, count: int) -> list[Record]:
    out: list[Record] = []
    async with asyncio.timeout(PATIENCE):
        while len(out) < count:
            out.extend(await consumer.poll(count - len(out), timeout=0.5))
    return out


async def settle(*members: LogConsumer, partitions: int) -> None:
    """Poll every member until each owns something and together they own ``partitions``."""
    async with asyncio.timeout(PATIENCE):
        while True:
            await asyncio.gather(*(m.poll(1, timeout=0.1) for m in members))
            owned = [m.assignment() for m in members]
            if all(owned) and sum(len(o) for o in owned) == partitions:
                return


async def test_it_implements_the_port(log: KafkaLog) -> None:
    assert isinstance(log, Log)
    reader = log.reader()
    consumer = log.consumer(unique("g"), [unique("t")])
    assert isinstance(reader, LogReader)
    assert isinstance(consumer, LogConsumer)
    await reader.close()
    await consumer.close()


async def test_topics_partitions_watermarks_and_config(log: KafkaLog, exact_backend: KafkaBackend) -> None:
    table = unique("table")
    await log.create_topic(table, 4, config={"cleanup.policy": "compact"})
    await log.create_topic(table, 4)  # idempotent
    with pytest.raises(ConfigError):
        await log.create_topic(table, 2)
    assert await log.partitions(table) == 4
    with pytest.raises(UnknownTopic):
        await log.partitions(unique("missing"))
    admin = sdk.admin_module()
    resource = admin.ConfigResource("topic", table)
    (future,) = exact_backend.admin.client.describe_configs([resource]).values()
    configs = await asyncio.wrap_future(future)
    assert configs["cleanup.policy"].value == "compact"
    tp = TopicPartition(table, 2)
    assert await log.watermarks(tp) == (0, 0)
    assert await log.produce(table, b"a", partition=2) == (tp, 0)
    assert await log.produce(table, None, key="gone", partition=2) == (tp, 1)  # tombstone
    assert await log.watermarks(tp) == (0, 2)
    with pytest.raises(UnknownTopic):
        await log.produce(table, b"x", partition=9)


async def test_keys_go_to_the_kafka_partition(log: KafkaLog) -> None:
    keyed = unique("keyed")
    await log.create_topic(keyed, 6)
    for key in ("alice", "bob", "carol", "dave"):
        tp, _ = await log.produce(keyed, b"v", key=key)
        assert tp.partition == partition_for(key.encode(), 6)


async def test_send_queues_without_waiting_and_flush_waits(log: KafkaLog) -> None:
    topic = unique("send")
    await log.create_topic(topic, 1)
    pending = [log.send(topic, str(i).encode(), attributes={"i": str(i)}) for i in range(50)]
    await log.flush(PATIENCE)
    results = [await p for p in pending]
    assert [offset for _, offset in results] == list(range(50))
    reader = log.reader()
    reader.assign({TopicPartition(topic, 0): OFFSET_BEGINNING})
    records = await poll_until(reader, 50)
    assert [r.attributes["i"] for r in records] == [str(i) for i in range(50)]
    await reader.close()


async def test_reader_from_beginning_end_and_offset(log: KafkaLog) -> None:
    topic = unique("r")
    await log.create_topic(topic, 1)
    for i in range(5):
        await log.produce(topic, str(i).encode())
    tp = TopicPartition(topic, 0)
    reader = log.reader()
    reader.assign({tp: OFFSET_BEGINNING})
    assert [r.offset for r in await poll_until(reader, 5)] == [0, 1, 2, 3, 4]
    assert reader.position(tp) == 5
    reader.seek(tp, 3)
    assert [r.value for r in await poll_until(reader, 2)] == [b"3", b"4"]
    reader.assign({tp: OFFSET_END})
    assert await reader.poll(10, timeout=0.5) == []
    await log.produce(topic, b"5")
    assert [r.offset for r in await poll_until(reader, 1)] == [5]
    assert reader.position(tp) == 6
    async with log.reader() as idle:  # nothing assigned: nothing to read
        assert await idle.poll(1, timeout=0) == []
    reader.unassign([tp])
    with pytest.raises(UnknownTopic):
        reader.position(tp)
    await reader.close()
    with pytest.raises(ClosedError):
        await reader.poll(1, timeout=0)


async def test_group_members_split_partitions_and_rebalance(log: KafkaLog) -> None:
    topic, group = unique("g"), unique("group")
    await log.create_topic(topic, 4)
    first_listener, second_listener = Listener(), Listener()
    first = log.consumer(group, [topic], listener=first_listener)
    await settle(first, partitions=4)
    second = log.consumer(group, [topic], listener=second_listener)
    await settle(first, second, partitions=4)
    assert len(first.assignment()) == 2 and len(second.assignment()) == 2
    assert first.assignment().isdisjoint(second.assignment())
    assert first_listener.events[-2][0] == "revoked" and first_listener.events[-1][0] == "assigned"
    await second.close()
    assert second_listener.events[-1][0] == "revoked"
    await settle(first, partitions=4)
    kinds = [kind for kind, _ in first_listener.events]
    assert kinds[0] == "assigned" and kinds[-1] == "assigned" and "revoked" in kinds
    assert set(first_listener.events[-1][1]) == {TopicPartition(topic, p) for p in range(4)}
    await first.close()


async def test_commit_in_on_revoked_and_resume_in_a_new_member(log: KafkaLog) -> None:
    topic, group = unique("c"), unique("cg")
    await log.create_topic(topic, 1)
    for i in range(6):
        await log.produce(topic, str(i).encode())
    tp = TopicPartition(topic, 0)
    consumer = log.consumer(group, [topic])
    records = await poll_until(consumer, 4)
    await records[2].ack()  # commits offset 3
    await records[1].ack()  # never moves the commit backwards
    assert await log.committed(group, [tp]) == {tp: 3}
    await consumer.close()
    listener = Listener()
    again = log.consumer(group, [topic], listener=listener)
    listener.consumer = again
    assert [r.value for r in await poll_until(again, 3)] == [b"3", b"4", b"5"]
    await again.commit({tp: 1})  # explicit commits set the offset as given
    assert await log.committed(group, [tp]) == {tp: 1}
    listener.commit_on_revoke = {tp: 6}
    await again.close()  # leaving the group revokes: the listener commits inside on_revoked
    assert listener.events[-1] == ("revoked", [tp])
    assert await log.committed(group, [tp]) == {tp: 6}


async def test_on_assigned_can_choose_the_start_offset(log: KafkaLog) -> None:
    topic, group = unique("seek"), unique("sg")
    await log.create_topic(topic, 2)
    for i in range(4):
        await log.produce(topic, f"p0-{i}".encode(), partition=0)
        await log.produce(topic, f"p1-{i}".encode(), partition=1)
    listener = Listener()
    consumer = log.consumer(group, [topic], listener=listener)
    listener.consumer = consumer
    listener.start_at = {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 1}
    records = await poll_until(consumer, 4)
    assert sorted(r.value or b"" for r in records) == [b"p0-3", b"p1-1", b"p1-2", b"p1-3"]
    await consumer.close()


async def test_acks_from_a_revoked_partition_are_dropped(log: KafkaLog) -> None:
    topic, group = unique("rv"), unique("rg")
    await log.create_topic(topic, 2)
    await log.produce(topic, b"x", partition=0)
    await log.produce(topic, b"y", partition=1)
    first = log.consumer(group, [topic])
    records = await poll_until(first, 2)
    second = log.consumer(group, [topic])
    await settle(first, second, partitions=2)
    lost = next(r for r in records if TopicPartition(r.topic, r.partition) not in first.assignment())
    await lost.ack()
    tp = TopicPartition(topic, lost.partition)
    assert await log.committed(group, [tp]) == {tp: None}
    await first.close()
    await second.close()


async def test_a_member_waiting_for_a_missing_topic_gets_it_when_created(log: KafkaLog) -> None:
    # librdkafka notices a created topic at its next metadata refresh (default: every 5 minutes,
    # like Java's metadata.max.age.ms); a member that waits for topics to appear lowers it.
    later = unique("later")
    refresh = {"topic.metadata.refresh.interval.ms": 500}
    consumer = log.consumer(unique("late"), [later], start="earliest", consumer_config=refresh)
    assert await consumer.poll(1, timeout=1.0) == []
    await log.produce(later, b"first")
    assert [r.value for r in await poll_until(consumer, 1)] == [b"first"]
    await consumer.close()


async def test_pause_and_resume(log: KafkaLog) -> None:
    topic = unique("p")
    await log.create_topic(topic, 1)
    for i in range(3):
        await log.produce(topic, str(i).encode())
    consumer = log.consumer(unique("pg"), [topic])
    await settle(consumer, partitions=1)
    tp = TopicPartition(topic, 0)
    consumer.seek(tp, 0)
    consumer.pause([tp])
    assert await consumer.poll(10, timeout=1.0) == []
    consumer.resume([tp])
    assert [r.value for r in await poll_until(consumer, 3)] == [b"0", b"1", b"2"]
    await consumer.close()


async def test_start_latest_skips_old_records(log: KafkaLog) -> None:
    old = unique("old")
    await log.create_topic(old, 1)
    await log.produce(old, b"before")
    consumer = log.consumer(unique("lg"), [old], start="latest")
    # "latest" is resolved some time after the join: probe until the member reads something.
    seen: list[Record] = []
    async with asyncio.timeout(PATIENCE):
        while not seen:
            await log.produce(old, b"probe")
            seen = await consumer.poll(10, timeout=0.2)
    await log.produce(old, b"after")
    while seen[-1].value != b"after":
        seen.extend(await poll_until(consumer, 1))
    assert b"before" not in [r.value for r in seen]
    await consumer.close()


async def test_closing_the_log_closes_its_members(log: KafkaLog) -> None:
    consumer = log.consumer(unique("cl"), [unique("t")])
    reader = log.reader()
    await log.close()
    await log.close()
    with pytest.raises(ClosedError):
        await consumer.poll(1, timeout=0)
    with pytest.raises(ClosedError):
        await reader.poll(1, timeout=0)
    with pytest.raises(ClosedError):
        log.reader()
