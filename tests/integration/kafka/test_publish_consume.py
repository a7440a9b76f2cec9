"""Publishing and group consumption on a real Kafka-compatible broker (Tansu)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import broker
from broker import OutboundMessage, Record
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.records import KafkaRecordIterator
from broker.driver.partitioning import partition_for
from broker.errors import ClosedError, InvalidAttributes, Timeout
from broker.log import TopicPartition
from tests.integration.kafka.support import unique

PATIENCE = 15.0


async def collect(iterator: KafkaRecordIterator, count: int, *, ack: bool = True) -> list[Record]:
    out: list[Record] = []
    async with asyncio.timeout(PATIENCE):
        while len(out) < count:
            record = await iterator.next_record()
            if ack:
                await record.ack()
            out.append(record)
    return out


async def drain(iterator: KafkaRecordIterator, quiet: float = 1.0) -> list[Record]:
    out: list[Record] = []
    while True:
        try:
            record = await iterator.next_record(timeout=quiet)
        except Timeout:
            return out
        await record.ack()
        out.append(record)


async def wait_for_assignment(*iterators: KafkaRecordIterator, partitions: int) -> list[list[Record]]:
    """Poll every member until each owns something and together they own ``partitions``.

    Returns what each member read meanwhile (unacked).
    """
    taken: list[list[Record]] = [[] for _ in iterators]

    async def poll(index: int, it: KafkaRecordIterator) -> None:
        try:
            taken[index].append(await it.next_record(timeout=0.1))
        except Timeout:
            pass

    async with asyncio.timeout(PATIENCE):
        while True:
            await asyncio.gather(*(poll(i, it) for i, it in enumerate(iterators)))
            owned = [it.assignment() for it in iterators]
            if all(owned) and sum(len(o) for o in owned) == partitions:
                return taken


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(PATIENCE):
        while not condition():  # noqa: ASYNC110 - plain state with no event to wait on
            await asyncio.sleep(0.02)


async def test_round_trip_of_data_key_attributes_and_times(backend: KafkaBackend) -> None:
    topic = unique("rt")
    await backend.admin.create_topic(topic, 3)
    sent = [
        OutboundMessage(b"hello", key="k1", attributes={"a": "1", "trace": "xyz"}),
        OutboundMessage(b"", key=None),
        OutboundMessage("naïve ☃ 東京".encode(), key="ключ", attributes={"lang": "ünï"}),
    ]
    before = time.time()
    async with backend.publisher() as publisher:
        for message in sent:
            await publisher.topic(topic).publish(message)
    async with backend.records(topic, unique("g")) as records:
        got = await collect(records, len(sent))
        assert await drain(records, 0.5) == []
    by_value = {r.value: r for r in got}
    assert set(by_value) == {m.data for m in sent}
    for message in sent:
        record = by_value[message.data]
        assert record.key == message.key
        assert dict(record.attributes) == dict(message.attributes)
        assert record.publish_time is not None and before - 1 <= record.publish_time <= time.time() + 1
        assert record.ingestion_time is not None and record.ingestion_time >= record.publish_time - 1
        assert record.raw is not None
        if message.key is not None:
            assert record.partition == partition_for(message.key.encode(), 3)


async def test_binary_keys_and_header_values_round_trip_byte_exact_with_the_raw_client(
    backend: KafkaBackend,
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
    from confluent_kafka import TopicPartition as SdkPartition

    source, copy = unique("bytes-in"), unique("bytes-out")
    for name in (source, copy):
        await backend.admin.create_topic(name, 1)
    servers = backend.settings.servers
    raw_key, raw_header = b"k\xff\x00\xc3", b"\x00\xfe\xff"
    producer = Producer({"bootstrap.servers": servers})
    producer.produce(source, b"v", raw_key, headers=[("bin", raw_header), ("text", b"plain")])
    producer.flush(10)
    async with backend.records(source, unique("g")) as records:
        (record,) = await collect(records, 1)
    assert record.key == raw_key.decode("utf-8", "surrogateescape")
    # Published again as read: the same bytes reach a raw consumer.
    async with backend.publisher() as publisher:
        again = OutboundMessage(b"v", key=record.key, attributes=record.attributes)
        await publisher.topic(copy).publish(again)
        with pytest.raises(broker.errors.InvalidMessage):  # a surrogate that stands for no byte
            await publisher.topic(copy).publish(OutboundMessage(b"v", key="\ud800"))
    # The log port writes through the same mapping: the same bytes again.
    async with backend.log() as log:
        await log.produce(copy, b"v", key=record.key, attributes=record.attributes)
        with pytest.raises(broker.errors.InvalidMessage):
            await log.produce(copy, b"v", key="\ud800")
    consumer = Consumer({"bootstrap.servers": servers, "group.id": unique("raw")})
    consumer.assign([SdkPartition(copy, 0, OFFSET_BEGINNING)])  # no group join: read it directly
    try:
        copies: list[Any] = []
        deadline = time.monotonic() + PATIENCE
        while len(copies) < 2 and time.monotonic() < deadline:
            message = await asyncio.to_thread(consumer.poll, 0.5)
            if message is not None and message.error() is None:
                copies.append(message)
        assert len(copies) == 2, f"{len(copies)} of the 2 copies reached the raw consumer"
        for message in copies:
            assert message.key() == raw_key
            assert dict(message.headers() or []) == {"bin": raw_header, "text": b"plain"}
    finally:
        await asyncio.to_thread(consumer.close)


async def test_batch_publish_delivers_every_record_once_in_key_order(backend: KafkaBackend) -> None:
    topic = unique("batch")
    await backend.admin.create_topic(topic, 4)
    count = 2000
    messages = [OutboundMessage(f"{i % 10}:{i}".encode(), key=f"k{i % 10}") for i in range(count)]
    async with backend.publisher() as publisher:
        await publisher.topic(topic).batch_publish(*messages)
    seen: list[Record] = []
    async with backend.batched_records(topic, unique("g"), batch_size=300, batch_timeout=0.5) as batches:
        async with asyncio.timeout(PATIENCE):
            while len(seen) < count:
                batch = await batches.next_batch()
                assert len(batch) <= 300
                seen.extend(batch)
                await broker.commit_highest_offsets(batch)
        assert await batches.next_batch(timeout=0.5) == []
    values = Counter(int((r.value or b"").split(b":")[1]) for r in seen)
    assert set(values) == set(range(count)) and max(values.values()) == 1
    for key in range(10):
        order = [int((r.value or b"").split(b":")[1]) for r in seen if r.key == f"k{key}"]
        assert order == sorted(order), f"order of k{key} broken"


async def test_bad_input_raises_before_anything_is_sent(backend: KafkaBackend) -> None:
    topic = unique("bad")
    await backend.admin.create_topic(topic, 1)
    async with backend.publisher() as publisher:
        handle = publisher.topic(topic)
        with pytest.raises(InvalidAttributes):
            await handle.batch_publish(OutboundMessage(b"ok"), OutboundMessage(b"x", attributes={"n": 1}))  # type: ignore[dict-item]
        with pytest.raises(TypeError):
            await handle.publish(OutboundMessage("text"))  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await handle.publish(OutboundMessage(b"x", key=7))  # type: ignore[arg-type]
        await handle.publish(OutboundMessage(b"sentinel"))
    async with backend.records(topic, unique("g")) as records:
        (first,) = await collect(records, 1)
        assert first.value == b"sentinel" and first.offset == 0


async def test_publish_after_close_raises_and_close_is_idempotent(backend: KafkaBackend) -> None:
    publisher = backend.publisher()
    handle = publisher.topic(unique("closed"))
    await publisher.close()
    await publisher.close()
    with pytest.raises(ClosedError):
        await handle.publish(OutboundMessage(b"late"))
    with pytest.raises(ClosedError):
        publisher.topic("other")


async def test_two_members_split_the_partitions_without_duplicates(backend: KafkaBackend) -> None:
    topic = unique("split")
    group = unique("g")
    await backend.admin.create_topic(topic, 4)
    async with backend.records(topic, group) as first, backend.records(topic, group) as second:
        assert await wait_for_assignment(first, second, partitions=4) == [[], []]
        assert first.assignment().isdisjoint(second.assignment())
        count = 200
        async with backend.publisher() as publisher:
            await publisher.topic(topic).batch_publish(
                *(OutboundMessage(str(i).encode(), key=f"key-{i}") for i in range(count))
            )
        seen: dict[str, list[int]] = {"first": [], "second": []}

        async def take(name: str, it: KafkaRecordIterator) -> None:
            while len(seen["first"]) + len(seen["second"]) < count:
                try:
                    record = await it.next_record(timeout=0.2)
                except Timeout:
                    continue
                assert TopicPartition(record.topic, record.partition) in it.assignment()
                await record.ack()
                seen[name].append(int(record.value or b""))

        async with asyncio.timeout(PATIENCE):
            await asyncio.gather(take("first", first), take("second", second))
    everything = seen["first"] + seen["second"]
    assert sorted(everything) == list(range(count)), "records were lost or read twice"
    assert seen["first"] and seen["second"], "one member got all the work"


async def test_commit_and_restart_loses_nothing_and_repeats_nothing(backend: KafkaBackend) -> None:
    topic = unique("restart")
    group = unique("g")
    await backend.admin.create_topic(topic, 3)
    count = 90
    async with backend.publisher() as publisher:
        await publisher.topic(topic).batch_publish(
            *(OutboundMessage(str(i).encode(), key=f"k{i % 9}") for i in range(count))
        )
    async with backend.records(topic, group) as records:
        handled = await collect(records, 40)
        await collect(records, 1, ack=False)  # taken, never acked: read again after the restart
    async with backend.records(topic, group) as records:
        rest = await collect(records, count - 40)
        rest += await drain(records)
    values = Counter(int(r.value or b"") for r in handled + rest)
    assert set(values) == set(range(count)), f"lost: {set(range(count)) - set(values)}"
    assert all(n == 1 for n in values.values()), "an acked record was read again"
    committed = await backend.log().committed(group, [TopicPartition(topic, p) for p in range(3)])
    assert sum(v or 0 for v in committed.values()) == count


async def test_acks_of_a_partition_moved_to_another_member_are_dropped(backend: KafkaBackend) -> None:
    topic = unique("moved")
    group = unique("g")
    log = backend.log()
    await log.create_topic(topic, 2)
    await log.produce(topic, b"zero", partition=0)
    await log.produce(topic, b"one", partition=1)
    first = backend.records(topic, group)
    held = await collect(first, 2, ack=False)
    second = backend.records(topic, group)
    _, read_by_second = await wait_for_assignment(first, second, partitions=2)
    moved = next(r for r in held if TopicPartition(r.topic, r.partition) in second.assignment())
    tp = TopicPartition(topic, moved.partition)
    await moved.ack()  # from a partition this member lost: dropped, not committed with a stale generation
    assert await log.committed(group, [tp]) == {tp: None}
    # The new owner reads it again (at-least-once), and its own ack commits.
    if not read_by_second:
        read_by_second = await collect(second, 1, ack=False)
    (again,) = read_by_second
    assert (again.partition, again.value) == (moved.partition, moved.value)
    await again.ack()
    await second.commit()
    assert await log.committed(group, [tp]) == {tp: 1}
    await first.close()
    await second.close()


async def numbered_topic(backend: KafkaBackend, prefix: str, count: int) -> tuple[str, str, TopicPartition]:
    """A one-partition topic holding the values 0..count-1, a fresh group name, and the partition."""
    topic = unique(prefix)
    await backend.admin.create_topic(topic, 1)
    async with backend.publisher() as publisher:
        await publisher.topic(topic).batch_publish(*(OutboundMessage(str(i).encode()) for i in range(count)))
    return topic, unique("g"), TopicPartition(topic, 0)


async def test_ack_queues_the_commit_and_commit_waits_for_the_broker(backend: KafkaBackend) -> None:
    topic, group, tp = await numbered_topic(backend, "ackq", 5)
    async with backend.records(topic, group) as records:
        taken = await collect(records, 5, ack=False)
        release = threading.Event()
        held = records.core.thread.submit(release.wait, PATIENCE)  # the SDK thread is busy
        async with asyncio.timeout(PATIENCE / 3):
            for record in taken[:3]:
                await record.ack()  # returns with the SDK thread held: the commit is queued
        waiting = asyncio.ensure_future(records.commit())
        await asyncio.sleep(0.3)
        assert not waiting.done(), "commit() returned before the broker had the acks"
        release.set()
        await held
        await waiting
        assert await backend.log().committed(group, [tp]) == {tp: 3}
        await taken[4].ack()  # never read again: close commits it
    assert await backend.log().committed(group, [tp]) == {tp: 5}


async def test_acks_one_at_a_time_are_merged_and_reach_the_broker_without_commit(
    backend: KafkaBackend,
) -> None:
    """The textbook loop (handle, ``await record.ack()``, with an await in the handler) sends at
    most one commit request per COMMIT_INTERVAL, and the broker gets the last ack without any
    ``commit()`` while the consumer keeps running."""
    from broker.backends.kafka.sdk_consumer import COMMIT_INTERVAL

    topic, group, tp = await numbered_topic(backend, "paced", 60)
    async with backend.records(topic, group) as records:
        core = records.core
        requests: list[dict[tuple[str, int], int]] = []
        real = core._commit_async

        def counting(offsets: dict[tuple[str, int], int]) -> None:
            requests.append(dict(offsets))
            real(offsets)

        core._commit_async = counting  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(60):
            record = await records.next_record(timeout=PATIENCE)
            await asyncio.sleep(0.0005)  # the handler awaits something
            await record.ack()
        elapsed = loop.time() - start
        # still consuming (no commit(), no close): the last ack reaches the broker by itself
        async with asyncio.timeout(PATIENCE):
            while (await backend.log().committed(group, [tp]))[tp] != 60:
                await records.next_batch(timeout=0.05)  # the app goes on fetching
    assert requests[-1] == {(topic, 0): 60}
    assert 1 <= len(requests) <= elapsed / COMMIT_INTERVAL + 2, (len(requests), elapsed)
    assert len(requests) < 60
    offsets = [r[(topic, 0)] for r in requests]
    assert offsets == sorted(offsets), "commits never go backwards"


async def test_a_refused_commit_is_sent_again_and_commit_raises_it(
    backend: KafkaBackend, caplog: pytest.LogCaptureFixture
) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as SdkTopicPartition

    topic, group, tp = await numbered_topic(backend, "refused", 3)
    async with backend.records(topic, group) as records:
        taken = await collect(records, 3, ack=False)
        core = records.core
        real = core._commit_sync
        refusals = [2]  # the broker refuses the next two commit requests

        def refusing(offsets: dict[tuple[str, int], int]) -> list[object]:
            if refusals[0]:
                refusals[0] -= 1
                raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "refused by the test"))
            return real(offsets)

        real_async = core._commit_async

        def refusing_async(offsets: dict[tuple[str, int], int]) -> None:
            # the broker's refusal, as the SDK reports an asynchronous commit
            if refusals[0]:
                refusals[0] -= 1
                error = KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "refused by the test")
                core._on_commit(error, [SdkTopicPartition(t, p, o) for (t, p), o in offsets.items()])
                return
            real_async(offsets)

        core._commit_sync = refusing  # type: ignore[method-assign]
        core._commit_async = refusing_async  # type: ignore[method-assign]
        await taken[0].ack()  # queued; its commit is refused in the background and logged
        await until(
            lambda: any("commit of" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)
        )
        with pytest.raises(broker.errors.AckError):
            await records.commit()  # sends it again: refused again, raised
        assert await backend.log().committed(group, [tp]) == {tp: None}
        await records.commit()  # the third request goes through
        assert await backend.log().committed(group, [tp]) == {tp: 1}
        await taken[2].ack()
    assert await backend.log().committed(group, [tp]) == {tp: 3}, "close sends the last ack"


async def test_one_member_reads_several_topics(backend: KafkaBackend) -> None:
    first, second = unique("multi-a"), unique("multi-b")
    for name in (first, second):
        await backend.admin.create_topic(name, 2)
    async with backend.publisher() as publisher:
        await publisher.topic(first).batch_publish(*(OutboundMessage(f"a{i}".encode()) for i in range(10)))
        await publisher.topic(second).batch_publish(*(OutboundMessage(f"b{i}".encode()) for i in range(10)))
    async with backend.records(f"{first},{second}", unique("g")) as records:
        got = await collect(records, 20)
        assert len(records.assignment()) == 4
    assert Counter(r.topic for r in got) == {first: 10, second: 10}
    assert sorted(r.value or b"" for r in got) == sorted(
        [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(10)]
    )


async def test_close_commits_acks_in_flight(backend: KafkaBackend) -> None:
    topic = unique("final")
    group = unique("g")
    await backend.admin.create_topic(topic, 1)
    async with backend.publisher() as publisher:
        await publisher.topic(topic).batch_publish(*(OutboundMessage(str(i).encode()) for i in range(20)))
    records = backend.records(topic, group)
    taken = await collect(records, 12, ack=False)
    acks = [asyncio.ensure_future(r.ack()) for r in taken]  # not awaited before close
    await records.close()
    await asyncio.gather(*acks)
    tp = TopicPartition(topic, 0)
    assert await backend.log().committed(group, [tp]) == {tp: 12}
    async with backend.records(topic, group) as again:
        rest = await collect(again, 8)
        assert await drain(again, 0.5) == []
    assert [int(r.value or b"") for r in rest] == list(range(12, 20))


async def test_close_wakes_a_waiting_consumer_and_cancel_loses_nothing(backend: KafkaBackend) -> None:
    topic = unique("wake")
    await backend.admin.create_topic(topic, 1)
    records = backend.records(topic, unique("g"))
    waiting = asyncio.ensure_future(records.next_record())
    await until(lambda: records.core._inflight is not None)  # the call waits on the broker
    started = time.monotonic()
    await records.close()
    with pytest.raises(ClosedError):
        await waiting
    assert time.monotonic() - started < 2.0
    await records.close()
    with pytest.raises(ClosedError):
        await records.next_record(timeout=0.1)

    async with backend.records(topic, unique("g")) as records:
        pending = asyncio.ensure_future(records.next_record())
        await until(lambda: bool(records.assignment()))  # joined and fetching
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        async with backend.publisher() as publisher:
            await publisher.topic(topic).publish(OutboundMessage(b"after-cancel"))
        (record,) = await collect(records, 1)
        assert record.value == b"after-cancel"


async def test_batches_are_bounded_and_empty_after_the_window(backend: KafkaBackend) -> None:
    topic = unique("window")
    await backend.admin.create_topic(topic, 1)
    async with backend.batched_records(topic, unique("g"), batch_size=7, batch_timeout=0.3) as batches:
        assert await batches.next_batch(timeout=1.5) == []  # joins, nothing there
        async with backend.publisher() as publisher:
            await publisher.topic(topic).batch_publish(*(OutboundMessage(str(i).encode()) for i in range(20)))
        sizes: list[int] = []
        async with asyncio.timeout(PATIENCE):
            while sum(sizes) < 20:
                batch = await batches.next_batch()
                sizes.append(len(batch))
                await broker.commit_highest_offsets(batch)
        assert max(sizes) <= 7
        started = time.monotonic()
        assert await batches.next_batch() == []
        assert 0.25 <= time.monotonic() - started < 2.0


async def test_start_latest_reads_only_new_records(exact_backend: KafkaBackend) -> None:
    topic = unique("latest")
    log = exact_backend.log()
    await log.create_topic(topic, 1)
    for i in range(5):
        await log.produce(topic, f"old-{i}".encode())
    async with exact_backend.records(topic, unique("g"), start="latest") as records:
        # The member resolves "latest" some time after joining; probe until it reads something.
        probes = 0
        async with asyncio.timeout(PATIENCE):
            while True:
                await log.produce(topic, f"probe-{probes}".encode())
                probes += 1
                try:
                    first = await records.next_record(timeout=0.2)
                    break
                except Timeout:
                    continue
        await log.produce(topic, b"new")
        rest = [first]
        async with asyncio.timeout(PATIENCE):
            while rest[-1].value != b"new":
                rest.append(await records.next_record())
    values = [r.value or b"" for r in rest]
    assert not any(v.startswith(b"old") for v in values), values
    assert [r.offset for r in rest] == list(range(rest[0].offset, rest[0].offset + len(rest)))
    assert rest[-1].offset == 5 + probes


async def test_a_default_group_comes_from_the_url(kafka_url: str) -> None:
    async with broker.connect(f"{kafka_url}&group_id=from-url") as backend:
        assert isinstance(backend, KafkaBackend)
        async with backend.records(unique("t")) as records:
            assert records.group == "from-url"
    async with broker.connect(kafka_url) as backend:
        assert isinstance(backend, KafkaBackend)
        with pytest.raises(broker.errors.ConfigError, match="group"):
            backend.records("t")


async def test_a_commit_is_never_queued_behind_the_read_ahead(backend: KafkaBackend) -> None:
    """The SDK runs one call at a time: the read-ahead of the next batch runs after the commit of
    the batch handed out, so ``commit()`` waits for the broker only, not for a fetch as well."""
    topic = unique("order")
    await backend.admin.create_topic(topic, 1)
    async with backend.publisher() as publisher:
        await publisher.topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(300)))
    async with backend.batched_records(topic, unique("g"), batch_size=100) as batches:
        core = batches.core
        events: list[str] = []
        consume, commit_sync, took = core._consume, core._commit_sync, core._took

        def consuming(count: int, wait: float) -> list[object]:
            events.append("consume")
            return consume(count, wait)

        def committing(offsets: dict[tuple[str, int], int]) -> list[object]:
            events.append("commit")
            return commit_sync(offsets)

        def taking(messages: list[object]) -> None:
            events.append("took")
            took(messages)

        core._consume, core._commit_sync, core._took = consuming, committing, taking  # type: ignore[method-assign]
        seen = 0
        while seen < 300:
            batch = await batches.next_batch()
            seen += len(batch)
            await broker.commit_highest_offsets(batch)
            await batches.commit()
    handed = [i for i, event in enumerate(events) if event == "took"]
    assert len(handed) >= 3, events
    for i in handed:
        following = [e for e in events[i + 1 :] if e != "took"]
        assert following[:1] in (["commit"], []), f"a fetch ran before the commit: {events}"
