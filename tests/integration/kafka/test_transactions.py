"""Transactions on Tansu: commit visibility, the abort path, consume-transform-produce."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import broker
from broker import OutboundMessage, Record
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.records import KafkaRecordIterator
from broker.errors import TransactionError
from broker.log import TopicPartition
from tests.integration.kafka.support import TANSU_ABORTED_VISIBLE_BUG, unique

PATIENCE = 15.0


async def read_all(records: KafkaRecordIterator, quiet: float) -> list[Record]:
    """Everything that arrives until nothing did for ``quiet`` seconds."""
    out: list[Record] = []
    while True:
        try:
            out.append(await records.next_record(timeout=quiet))
        except TimeoutError:
            return out


async def test_records_appear_on_commit_and_not_before(backend: KafkaBackend) -> None:
    topic = unique("txn")
    await backend.admin.create_topic(topic, 1)
    async with (
        backend.transactional_publisher() as publisher,
        backend.records(topic, unique("g")) as committed_reader,
        backend.records(topic, unique("g"), isolation_level="read_uncommitted") as dirty_reader,
    ):
        await publisher.begin()
        assert publisher.in_transaction
        await publisher.topic(topic).batch_publish(OutboundMessage(b"t1"), OutboundMessage(b"t2"))
        # Open transaction: hidden from read_committed (the LSO holds), visible to read_uncommitted.
        dirty = [await dirty_reader.next_record(timeout=PATIENCE) for _ in range(2)]
        assert [r.value for r in dirty] == [b"t1", b"t2"]
        assert await read_all(committed_reader, 1.5) == []
        assert await publisher.commit() is True
        assert not publisher.in_transaction
        visible = [await committed_reader.next_record(timeout=PATIENCE) for _ in range(2)]
        assert [r.value for r in visible] == [b"t1", b"t2"]


async def test_abort_then_commit_again_on_the_same_publisher(backend: KafkaBackend) -> None:
    topic = unique("abort")
    await backend.admin.create_topic(topic, 1)
    async with backend.transactional_publisher() as publisher:
        handle = publisher.topic(topic)
        await publisher.begin()
        await handle.publish(OutboundMessage(b"aborted"))
        assert await publisher.abort() is True
        assert not publisher.in_transaction
        await publisher.begin()
        await handle.batch_publish(OutboundMessage(b"c1"), OutboundMessage(b"c2"))
        assert await publisher.commit() is True
    async with backend.records(topic, unique("g")) as records:
        got = await read_all(records, 2.0)
    values = Counter(r.value for r in got)
    # Tansu shows the aborted record too (see the xfail below); the committed ones arrive exactly once.
    assert values[b"c1"] == 1 and values[b"c2"] == 1
    assert set(values) <= {b"aborted", b"c1", b"c2"}


@pytest.mark.xfail(reason=TANSU_ABORTED_VISIBLE_BUG, strict=True)
async def test_aborted_records_are_invisible_to_read_committed(backend: KafkaBackend) -> None:
    topic = unique("hidden")
    await backend.admin.create_topic(topic, 1)
    async with backend.transactional_publisher() as publisher:
        await publisher.begin()
        await publisher.topic(topic).publish(OutboundMessage(b"aborted"))
        assert await publisher.abort() is True
        await publisher.begin()
        await publisher.topic(topic).publish(OutboundMessage(b"committed"))
        assert await publisher.commit() is True
    async with backend.records(topic, unique("g")) as records:
        got = await read_all(records, 2.0)
    assert [r.value for r in got] == [b"committed"]


async def test_consume_transform_produce_commits_offsets_in_the_transaction(backend: KafkaBackend) -> None:
    source, sink = unique("ctp-in"), unique("ctp-out")
    group = unique("ctp")
    await backend.admin.create_topic(source, 3)
    await backend.admin.create_topic(sink, 3)
    count = 90
    async with backend.publisher() as publisher:
        await publisher.topic(source).batch_publish(
            *(OutboundMessage(str(i).encode(), key=f"k{i % 7}") for i in range(count))
        )
    handled = 0
    ends: dict[TopicPartition, int] = {}
    async with (
        backend.batched_records(source, group, batch_size=25, batch_timeout=0.5) as batches,
        backend.transactional_publisher() as publisher,
    ):
        out = publisher.topic(sink)
        async with asyncio.timeout(PATIENCE * 2):
            while handled < count:
                batch = await batches.next_batch()
                if not batch:
                    continue
                await publisher.begin()
                await out.batch_publish(*(OutboundMessage(b"x" + (r.value or b""), key=r.key) for r in batch))
                await publisher.send_offsets(batches, batch)  # no Record.ack(): the transaction commits
                assert await publisher.commit() is True
                handled += len(batch)
                for r in batch:
                    tp = TopicPartition(r.topic, r.partition)
                    ends[tp] = max(ends.get(tp, 0), r.offset + 1)
    committed = await backend.log().committed(group, [TopicPartition(source, p) for p in range(3)])
    assert {tp: v for tp, v in committed.items() if v is not None} == ends
    assert sum(ends.values()) == count
    async with backend.records(sink, unique("check")) as check:
        results = [await check.next_record(timeout=PATIENCE) for _ in range(count)]
        assert await read_all(check, 1.0) == []
    values = Counter(r.value for r in results)
    assert values == Counter(b"x%d" % i for i in range(count))


async def test_misuse_raises_transaction_errors(backend: KafkaBackend) -> None:
    topic = unique("misuse")
    async with backend.transactional_publisher(transactional_id=unique("tid")) as publisher:
        with pytest.raises(TransactionError):
            await publisher.topic(topic).publish(OutboundMessage(b"no-begin"))
        with pytest.raises(TransactionError):
            await publisher.commit()
        with pytest.raises(TransactionError):
            await publisher.abort()
        await publisher.begin()
        with pytest.raises(TransactionError):
            await publisher.begin()
        assert await publisher.abort() is True
    with pytest.raises(broker.errors.ClosedError):
        await publisher.begin()
