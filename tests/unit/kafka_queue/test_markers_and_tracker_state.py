"""Marker wire format (checked against the protobuf runtime), MarkersQueue, tracker clock and fail-over."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import (
    AssignedPartition,
    BatchMarker,
    Handout,
    Marker,
    MarkersQueue,
    MarkerType,
    MessageId,
    QueueService,
    QueueSettings,
    Started,
    decode,
    decode_marker,
    encode_batch_marker,
    encode_marker,
    ranges_of,
)
from broker.errors import DecodeError, Timeout
from broker.log import TopicPartition
from broker.message import Record
from broker.testing import wait_until


def go_marker_class() -> Any:
    """kafka-mq-go's kafka_mq_v1.proto, built with the protobuf runtime (the reference encoder)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(
        name=f"kafka_mq_v1_{uuid.uuid4().hex}.proto", package="kmq", syntax="proto3"
    )
    mid = f.message_type.add(name="MessageID")
    mid.field.add(name="partition", number=1, type=5, label=1)  # int32
    mid.field.add(name="offset", number=2, type=3, label=1)  # int64
    marker = f.message_type.add(name="Marker")
    version = marker.enum_type.add(name="Version")
    version.value.add(name="V1", number=0)
    kind = marker.enum_type.add(name="Type")
    for name, number in (("START", 0), ("END", 1), ("KEEPALIVE", 2)):
        kind.value.add(name=name, number=number)
    marker.field.add(name="version", number=1, type=14, label=1, type_name=".kmq.Marker.Version")
    marker.field.add(name="type", number=2, type=14, label=1, type_name=".kmq.Marker.Type")
    marker.field.add(name="message_id", number=3, type=11, label=1, type_name=".kmq.MessageID")
    marker.field.add(name="redeliver_after_ms", number=4, type=4, label=1)  # uint64
    marker.field.add(name="key", number=5, type=12, label=1)
    marker.field.add(name="value", number=6, type=12, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kmq.Marker"))


@pytest.mark.parametrize(
    "marker",
    [
        Marker(MarkerType.START, MessageId(3, 1234567890123), 60000, b"queue-1", b"\x00payload"),
        Marker(MarkerType.END, MessageId(0, 0)),
        Marker(MarkerType.KEEPALIVE, MessageId(7, 42), 500),
        Marker(MarkerType.START, MessageId(-1, -5), 1, b"k", b""),
    ],
)
def test_markers_match_the_go_protobuf_layout(marker: Marker) -> None:
    Go = go_marker_class()
    reference = Go(
        type=int(marker.type),
        message_id={"partition": marker.message_id.partition, "offset": marker.message_id.offset},
        redeliver_after_ms=marker.redeliver_after_ms,
        key=marker.key,
        value=marker.value,
    )
    assert encode_marker(marker) == reference.SerializeToString(deterministic=True)
    assert decode_marker(reference.SerializeToString()) == marker


def test_our_extra_fields_are_skipped_by_a_go_reader() -> None:
    Go = go_marker_class()
    ours = Marker(MarkerType.START, MessageId(1, 2), 1000, b"q", b"v", delivery_attempt=3, headers={"a": "b"})
    parsed = Go.FromString(encode_marker(ours))
    assert (parsed.type, parsed.message_id.offset, parsed.key, parsed.value) == (0, 2, b"q", b"v")
    assert decode_marker(encode_marker(ours)) == ours


@pytest.mark.parametrize("data", [b"\x12", b"\x1a\x05\x08", b"\x08\x05", b"\x10\x09"])
def test_malformed_markers_raise_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_marker(data)


def start(offset: int, after_ms: int = 1000) -> Marker:
    return Marker(MarkerType.START, MessageId(0, offset), after_ms, b"q", b"v")


def test_markers_queue_deadlines_keepalives_and_ends() -> None:
    queue = MarkersQueue()
    queue.add(start(1), "q", marker_offset=10, timestamp=100.0)
    queue.add(start(2), "q", marker_offset=11, timestamp=100.5)
    queue.add(Marker(MarkerType.KEEPALIVE, MessageId(0, 1), 5000), "q", marker_offset=12, timestamp=100.8)
    assert queue.to_redeliver(101.0) == []  # strict: deadline 101.0 is not before 101.0
    assert offsets(queue.to_redeliver(101.6)) == [2]
    assert queue.to_redeliver(101.7) == []  # handed out once per deadline
    assert queue.smallest_offset() == 10
    queue.add(Marker(MarkerType.END, MessageId(0, 1)), "q", marker_offset=13, timestamp=101.0)
    assert queue.smallest_offset() == 11  # the ended head was pruned
    queue.add(Marker(MarkerType.KEEPALIVE, MessageId(0, 1), 5000), "q", marker_offset=14, timestamp=101.0)
    assert ("q", MessageId(0, 1)) not in queue  # a straggler never resurrects a message
    queue.add(start(2), "q", marker_offset=15, timestamp=102.0)  # duplicate START: it takes over
    assert queue.smallest_offset() == 15
    assert offsets(queue.to_redeliver(103.5)) == [2]
    queue.add(Marker(MarkerType.END, MessageId(0, 2)), "q", marker_offset=16, timestamp=104.0)
    assert len(queue) == 0 and queue.smallest_offset() is None and queue.next_deadline() is None


def offsets(expired: list[tuple[Started, list[int]]]) -> list[int]:
    return [o for _, owned in expired for o in owned]


def batch(kind: MarkerType, *ranges: tuple[int, int, int], after_ms: int = 0) -> BatchMarker:
    return decode(encode_batch_marker(kind, ranges, after_ms))  # type: ignore[return-value]


def test_batched_markers_round_trip_and_stay_apart_from_go_markers() -> None:
    marker = BatchMarker(MarkerType.KEEPALIVE, ((0, 0, 499), (3, 1 << 40, (1 << 40) + 7)), 30000)
    data = encode_batch_marker(marker.type, marker.ranges, marker.redeliver_after_ms)
    assert decode(data) == marker
    assert len(data) < 40  # one marker for 508 messages
    assert marker.ids()[:2] == [MessageId(0, 0), MessageId(0, 1)] and len(marker.ids()) == 508
    with pytest.raises(DecodeError):
        decode(encode_batch_marker(MarkerType.END, [(0, 5, 4)]))
    assert ranges_of([(1, 7), (0, 3), (0, 1), (0, 2), (1, 9), (0, 2)]) == [(0, 1, 3), (1, 7, 7), (1, 9, 9)]


@pytest.mark.parametrize("kind", list(MarkerType))
def test_a_go_tracker_refuses_batched_markers_instead_of_reading_them_as_its_own(kind: MarkerType) -> None:
    # kafka-mq-go's tracker decodes every record of the markers topic with the Marker protobuf;
    # on an error it logs "Could not unmarshal marker" and skips the record. A batched START read
    # as a Go Marker was a START without a message id, on which its tracker crashed (nil pointer).
    from google.protobuf.message import DecodeError as ProtobufDecodeError

    Go = go_marker_class()
    for data in (
        encode_batch_marker(kind, [(0, 0, 9)], 1000),
        encode_batch_marker(kind, [(2, 5, 5), (3, 1, 4)], prefetched=True, handout=Handout.HANDED),
    ):
        with pytest.raises(ProtobufDecodeError):
            Go.FromString(data)
    # per-message markers stay Go's own
    go = Go.FromString(encode_marker(Marker(kind, MessageId(4, 77), 1000, b"q", b"v")))
    assert (go.type, go.message_id.partition, go.message_id.offset) == (int(kind), 4, 77)


def test_batched_markers_written_before_the_go_guard_still_decode() -> None:
    # version = 1 and the fields, without the field-0 guard (written by earlier versions).
    old = b"\x08\x01\x10\x01\x20\xe8\x07\x4a\x04\x08\x02\x18\x05\x4a\x06\x08\x03\x10\x01\x18\x04"
    assert decode(old) == BatchMarker(MarkerType.END, ((2, 0, 5), (3, 1, 4)), 1000)
    assert decode(encode_batch_marker(MarkerType.END, [(2, 0, 5), (3, 1, 4)], 1000)) == decode(old)


def test_hand_out_flags_round_trip_and_move_with_keepalives() -> None:
    start = encode_batch_marker(MarkerType.START, [(0, 0, 9)], 1000, prefetched=True)
    mark = encode_batch_marker(MarkerType.KEEPALIVE, [(0, 0, 2)], 1000, handout=Handout.HANDED)
    back = encode_batch_marker(MarkerType.KEEPALIVE, [(0, 2, 2)], 0, handout=Handout.RETURNED)
    assert decode(start) == BatchMarker(MarkerType.START, ((0, 0, 9),), 1000, prefetched=True)
    assert decode(mark) == BatchMarker(MarkerType.KEEPALIVE, ((0, 0, 2),), 1000, handout=Handout.HANDED)
    queue = MarkersQueue()
    queue.add(decode(start), "q", 0, 100.0)
    queue.add(decode(mark), "q", 1, 100.5)
    queue.add(decode(back), "q", 2, 100.6)
    queue.add(batch(MarkerType.KEEPALIVE, (0, 0, 9), after_ms=1000), "q", 3, 100.7)  # plain: keeps the state
    handed = sorted(o for entry, owned in queue.to_redeliver(200.0) if entry.handed for o in owned)
    assert handed == [0, 1]
    old = MarkersQueue()  # a START without the flag (older writers): every message counts
    old.add(batch(MarkerType.START, (0, 0, 3), after_ms=1000), "q", 0, 100.0)
    assert all(entry.handed for entry, _ in old.to_redeliver(200.0))


def test_markers_queue_batched_starts_split_on_partial_keepalives() -> None:
    queue = MarkersQueue()
    queue.add(batch(MarkerType.START, (0, 100, 109), after_ms=1000), "q", marker_offset=5, timestamp=10.0)
    queue.add(batch(MarkerType.START, (0, 100, 104), after_ms=1000), "other", marker_offset=6, timestamp=10.0)
    assert len(queue) == 15  # another queue (subscription) starting the same offsets is tracked apart
    queue.add(batch(MarkerType.END, (0, 100, 101), (0, 108, 108)), "q", marker_offset=7, timestamp=10.1)
    queue.add(batch(MarkerType.KEEPALIVE, (0, 103, 104), after_ms=5000), "q", marker_offset=8, timestamp=10.2)
    assert ("q", MessageId(0, 101)) not in queue and ("q", MessageId(0, 102)) in queue
    expired = queue.to_redeliver(11.5)
    assert sorted(offsets(expired)) == [100, 101, 102, 102, 103, 104, 105, 106, 107, 109]
    assert {e.queue_id for e, _ in expired} == {"q", "other"}
    assert queue.smallest_offset() == 5  # nothing ended the first START's messages
    assert offsets(queue.to_redeliver(15.3)) == [103, 104]  # their own deadline (10.2 + 5)
    queue.add(batch(MarkerType.END, (0, 100, 109)), "q", marker_offset=9, timestamp=16.0)
    assert queue.smallest_offset() == 6 and len(queue) == 5
    queue.add(
        batch(MarkerType.START, (0, 100, 104), after_ms=1000), "other", marker_offset=10, timestamp=17.0
    )
    assert queue.smallest_offset() == 10 and len(queue) == 5  # read again: the new START owns them
    assert offsets(queue.to_redeliver(17.5)) == []
    queue.add(
        batch(MarkerType.KEEPALIVE, (0, 100, 104), after_ms=9000), "other", marker_offset=11, timestamp=17.2
    )
    assert offsets(queue.to_redeliver(18.5)) == [] and queue.next_deadline() == 26.2
    queue.add(batch(MarkerType.END, (0, 100, 104)), "other", marker_offset=12, timestamp=18.0)
    assert len(queue) == 0 and queue.smallest_offset() is None and queue.next_deadline() is None


def test_partition_clock_follows_marker_time_then_local_time() -> None:
    local = [1000.0]
    config = QueueSettings("m", "mk", use_now_if_no_marker_seen=5.0)
    state = AssignedPartition(TopicPartition("mk", 0), config, catch_up_to=0, monotonic=lambda: local[0])
    assert state.now() is None
    record = Record("mk", 0, 0, encode_marker(start(1)), key="q", publish_time=50.0)
    state.add(record)
    local[0] += 3
    assert state.now() == 50.0  # markers seen recently: their time, whatever the local clock says
    local[0] += 7
    assert state.now() == 60.0  # none for a while: marker time plus local elapsed time
    assert state.commit_offset() == 0
    state.add(
        Record("mk", 0, 1, encode_marker(Marker(MarkerType.END, MessageId(0, 1))), key="q", publish_time=61)
    )
    assert state.commit_offset() == 2  # nothing in progress: the read position


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://tracker-{uuid.uuid4().hex}")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


def fast(**overrides: Any) -> QueueSettings:
    values: dict[str, Any] = dict(
        message_topic="q",
        marker_topic="q-markers",
        redelivery_timeout=0.3,
        next_message_timeout=0.05,
        use_now_if_no_marker_seen=0.05,
        tracker_poll_interval=0.02,
        num_offsets_per_commit=1,
    )
    values.update(overrides)
    return QueueSettings(**values)


async def test_a_restarted_tracker_does_not_redeliver_while_replaying(log: InmemLog) -> None:
    service = QueueService(log, fast(redelivery_timeout=5.0))
    await service.create_topics(partitions=2)
    async with service.consumer("r") as consumer:
        async with service.tracker():
            for i in range(10):
                await service.producer("r").send(str(i).encode())
            messages = [await consumer.receive(timeout=2) for _ in range(10)]
            await asyncio.sleep(0.1)
        # While no tracker runs, every message gets acked; a new tracker replays START then END.
        await broker.ack_all(messages)
        await consumer.flush()
        async with service.tracker() as tracker:
            await wait_until(
                lambda: (
                    bool(tracker.partitions)
                    and not tracker.in_progress
                    and all(s.caught_up for s in tracker.partitions.values())
                ),
                timeout=3,
            )
        assert tracker.metrics.counts["redelivered"] == 0
        with pytest.raises(Timeout):
            await consumer.receive(timeout=0.5)


async def test_two_trackers_one_killed_still_redeliver_everything(log: InmemLog) -> None:
    service = QueueService(log, fast())
    await service.create_topics(partitions=4)
    first, second = service.tracker(), service.tracker()
    first.start()
    second.start()
    async with service.consumer("w") as consumer:
        for i in range(40):
            await service.producer("w").send(str(i).encode())
        await asyncio.sleep(0.2)
        await first.close()  # "killed": its partitions move to the second tracker
        seen: set[int] = set()
        async with asyncio.timeout(10):
            while len(seen) < 40:
                message = await consumer.receive(timeout=5)
                if message.delivery_attempt == 1:
                    consumer.interrupt(message)  # the worker dies: it must be redelivered
                    continue
                seen.add(int(message.data))
                await message.ack()
    await second.close()
    assert seen == set(range(40))
