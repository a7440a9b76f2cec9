"""The batched-marker consumer on the in-memory log: its pipeline under failure, merged ENDs, retention."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import MarkerType, QueueService, QueueSettings, decode
from broker.backends.kafka.queue.markers import BatchMarker, Handout
from broker.errors import Timeout
from broker.log import TopicPartition
from broker.testing import wait_until


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://pipeline-{uuid.uuid4().hex}")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


def config(**overrides: Any) -> QueueSettings:
    values: dict[str, Any] = {
        "message_topic": "q",
        "marker_topic": "q-markers",
        "redelivery_timeout": 0.5,
        "next_message_timeout": 0.05,
        "use_now_if_no_marker_seen": 0.05,
        "tracker_poll_interval": 0.02,
        "num_offsets_per_commit": 10,
    }
    values.update(overrides)
    return QueueSettings(**values)


async def service_with(log: InmemLog, count: int, **overrides: Any) -> QueueService:
    """A one-partition queue service whose queue "jobs" holds the messages b"0" .. b"count-1"."""
    service = QueueService(log, config(**overrides))
    await service.create_topics(partitions=1)
    producer = service.producer("jobs")
    for i in range(count):
        producer.send_async(str(i).encode())
    await producer.flush()
    return service


async def markers(log: InmemLog) -> list[Any]:
    reader = log.reader()
    reader.assign({TopicPartition("q-markers", 0): 0})
    _, high = await log.watermarks(TopicPartition("q-markers", 0))
    out: list[Any] = []
    while len(out) < high:
        out += [decode(r.value or b"") for r in await reader.poll(1000, 1.0)]
    await reader.close()
    return out


async def test_a_failed_start_is_never_committed_past(log: InmemLog) -> None:
    """The START of one batch fails while later batches are in flight: nothing is lost or doubled."""
    service = await service_with(log, 200, max_messages_per_poll=7, batches_in_flight=4)
    send = log.send
    starts = 0

    def failing_send(topic: str, value: bytes | None, **kw: Any) -> Awaitable[tuple[TopicPartition, int]]:
        nonlocal starts
        if topic == "q-markers" and value is not None and decode(value).type is MarkerType.START:
            starts += 1
            if starts in (3, 9):  # the broker refuses two STARTs
                loop = asyncio.get_running_loop()
                future: asyncio.Future[tuple[TopicPartition, int]] = loop.create_future()
                future.set_exception(ConnectionError("broker gone"))
                return future
        return send(topic, value, **kw)

    log.send = failing_send  # type: ignore[method-assign]
    received: Counter[int] = Counter()
    async with service.tracker(), service.consumer("jobs") as consumer:
        async with asyncio.timeout(20):
            while len(received) < 200:
                message = await consumer.receive(timeout=5)
                received[int(message.data)] += 1
                await message.ack()
        with pytest.raises(Timeout):  # nothing comes back: every batch was started exactly once
            await consumer.receive(timeout=1.5)
    assert starts >= 9
    assert set(received) == set(range(200)) and max(received.values()) == 1


async def test_acks_of_one_pass_share_one_end_marker(log: InmemLog) -> None:
    service = await service_with(log, 100, max_messages_per_poll=100)
    async with service.consumer("jobs") as consumer:
        got = [await consumer.receive(timeout=5) for _ in range(100)]
        for message in got:  # one by one, as a handler would
            await message.ack()
        await consumer.flush()
    written = await markers(log)
    # START (prefetched), hand-out marks written ahead of receiving, one END for the pass
    start, *marks, end = written
    assert isinstance(start, BatchMarker) and start.type is MarkerType.START and start.prefetched
    assert isinstance(end, BatchMarker) and end.type is MarkerType.END and end.ranges == start.ranges
    assert marks and all(isinstance(m, BatchMarker) and m.handout is Handout.HANDED for m in marks)
    marked = sorted(o for m in marks for p, first, last in m.ranges for o in range(first, last + 1))
    assert marked == sorted(o for p, first, last in start.ranges for o in range(first, last + 1))
    assert service.metrics.counts["acked"] == 100


async def test_hand_out_marks_keep_ahead_of_a_fast_reader_within_the_first_batch(log: InmemLog) -> None:
    """Marks written 20 ms apart while the reader takes a 1,000-message batch at once: the lead grows.

    A batch's lead is first chosen before anything is known of the reader's pace (16 messages); a
    reader waiting for every mark of such a batch would take 16 messages per marker round trip
    (about 1,200 a second on a broker whose marker write takes 13 ms) until the next batch.
    """
    service = await service_with(log, 1000, max_messages_per_poll=1000)
    send = log.send
    marks_written = 0

    def slow_marker_send(topic: str, value: bytes | None, **kw: Any) -> Awaitable[tuple[TopicPartition, int]]:
        nonlocal marks_written
        if topic != "q-markers":
            return send(topic, value, **kw)
        marker = decode(value or b"")
        if isinstance(marker, BatchMarker) and marker.handout is Handout.HANDED:
            marks_written += 1

        async def later() -> tuple[TopicPartition, int]:
            await asyncio.sleep(0.02)
            return await send(topic, value, **kw)

        return asyncio.ensure_future(later())

    log.send = slow_marker_send  # type: ignore[method-assign]
    async with service.consumer("jobs") as consumer:
        got = [await consumer.receive(timeout=5) for _ in range(1000)]
        await broker.ack_all(got)
        await consumer.flush()
    assert sorted(int(m.data) for m in got) == list(range(1000))
    assert marks_written <= 12, f"{marks_written} hand-out marks for one batch of 1,000 messages"


async def test_messages_gone_from_the_log_are_ended_not_retried_forever(log: InmemLog) -> None:
    service = await service_with(log, 10)
    async with service.tracker() as tracker, service.consumer("jobs") as consumer:
        got = [await consumer.receive(timeout=5) for _ in range(10)]
        await broker.ack_all(got[5:])
        for message in got[:5]:
            consumer.interrupt(message)  # the worker dies holding five messages
        # Retention deletes the first three records before their redelivery deadline.
        part = log.broker.topics["q"].partitions[0]
        del part.values[:3], part.keys[:3], part.attributes[:3], part.times[:3]
        part.base = 3
        again = [await consumer.receive(timeout=5) for _ in range(2)]
        assert sorted(m.data for m in again) == [b"3", b"4"]
        assert all(m.delivery_attempt == 2 for m in again)
        await broker.ack_all(again)
        await consumer.flush()
        await wait_until(lambda: tracker.in_progress == 0, 5)
        assert service.metrics.counts["unrecoverable"] == 3
        with pytest.raises(Timeout):
            await consumer.receive(timeout=1.2)


async def test_the_receive_buffer_holds_no_more_than_its_capacity(log: InmemLog) -> None:
    service = await service_with(log, 60, receive_buffer_capacity=5, max_messages_per_poll=3)
    async with service.consumer("jobs") as consumer:
        first = await consumer.receive(timeout=5)
        await asyncio.sleep(0.3)  # the loop fills what it may, then waits
        assert len(consumer._buffer) <= 5
        # Started ahead of the buffer: at most the batches in flight (4 x 3), never the whole topic.
        assert service.metrics.counts["received"] <= 1 + 5 + 4 * 3
        rest = [first, *[await consumer.receive(timeout=5) for _ in range(59)]]
        assert sorted(int(m.data) for m in rest) == list(range(60))
        await broker.ack_all(rest)


async def test_one_held_message_does_not_keep_every_later_batch(log: InmemLog) -> None:
    service = await service_with(log, 400, max_messages_per_poll=5, redelivery_timeout=0.4)
    async with service.tracker(), service.consumer("jobs") as consumer:  # keeps received messages alive
        held = await consumer.receive(timeout=5)
        for _ in range(399):
            await (await consumer.receive(timeout=5)).ack()
        assert len(consumer._handed) <= 33  # not the 80 batches handed out since
        await asyncio.sleep(1.0)  # two redelivery timeouts: the held message is still kept alive
        with pytest.raises(Timeout):
            await consumer.receive(timeout=0.1)
        await held.ack()
