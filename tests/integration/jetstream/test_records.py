"""Records: consumer groups over stream sequences, and ordered replays."""

from __future__ import annotations

import broker
from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.driver.testing.harness import collect_records
from tests.integration.jetstream.helpers import unique


async def _publish(backend: JetStreamBackend, topic: str, count: int) -> None:
    await (
        backend.publisher()
        .topic(topic)
        .batch_publish(*(OutboundMessage(b"%d" % i, key=f"k{i % 3}") for i in range(count)))
    )


async def test_replay_reads_in_order_from_a_sequence(backend: JetStreamBackend) -> None:
    topic = unique("replay")
    await _publish(backend, topic, 30)
    async with backend.replay(topic, start_sequence=11, batch_size=7) as replay:
        records = await collect_records(replay, 20, 5)
        assert await replay.next_batch(timeout=0.3) == []
    assert [r.offset for r in records] == list(range(11, 31))
    assert [r.value for r in records] == [b"%d" % i for i in range(10, 30)]
    assert records[0].key == "k1" and records[0].partition == 0 and records[0].topic == topic
    await records[-1].ack()  # nothing to commit in a replay


async def test_replay_carries_on_when_the_server_loses_its_consumer(backend: JetStreamBackend) -> None:
    topic = unique("replay-lost")
    await _publish(backend, topic, 50)
    async with backend.replay(topic, batch_size=10) as replay:
        first = await collect_records(replay, 15, 5)  # 16..20 wait in the buffer
        engine = replay._engine
        assert engine.target is not None
        jsm = backend.connection.jsm
        assert jsm is not None
        await jsm.delete_consumer(engine.target.stream, engine.target.consumer)
        rest = await collect_records(replay, 35, 10)
        assert await replay.next_batch(timeout=0.3) == []
    assert [r.offset for r in first + rest] == list(range(1, 51))


async def test_group_commits_and_starts_where_asked(backend: JetStreamBackend) -> None:
    topic = unique("group")
    await _publish(backend, topic, 20)
    async with backend.batched_records(topic, "g", batch_size=8) as batches:
        batch: list[broker.Record] = []
        while len(batch) < 8:  # a batch is whatever had come: the rest follow in the next ones
            more = await batches.next_batch(timeout=5)
            assert 0 < len(more) <= 8, f"20 records wait; a batch of {len(more)} after {len(batch)}"
            batch += more
        assert [r.offset for r in batch] == list(range(1, len(batch) + 1))
        await batch[4].ack()  # commits offsets 1..5
    async with backend.records(topic, "g") as records:
        again = await collect_records(records, 15, 5)
        await broker.commit_highest_offsets(again)
    assert [r.offset for r in again] == list(range(6, 21))
    async with backend.records(topic, "late", start_sequence=18) as late:
        tail = await collect_records(late, 3, 5)
    assert [r.value for r in tail] == [b"17", b"18", b"19"]
