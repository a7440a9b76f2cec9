"""``records()`` on Redis: a stream read as a one-partition log.

Offsets are entry ids (``ms * 2**20 + seq``), a group's committed position is the consumer group's
``last-delivered-id`` (a raw redis-py client sees it in ``XINFO GROUPS``), readers start from it, from
an offset, a time or the end, and entries trimmed away before they were read are a counted gap.
"""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as raw_redis

import broker
from broker import OutboundMessage
from broker.backends.redis.backend import RedisBackend
from broker.backends.redis.records import SEQUENCE_BITS, entry_id, offset_of
from broker.driver.devserver import ProcessServer
from broker.errors import ConfigError, ProvisioningError, ReceiveError, UnknownTopic


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _group(client: raw_redis.Redis, stream: str, name: str) -> dict[str, object]:
    for group in await client.xinfo_groups(stream):
        if _text(group["name"]) == name:
            return dict(group)
    raise AssertionError(f"no group {name!r} on {stream!r}")


def test_offsets_order_as_entry_ids_and_map_back_exactly() -> None:
    ids = ["0-1", "1-0", "1-1", "1-1048575", "2-0", "1732841000123-7"]
    offsets = [offset_of(i) for i in ids]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert [entry_id(o) for o in offsets] == ids
    assert offset_of("1732841000123-7") == (1732841000123 << SEQUENCE_BITS) + 7
    with pytest.raises(ReceiveError):
        offset_of(f"5-{1 << SEQUENCE_BITS}")  # beyond the documented sequence bound
    with pytest.raises(ConfigError):
        entry_id(-1)


async def test_commit_is_the_groups_position_and_another_reader_continues_from_it(
    backend: RedisBackend, redis_server: ProcessServer
) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        await (
            backend.publisher()
            .topic("rr-log")
            .batch_publish(*(OutboundMessage(b"%d" % i, key="k", attributes={"i": str(i)}) for i in range(6)))
        )
        ids = [_text(i) for i, _ in await client.xrange("rr-log")]
        async with backend.records("rr-log", "g") as records:
            got = [await records.next_record(timeout=5) for _ in range(4)]
            assert [r.offset for r in got] == [offset_of(i) for i in ids[:4]]
            assert {r.partition for r in got} == {0}
            assert (got[0].value, got[0].key, got[0].attributes) == (b"0", "k", {"i": "0"})
            assert got[0].raw.id == ids[0]
            await got[2].ack()
            await got[1].ack()  # a lower offset: the commit never moves back
        group = await _group(client, "rr-log", "g")
        assert (_text(group["last-delivered-id"]), group["lag"], group["pending"]) == (ids[2], 3, 0)
        assert await backend.backlog("rr-log", "g") == 3
        # another process of the same group continues after the commit
        async with broker.connect(redis_server.url) as other, other.records("rr-log", "g") as again:
            rest = [await again.next_record(timeout=5) for _ in range(3)]
        assert [r.value for r in rest] == [b"3", b"4", b"5"]
        # an entry id beyond the offset mapping is a typed error, never a wrong offset
        await client.xadd("rr-odd", {"data": b"fine"}, id="5-1")
        await client.xadd("rr-odd", {"data": b"x"}, id=f"5-{1 << SEQUENCE_BITS}")
        async with backend.records("rr-odd", "g") as odd:
            assert (await odd.next_record(timeout=5)).value == b"fine"  # what comes before it first
            with pytest.raises(ReceiveError, match="sequence"):
                await odd.next_record(timeout=5)
    finally:
        await client.aclose()


async def test_replay_from_an_offset_a_time_or_the_end(backend: RedisBackend) -> None:
    topic = backend.publisher().topic("rr-replay")
    await topic.batch_publish(*(OutboundMessage(b"%d" % i) for i in range(5)))
    async with backend.records("rr-replay", "first") as records:
        first = [await records.next_record(timeout=5) for _ in range(5)]
    async with backend.records("rr-replay", "seek", start_offset=first[3].offset) as records:
        assert (await records.next_record(timeout=5)).value == b"3"
    assert first[2].publish_time is not None
    async with backend.records("rr-replay", "time", start_time=first[2].publish_time) as records:
        # every entry of that millisecond or later: the batch may share one millisecond
        assert (await records.next_record(timeout=5)).publish_time == first[2].publish_time
    async with backend.batched_records("rr-replay", "tail", start="latest", batch_size=10) as batches:
        assert await batches.next_batch(timeout=0.3) == []
        await topic.publish(OutboundMessage(b"new"))
        assert [r.value for r in await batches.next_batch(timeout=5)] == [b"new"]
    with pytest.raises(ConfigError):
        backend.records(["rr-replay", "rr-other"], "g")  # one stream: one partition


async def test_entries_trimmed_before_they_were_read_are_a_counted_gap(
    backend: RedisBackend, redis_server: ProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        await (
            backend.publisher().topic("rr-gap").batch_publish(*(OutboundMessage(b"%d" % i) for i in range(5)))
        )
        async with backend.records("rr-gap", "g") as records:
            (_, second) = [await records.next_record(timeout=5) for _ in range(2)]
            await second.ack()
        await client.xtrim("rr-gap", maxlen=1, approximate=False)  # "2" and "3" go before the group read them
        caplog.set_level(logging.WARNING, "broker.backends.redis")
        async with backend.records("rr-gap", "g") as records:
            after = await records.next_record(timeout=5)
            assert (after.value, records.lost, records.gaps) == (b"4", 2, 1)
            await after.ack()
            assert await backend.backlog("rr-gap", "g") == 0  # the group's count stays exact past the gap
            await (
                backend.publisher()
                .topic("rr-gap")
                .batch_publish(*(OutboundMessage(b"%d" % i) for i in (5, 6, 7)))
            )
            await client.xdel(
                "rr-gap", next(i for i, fields in await client.xrange("rr-gap") if fields[b"data"] == b"6")
            )
            rest = [await records.next_record(timeout=5) for _ in range(2)]
            # an XDEL in the middle: a gap of unknown size
            assert ([r.value for r in rest], records.lost, records.gaps) == ([b"5", b"7"], 2, 2)
        assert any("2 entries" in r.getMessage() for r in caplog.records), caplog.text
        assert any("some entries" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        await client.aclose()


async def test_records_respect_provision(redis_server: ProcessServer) -> None:
    async with broker.connect(f"{redis_server.url}?provision=verify") as verifying:
        with pytest.raises(ProvisioningError, match="consumer group 'g'"):
            async with verifying.records("rr-missing", "g"):
                pass
    async with broker.connect(f"{redis_server.url}?provision=none") as bare:
        with pytest.raises(UnknownTopic):
            async with bare.records("rr-missing", "g") as records:
                await records.next_record(timeout=1)
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        assert not await client.exists("rr-missing")  # nothing was created
    finally:
        await client.aclose()
