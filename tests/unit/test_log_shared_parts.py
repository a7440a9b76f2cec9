"""The pieces the in-memory and Kafka logs share: ``partition_slice`` and ``LogBase``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping

import pytest

from broker.backends.inmem.slices import partition_slice
from broker.backends.inmem.store import Partition
from broker.driver.log_base import LogBase
from broker.errors import ClosedError
from broker.log import Log, TopicPartition, with_client_id


def _partition(count: int, base: int = 0) -> Partition:
    part = Partition()
    part.base = base
    for i in range(count):
        part.append(str(i).encode(), f"k{i}", {"i": str(i)}, float(i))
    return part


def test_a_slice_starts_at_the_position_and_stops_at_the_limit() -> None:
    entries, end = partition_slice(_partition(5), 1, 3)
    assert [(offset, value) for offset, value, *_ in entries] == [(1, b"1"), (2, b"2"), (3, b"3")]
    assert end == 4


def test_a_slice_below_the_first_retained_offset_starts_there_and_ends_at_the_high_watermark() -> None:
    entries, end = partition_slice(_partition(3, base=10), 2, 100)
    assert [
        (offset, value, key, dict(attributes), published)
        for offset, value, key, attributes, published in entries
    ] == [
        (10, b"0", "k0", {"i": "0"}, 0.0),
        (11, b"1", "k1", {"i": "1"}, 1.0),
        (12, b"2", "k2", {"i": "2"}, 2.0),
    ]
    assert end == 13


class _Recorded(LogBase):
    closed_message = "the recorded log is closed"

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, dict[str, object]]] = []

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        self._check()
        fields = {"key": key, "partition": partition, "attributes": attributes, "client_id": client_id}
        self.sent.append((topic, value, fields))
        future: asyncio.Future[tuple[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        future.set_result((TopicPartition(topic, partition or 0), len(self.sent) - 1))
        return future

    async def close(self) -> None:
        self._closed = True


async def test_produce_is_send_awaited_with_every_field_passed_on() -> None:
    log = _Recorded()
    assert isinstance(log, Log)  # LogBase derives from the port, whose produce() it inherits
    assert await log.produce("t", b"v", key="k", partition=2, attributes={"a": "b"}, client_id="c") == (
        TopicPartition("t", 2),
        0,
    )
    assert log.sent == [("t", b"v", {"key": "k", "partition": 2, "attributes": {"a": "b"}, "client_id": "c"})]


async def test_calls_after_close_raise_the_logs_closed_error() -> None:
    async with _Recorded() as log:
        await log.produce("t", None)
    with pytest.raises(ClosedError, match="the recorded log is closed"):
        await log.produce("t", None)


async def test_produce_through_a_client_id_sends_with_that_id() -> None:
    log = _Recorded()
    named = with_client_id(log, "svc")
    assert await named.produce("t", b"v", key="k") == (TopicPartition("t", 0), 0)
    assert await named.produce("t", None, client_id="other") == (TopicPartition("t", 0), 1)
    assert [(topic, fields["client_id"]) for topic, _, fields in log.sent] == [("t", "svc"), ("t", "other")]
