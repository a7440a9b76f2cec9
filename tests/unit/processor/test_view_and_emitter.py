"""Views (recover, follow, read, states, reconnect) and emitters, on the in-memory log."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import pytest

from broker.backends.inmem import InmemLog
from broker.backends.kafka.processor import (
    Context,
    Emitter,
    EmitterClosed,
    PartitionerMismatch,
    Processor,
    TableNotReady,
    View,
    ViewState,
    define_group,
    input,
    lmdb_storage,
    persist,
)
from broker.backends.kafka.processor.storage import Storage
from broker.driver.partitioning import partitioner_by_name
from broker.errors import PublishError
from broker.log import TopicPartition
from broker.testing import wait_until
from tests.unit.processor.support import (
    FlakyLog,
    as_log,
    inmem_backend,
    murmur2,
    put,
    table_log,  # noqa: F401  (the ``log`` fixture)
)


async def test_a_view_recovers_then_follows_the_table(log: InmemLog) -> None:
    for i in range(30):
        await put(log, f"k{i:02d}", str(i).encode())
    states: list[ViewState] = []
    view = View(log, "table", "int64", on_state_change=states.append)
    with pytest.raises(TableNotReady):
        view.get("k01")
    async with view:
        await view.wait_running(5)
        assert view.recovered
        assert view.get("k07") == 7 and view.has("k07") and not view.has("nope") and view.get("nope") is None
        assert [k for k, _ in view.iterate()] == [f"k{i:02d}" for i in range(30)]
        assert list(view.iterate("k10", "k13")) == [("k10", 10), ("k11", 11), ("k12", 12)]
        assert dict(view.iterate(prefix="k2")) == {f"k2{i}": 20 + i for i in range(10)}
        await put(log, "k07", b"700")
        await put(log, "k08", None)
        await put(log, "new", b"1")
        await wait_until(lambda: view.get("k07") == 700 and not view.has("k08") and view.get("new") == 1, 5)
        view.evict("new")
        assert view.get("new") is None
        assert view.partition_of("k07") == murmur2(b"k07", 3)
        stats = view.stats()
        assert set(stats.partitions) == {0, 1, 2}
        assert sum(p.recovery.hwm for p in stats.partitions.values()) == 30
    assert states[:4] == [ViewState.INITIALIZING, ViewState.CONNECTING, ViewState.CATCHUP, ViewState.RUNNING]
    assert states[-1] == ViewState.IDLE
    assert "View 'table'" in repr(view)


async def test_a_persistent_view_recovers_only_the_tail(log: InmemLog, tmp_path: Path) -> None:
    for i in range(20):
        await put(log, f"k{i}", b"1")
    async with View(log, "table", "int64", storage=lmdb_storage(tmp_path)) as first:
        await first.wait_running(5)
    for i in range(5):
        await put(log, f"k{i}", b"2")
    async with View(log, "table", "int64", storage=lmdb_storage(tmp_path)) as second:
        await second.wait_running(5)
        recovered = sum(p.recovery.hwm - p.recovery.start_offset for p in second.stats().partitions.values())
        assert recovered == 5
        assert [second.get(f"k{i}") for i in range(7)] == [2, 2, 2, 2, 2, 1, 1]


async def test_a_view_reconnects_after_broker_errors(log: InmemLog) -> None:
    await put(log, "a", b"1")
    flaky = FlakyLog(log)
    flaky.broken_reads = 2
    states: list[ViewState] = []
    view = View(as_log(flaky), "table", "int64", auto_reconnect=True, backoff=(0.01, 0.02))
    view.observe(states.append)
    async with view:
        await view.wait_running(5)
        assert view.get("a") == 1
    assert states.count(ViewState.CONNECTING) >= 2


async def test_without_auto_reconnect_a_view_stops_on_errors(log: InmemLog) -> None:
    flaky = FlakyLog(log)
    flaky.broken_reads = 1
    view = View(as_log(flaky), "table", "int64")
    view.start()
    with pytest.raises(ConnectionError):
        await view.wait_running(5)
    await view.stop()


async def test_emitter_emits_partitioned_with_headers(log: InmemLog) -> None:
    async with Emitter(log, "clicks", "str", headers={"app": "x"}, create_partitions=4) as emitter:
        futures = [emitter.emit(f"user{i}", "click", headers={"n": str(i)}) for i in range(10)]
        tp, offset = await emitter.emit_sync("user0", None)
        assert tp == TopicPartition("clicks", murmur2(b"user0", 4))
        for i, future in enumerate(futures):
            placed, _ = await future
            assert placed.partition == murmur2(f"user{i}".encode(), 4)
    with pytest.raises(EmitterClosed):
        emitter.emit("k", "v")
    reader = log.reader()
    reader.assign({tp: offset})
    records = await reader.poll(1, 1)
    assert records[0].value is None and dict(records[0].attributes) == {"app": "x"}
    await reader.close()


async def test_emit_before_start_and_failed_deliveries(log: InmemLog) -> None:
    flaky = FlakyLog(log)
    emitter = Emitter(as_log(flaky), "events", "str")
    first = emitter.emit("a", "1")  # partition count learned on the way
    second = emitter.emit("b", "2")
    assert (await first)[1] == 0 and (await second)[1] == 1
    flaky.fail_topics.add("events")
    emitter.emit("c", "3")
    with pytest.raises(PublishError, match="injected"):
        await emitter.finish()
    assert "finished" in repr(emitter)
    await emitter.close()


async def put_with(log: InmemLog, partitioner: str, keys: int = 20) -> None:
    place = partitioner_by_name(partitioner) if partitioner != "crc32" else lambda k, n: zlib.crc32(k) % n
    for i in range(keys):
        key = f"user-{i}"
        await log.produce("table", str(i).encode(), key=key, partition=place(key.encode(), 3))


@pytest.mark.parametrize("writer", ["fnv1a", "crc32"])
async def test_a_view_over_a_table_written_with_another_partitioner_names_the_one_that_fits(
    log: InmemLog, writer: str
) -> None:
    # A goka table (FNV-1a) read with murmur2 found 8 of 20 keys, silently: now it is an error.
    await put_with(log, writer)
    view = View(log, "table", "int64")
    view.start()
    with pytest.raises(PartitionerMismatch, match=f"fit {writer}") as raised:
        await view.wait_running(5)
    assert "murmur2" in str(raised.value)
    await view.stop()


async def test_a_view_with_the_writers_partitioner_finds_every_key(log: InmemLog) -> None:
    await put_with(log, "fnv1a")
    async with View(log, "table", "int64", partitioner="fnv1a") as view:
        await view.wait_running(5)
        assert [view.get(f"user-{i}") for i in range(20)] == list(range(20))


async def test_recovery_into_memory_says_that_every_restart_reads_the_table_again(
    log: InmemLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(12):
        await put(log, f"k{i}", b"%d" % i)
    with caplog.at_level(logging.WARNING, logger="broker.backends.kafka.processor"):
        async with View(log, "table", "int64") as view:
            await view.wait_running(5)
    (warning,) = [r.getMessage() for r in caplog.records if "in memory" in r.getMessage()]
    assert "view 'table'" in warning and "12 records" in warning and "lmdb_storage" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="broker.backends.kafka.processor"):
        async with View(log, "table", "int64", storage=lmdb_storage(tmp_path)) as view:
            await view.wait_running(5)
    assert not [r for r in caplog.records if "in memory" in r.getMessage()], "on disk: no warning"


def _count(ctx: Context, msg: object) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


async def test_a_processor_recovering_into_memory_says_that_every_restart_reads_the_table_again(
    log: InmemLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await log.create_topic("in", 3)
    for i in range(12):
        await log.produce("in", b"x", key=f"k{i}")
    graph = define_group("counts", input("in", "str", _count), persist("int64"))
    async with Processor(log, graph) as first:  # fills counts-table: nothing to recover yet
        await wait_until(lambda: all(first.get(f"k{i}") == 1 for i in range(12)), 5)
    assert not [r for r in caplog.records if "in memory" in r.getMessage()]
    written = sum([(await log.watermarks(TopicPartition("counts-table", p)))[1] for p in range(3)])
    assert written >= 12
    with caplog.at_level(logging.WARNING, logger="broker.backends.kafka.processor"):
        async with Processor(log, graph) as proc:
            await wait_until(lambda: proc.recovered, 5)
    (warning,) = [r.getMessage() for r in caplog.records if "in memory" in r.getMessage()]
    assert "processor 'counts'" in warning and "counts-table" in warning
    assert f"{written} records from the beginning" in warning and "every restart" in warning
    assert "lmdb_storage" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="broker.backends.kafka.processor"):
        # Recovered ahead, the tables are read once; the assignment reads only their tail: one warning.
        async with Processor(log, graph, recover_ahead=True) as proc:
            await wait_until(lambda: proc.recovered, 5)
    (warning,) = [r.getMessage() for r in caplog.records if "in memory" in r.getMessage()]
    assert "processor 'counts'" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="broker.backends.kafka.processor"):
        async with Processor(log, graph, storage=lmdb_storage(tmp_path)) as proc:
            await wait_until(lambda: proc.recovered, 5)
    assert not [r for r in caplog.records if "in memory" in r.getMessage()], "on disk: no warning"


async def test_the_update_callback_sees_recovery_and_catch_up(log: InmemLog) -> None:
    seen: list[tuple[int, str, bytes | None]] = []

    def doubled(storage: Storage, partition: int, key: str, value: bytes | None) -> None:
        seen.append((partition, key, value))
        if value is None:
            storage.delete(key)
        else:
            storage.set(key, str(int(value) * 2).encode())

    for i in range(6):
        await put(log, f"k{i}", b"%d" % i)
    async with View(log, "table", "int64", update_callback=doubled) as view:
        await view.wait_running(5)
        assert [view.get(f"k{i}") for i in range(6)] == [0, 2, 4, 6, 8, 10]  # recovery went through it
        await put(log, "k1", b"50")
        await put(log, "k2", None)
        await wait_until(lambda: view.get("k1") == 100 and not view.has("k2"), 5)  # so did catch-up
    assert ("k2" in {k for _, k, v in seen if v is None}) and len(seen) == 8
    assert all(p == murmur2(k.encode(), 3) for p, k, _ in seen), "called with the record's partition"


async def test_a_store_ahead_of_a_recreated_topic_is_dropped_and_recovered(
    log: InmemLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(12):
        await put(log, f"old{i}", b"%d" % i)
    async with View(log, "table", "int64", storage=lmdb_storage(tmp_path)) as view:
        await view.wait_running(5)
        assert view.get("old11") == 11
    # The topic is recreated (a new broker here): 3 records, where the store read up to 12.
    async with inmem_backend() as backend:
        fresh = backend.log()
        await fresh.create_topic("table", 3)
        for i in range(3):
            await fresh.produce("table", b"%d" % (100 + i), key=f"new{i}", partition=murmur2(b"new%d" % i, 3))
        with caplog.at_level(logging.WARNING, logger="broker.backends.kafka.processor"):
            async with View(fresh, "table", "int64", storage=lmdb_storage(tmp_path)) as view:
                await view.wait_running(5)
                assert dict(view.iterate()) == {"new0": 100, "new1": 101, "new2": 102}, "old state kept"
    assert any("recreated" in r.getMessage() for r in caplog.records)


class _Retained(FlakyLog):
    """The in-memory log, but its table partitions start at ``low`` (older records deleted by retention)."""

    low = 0

    async def watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        _, high = await self.inner.watermarks(partition)
        return self.low, high


async def test_a_store_behind_the_oldest_offset_resumes_there_and_says_what_is_missing(
    log: InmemLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await log.create_topic("one", 1)
    for i in range(2):
        await log.produce("one", b"%d" % i, key=f"k{i}", partition=0)
    async with View(log, "one", "int64", storage=lmdb_storage(tmp_path)) as view:
        await view.wait_running(5)  # the store has read offsets 0..1
    for i in range(2, 10):
        await log.produce("one", b"%d" % i, key=f"k{i}", partition=0)
    retained = _Retained(log)
    retained.low = 5  # offsets 2..4 are gone
    with caplog.at_level(logging.WARNING, logger="broker.backends.kafka.processor"):
        async with View(as_log(retained), "one", "int64", storage=lmdb_storage(tmp_path)) as view:
            await view.wait_running(5)
            assert dict(view.iterate()) == {f"k{i}": i for i in (0, 1, 5, 6, 7, 8, 9)}
    (warning,) = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
    assert "records 2..4" in warning
