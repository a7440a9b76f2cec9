"""goka's monitoring fields and remaining options (issue 34, point 7).

InputStats.delay, TableStats.stalled and .input, PartitionStats.now, the PREPARING state,
Assignment.offsets, update_callback on a processor, stopping a view's state observation,
SimpleBackoff and the view's backoff reset timeout.
"""

from __future__ import annotations

import time

import pytest

import broker
from broker.backends.inmem import InmemLog
from broker.backends.kafka.processor import (
    Assignment,
    Context,
    MemoryStorage,
    Processor,
    SimpleBackoff,
    Storage,
    TableStatus,
    Tester,
    View,
    ViewState,
    define_group,
    input,
    persist,
)
from broker.backends.kafka.processor import table as table_module
from broker.backends.kafka.processor.stats import table_stats
from broker.backends.kafka.processor.table import PartitionTable, mark_running, recover
from broker.testing import wait_until
from tests.unit.processor.support import (
    FlakyLog,
    as_log,
    put,
    table_log,  # noqa: F401 - the ``log`` fixture
)


def count(ctx: Context, _: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


GRAPH = define_group("mon", input("clicks", "str", count), persist("int64"))


async def test_input_delay_and_the_snapshot_time() -> None:
    async with Tester(partitions=1) as tester:
        processor = await tester.processor(GRAPH)
        await tester.consume("clicks", "ann", "x", timestamp=time.time() - 5.0)
        before = time.time()
        stats = await processor.stats()
    part = stats.group[0]
    assert 4.5 <= part.inputs["clicks"].delay <= 30.0
    assert before - 1 <= part.now <= time.time()


async def test_table_input_stats_stalled_and_preparing(log: InmemLog) -> None:
    for key in ("a", "b", "c"):
        await put(log, key, b"1")
    tables = [PartitionTable("table", p, MemoryStorage()) for p in range(3)]
    await recover(as_log(log), tables)
    assert {t.status for t in tables} == {TableStatus.PREPARING}  # recovered, not used yet
    mark_running(tables)
    assert {t.status for t in tables} == {TableStatus.RUNNING}
    read = [table_stats(t) for t in tables]
    assert sum(s.input.count for s in read) == 3 and sum(s.input.bytes for s in read) == 3
    assert not any(s.stalled for s in read)
    # Recovering behind the high watermark, nothing read for STALL_PERIOD: stalled.
    stuck = PartitionTable("table", 0, MemoryStorage(), status=TableStatus.RECOVERING)
    stuck.recovery.offset, stuck.recovery.hwm = 1, 5
    stuck.progress_at = time.time() - table_module.STALL_PERIOD - 1
    assert table_stats(stuck).stalled and table_stats(stuck).input.lag == 4


async def test_a_processor_partition_runs_and_its_table_counts_what_it_read(log: InmemLog) -> None:
    await log.create_topic("clicks", 3)
    graph = define_group("table", input("clicks", "str", count), persist("int64"), table_suffix="")
    for key in ("a", "b"):
        await put(log, key, b"1")
    async with Processor(log, graph) as proc:
        stats = await proc.stats()
    tables = [s.table for s in stats.group.values() if s.table is not None]
    assert {t.status for t in tables} == {TableStatus.RUNNING}
    assert sum(t.input.count for t in tables) == 2


async def test_assignment_offsets_name_where_each_partition_resumes(log: InmemLog) -> None:
    await log.create_topic("clicks", 3)
    seen: list[Assignment] = []
    async with Processor(log, GRAPH, rebalance_callback=seen.append) as proc:
        assert seen[-1].offsets == {0: -1, 1: -1, 2: -1}
        for _ in range(4):
            await log.produce("clicks", b"x", key="ann")
        await wait_until(lambda: proc.get("ann") == 4, 5)
    async with Processor(log, GRAPH, rebalance_callback=seen.append):
        resumed = seen[-1].offsets
    assert sorted(resumed.values()) == [-1, -1, 4]


async def test_update_callback_on_a_processor(log: InmemLog) -> None:
    await log.create_topic("clicks", 3)
    for _ in range(2):
        await log.produce("clicks", b"x", key="ann")
    async with Processor(log, GRAPH) as first:
        await wait_until(lambda: first.get("ann") == 2, 5)
    applied: list[tuple[int, str, bytes | None]] = []

    def tenfold(storage: Storage, partition: int, key: str, value: bytes | None) -> None:
        applied.append((partition, key, value))
        storage.set(key, str(int(value or b"0") * 10).encode())

    async with Processor(log, GRAPH, update_callback=tenfold) as again:
        assert again.get("ann") == 20  # recovery went through the callback
    assert applied and applied[-1][1:] == ("ann", b"2")


async def test_observing_a_view_can_be_stopped(log: InmemLog) -> None:
    await put(log, "a", b"1")
    view = View(log, "table", "int64", restartable=True)
    states: list[ViewState] = []
    stop = view.observe(states.append)
    changes = view.state_changes()
    view.start()
    await view.wait_running(5)
    await view.stop()
    stop()
    stop()  # idempotent
    changes.stop()
    got = [state async for state in changes]
    assert got == states and ViewState.RUNNING in got
    seen = len(states)
    view.start()  # runs again: nobody observes any more
    await view.wait_running(5)
    await view.close()
    assert len(states) == seen


def test_simple_backoff_is_linear() -> None:
    backoff = SimpleBackoff(10.0, 35.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 4, 9)] == [10.0, 20.0, 30.0, 35.0, 35.0]
    Processor(broker.connect("inmem://simple-backoff").log(), GRAPH, backoff=backoff)  # a RetryDelay
    with pytest.raises(ValueError):
        SimpleBackoff(0, 1)


@pytest.mark.parametrize(("reset", "expected"), [(3600.0, [1, 2, 3]), (0.0, [1, 1, 1])])
async def test_the_view_backoff_reset_timeout(log: InmemLog, reset: float, expected: list[int]) -> None:
    await put(log, "a", b"1")
    flaky = FlakyLog(log)
    flaky.broken_reads = 3
    asked: list[int] = []

    class Policy:
        def delay(self, attempt: int) -> float:
            asked.append(attempt)
            return 0.001

    view = View(as_log(flaky), "table", "int64", auto_reconnect=True, backoff=Policy(), backoff_reset=reset)
    async with view:
        await view.wait_running(5)
    assert asked[:3] == expected
    with pytest.raises(ValueError):
        View(log, "table", "int64", backoff_reset=-1)
