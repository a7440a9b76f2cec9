"""publish_concurrently, ack_all / nack_all, commit_highest_offsets, grouping."""

from __future__ import annotations

import asyncio

import pytest

import broker
from broker import adapt
from broker.errors import PublishError
from broker.message import Message, OutboundMessage, Record
from tests.unit.scripted import RecordingAcker


class SlowTopic:
    name = "slow"

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.published: list[bytes] = []
        self.in_flight = 0
        self.peak = 0
        self.fail_on = fail_on
        self.cancelled = 0

    async def publish(self, message: OutboundMessage, *, timeout: float | None = None) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.01 if message.data != self.fail_on else 0)
            if message.data == self.fail_on:
                raise PublishError("rejected")
            self.published.append(message.data)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    async def batch_publish(self, *messages: OutboundMessage, timeout: float | None = None) -> None:
        await adapt.publish_concurrently(self, messages)


async def test_publish_concurrently_publishes_all_within_the_limit() -> None:
    topic = SlowTopic()
    await adapt.publish_concurrently(topic, [OutboundMessage(str(i).encode()) for i in range(50)], limit=8)
    assert sorted(topic.published, key=int) == [str(i).encode() for i in range(50)]
    assert topic.peak == 8


async def test_publish_concurrently_raises_the_first_failure_and_cancels_the_rest() -> None:
    topic = SlowTopic(fail_on=b"3")
    with pytest.raises(PublishError):
        await adapt.publish_concurrently(
            topic, [OutboundMessage(str(i).encode()) for i in range(20)], limit=20
        )
    assert topic.cancelled > 0
    assert b"3" not in topic.published


async def test_ack_all_uses_the_bulk_path_and_falls_back_per_message() -> None:
    plain = RecordingAcker()

    class Bulk(RecordingAcker):
        calls = 0

        async def ack_many(self, messages: list[Message]) -> list[Message]:
            self.calls += 1
            others = []
            for m in messages:
                if m.acker is self:
                    if not m.settled:  # the protocol: ack the pending ones that are ours
                        m._state = 1
                        self.acked.append(m.id)
                else:
                    others.append(m)
            return others

    bulk = Bulk()
    messages = [Message(str(i), b"", acker=bulk if i % 2 else plain) for i in range(6)]
    await messages[1].ack()  # already settled: not acked twice
    await broker.ack_all(messages)
    assert sorted(plain.acked) == ["0", "2", "4"]
    assert sorted(bulk.acked) == ["1", "3", "5"]
    assert bulk.calls == 1
    assert all(m.state == "acked" for m in messages)


async def test_nack_all_nacks_only_unsettled_messages() -> None:
    acker = RecordingAcker()
    messages = [Message(str(i), b"", acker=acker) for i in range(3)]
    await messages[0].ack()
    await broker.nack_all(messages, delay=2.0)
    assert acker.nacked == [("1", 2.0), ("2", 2.0)]


async def test_commit_highest_offsets_commits_once_per_partition() -> None:
    commits: list[tuple[str, int, int]] = []

    class Committer:
        async def commit(self, record: Record) -> None:
            commits.append((record.topic, record.partition, record.offset))

    c = Committer()
    records = [Record("t", p, o, b"", committer=c) for p, o in [(0, 1), (0, 5), (1, 2), (0, 3), (1, 9)]]
    records.append(Record("u", 0, 7, b"", committer=c))
    await broker.commit_highest_offsets(records)
    assert sorted(commits) == [("t", 0, 5), ("t", 1, 9), ("u", 0, 7)]


async def test_a_record_batch_commits_what_it_knows_until_it_changes() -> None:
    from broker.message import RecordBatch

    commits: list[tuple[str, int, int]] = []

    class Committer:
        async def commit(self, record: Record) -> None:
            commits.append((record.topic, record.partition, record.offset))

    c = Committer()
    records = [Record("t", 0, o, b"", committer=c) for o in range(5)]
    # a backend that knows its highest records says so: the batch is not walked
    batch = RecordBatch(records, highest={("t", 0): records[2]})
    await broker.commit_highest_offsets(batch)
    assert commits == [("t", 0, 2)]
    commits.clear()
    batch.append(Record("t", 1, 4, b"", committer=c))  # changed: walked again
    assert batch.highest() is None
    await broker.commit_highest_offsets(batch)
    assert sorted(commits) == [("t", 0, 4), ("t", 1, 4)]
    commits.clear()
    await broker.commit_highest_offsets(RecordBatch(records))  # built by hand: knows nothing
    assert commits == [("t", 0, 4)]


def test_group_by_key_keeps_order_within_groups() -> None:
    items = [Record("t", 0, i, b"", key=k) for i, k in enumerate(["a", "b", None, "a", "b"])]
    groups = adapt.group_by_key(items)
    assert {k: [r.offset for r in v] for k, v in groups.items()} == {"a": [0, 3], "b": [1, 4], "": [2]}
    by_parity = adapt.group_by(items, lambda r: str(r.offset % 2))
    assert [r.offset for r in by_parity["0"]] == [0, 2, 4]
