"""The Kafka consumer core's fetch buffer: which fetched records are stale after a seek, pause or
reassignment (no broker: records stand in for SDK messages; the SDK consumer is never polled)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from broker.backends.kafka.sdk_consumer import ReaderCore
from broker.log import TopicPartition


class SdkMessage:
    """Stands in for a fetched confluent-kafka Message (accessors only)."""

    def __init__(self, partition: int, offset: int) -> None:
        self._p, self._o = partition, offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> None:
        return None


@pytest.fixture
def core() -> Iterator[ReaderCore]:
    reader = ReaderCore({"bootstrap.servers": "127.0.0.1:9"}, name="unit", prefetch=10, close_timeout=1)
    reader.positions = {("t", 0): 0, ("t", 1): 0}  # assigned (the SDK side is not exercised)
    try:
        yield reader
    finally:
        reader.thread.stop()


def handed(core: ReaderCore) -> list[tuple[int, int]]:
    out: Any = core._take(100)
    return [(m.partition(), m.offset()) for m in out]


def test_records_fetched_before_a_seek_are_dropped(core: ReaderCore) -> None:
    before = core._epoch
    core.seek(TopicPartition("t", 0), 50)
    core._accept([SdkMessage(0, 1), SdkMessage(1, 1)], before)
    assert handed(core) == [(1, 1)]


def test_records_fetched_after_a_seek_survive_a_later_pause(core: ReaderCore) -> None:
    # A fetch queued after the seek reads from the new offset: its records are the seek's own,
    # even when another partition is paused while the fetch is in flight.
    core.seek(TopicPartition("t", 0), 50)
    queued = core._epoch
    core.pause([TopicPartition("t", 1)])
    core._accept([SdkMessage(0, 50), SdkMessage(0, 51), SdkMessage(1, 7)], queued)
    assert handed(core) == [(0, 50), (0, 51)]


def test_records_of_an_earlier_assignment_are_dropped_after_reassigning(core: ReaderCore) -> None:
    before = core._epoch
    core.unassign([TopicPartition("t", 0)])
    core.assign({TopicPartition("t", 0): 100})
    core._accept([SdkMessage(0, 3)], before)
    assert handed(core) == []
    core._accept([SdkMessage(0, 100)], core._epoch)
    assert handed(core) == [(0, 100)]
