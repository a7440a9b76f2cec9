"""The visitor edge and ``Processor.visit_all`` (goka's Visitor / VisitAll), in the Tester and running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.processor import (
    CallbackFailed,
    Context,
    GraphError,
    Processor,
    ProcessorError,
    Tester,
    VisitAborted,
    define_group,
    input,
    null_storage,
    output,
    persist,
    visitor,
)
from broker.testing import wait_until
from tests.unit.processor.support import inmem_backend


def count(ctx: Context, msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def reset_to(ctx: Context, meta: Any) -> None:
    ctx.set_value(meta)


def test_visitors_need_a_group_table_and_distinct_names() -> None:
    with pytest.raises(GraphError, match="persist"):
        define_group("g", input("in", "str", count), visitor("reset", reset_to))
    with pytest.raises(GraphError, match="named alike"):
        define_group(
            "g", input("in", "str", count), persist("int64"), visitor("v", reset_to), visitor("v", reset_to)
        )


async def test_visit_all_in_the_tester_visits_every_key_of_every_partition() -> None:
    seen: list[tuple[str, int, Any]] = []

    def audit(ctx: Context, meta: Any) -> None:
        seen.append((ctx.key or "", ctx.partition, ctx.value()))
        ctx.set_value(meta)
        ctx.emit("audit", ctx.key, f"reset from {ctx.value()}")

    graph = define_group(
        "g", input("in", "str", count), output("audit", "str"), persist("int64"), visitor("reset", audit)
    )
    async with Tester(partitions=3) as tester:
        proc = await tester.processor(graph)
        audits = await tester.tracker("audit", "str")
        await tester.consume_many("in", [(f"k{i % 7}", "x") for i in range(30)])
        assert await proc.visit_all("reset", 100) == 7
        await tester.settle()
        assert {tester.table_value("g-table", f"k{i}") for i in range(7)} == {100}
        assert sorted(k for k, _, _ in seen) == [f"k{i}" for i in range(7)]
        assert sum(v for _, _, v in seen) == 30, "the visitor saw the values the inputs left"
        assert len({p for _, p, _ in seen}) > 1
        assert len(await audits.drain()) == 7
        with pytest.raises(GraphError, match="no visitor 'nope'"):
            await proc.visit_all("nope")


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend: InmemBackend = inmem_backend()
    async with backend:
        yield backend.log()


async def test_visit_all_on_a_running_processor_runs_between_batches(log: InmemLog) -> None:
    await log.create_topic("in", 2)
    busy = 0
    overlapped = False

    async def slow_count(ctx: Context, msg: Any) -> None:
        nonlocal busy
        busy += 1
        await asyncio.sleep(0.001)
        busy -= 1
        count(ctx, msg)

    async def reset(ctx: Context, meta: Any) -> None:
        nonlocal overlapped
        overlapped = overlapped or busy > 0
        ctx.set_value(meta)

    graph = define_group("g", input("in", "str", slow_count), persist("int64"), visitor("reset", reset))
    proc = Processor(log, graph)
    with pytest.raises(VisitAborted, match="not running"):
        await proc.visit_all("reset", 0)  # before it runs: refused, never left waiting
    async with proc:
        for i in range(40):
            await log.produce("in", b"x", key=f"k{i % 5}")
        await wait_until(lambda: all(proc.get(f"k{i}") == 8 for i in range(5)), 5)
        assert await proc.visit_all("reset", 0) == 5
        assert [proc.get(f"k{i}") for i in range(5)] == [0] * 5
    assert not overlapped, "a visit ran beside an input callback"
    with pytest.raises(VisitAborted):
        await proc.visit_all("reset", 0)


async def test_a_failing_visitor_stops_the_processor(log: InmemLog) -> None:
    await log.create_topic("in", 1)

    def broken(ctx: Context, meta: Any) -> None:
        raise ValueError("visitor bug")

    graph = define_group("g", input("in", "str", count), persist("int64"), visitor("v", broken))
    proc = Processor(log, graph)
    task = proc.start()
    await proc.wait_ready(5)
    await log.produce("in", b"x", key="a")
    await wait_until(lambda: proc.get("a") == 1, 5)
    with pytest.raises(CallbackFailed, match="visitor bug"):
        await proc.visit_all("v")
    with pytest.raises(ProcessorError, match="visitor bug"):
        await asyncio.wait_for(task, 5)  # the processor stopped with it
    assert proc.state.value == "failed"


async def test_null_storage_keeps_no_values_but_the_table_topic_gets_every_write() -> None:
    values: list[Any] = []

    def remember(ctx: Context, msg: Any) -> None:
        values.append(ctx.value())
        ctx.set_value(len(values))

    async with Tester(partitions=2) as tester:
        proc = await tester.processor(
            define_group("g", input("in", "str", remember), persist("int64")), storage=null_storage()
        )
        table = await tester.tracker("g-table", "int64")
        for _ in range(3):
            await tester.consume("in", "k", "x")  # a checkpoint each: three table writes
        assert values == [None, None, None], "a null store reads nothing back"
        assert [v for _, v in await table.drain()] == [1, 2, 3]
        assert await table.hwm(proc_partition(proc, "k")) == 3
        assert proc.get("k") is None


def proc_partition(proc: Processor, key: str) -> int:
    return proc._partitioner(key.encode(), proc._npar)


async def test_the_graph_hook_sees_the_graph_and_clear_values_empties_the_tables() -> None:
    hooked: list[Any] = []
    graph = define_group("g", input("in", "str", count), persist("int64"))
    async with Tester(partitions=2) as tester:
        await tester.processor(graph, graph_hook=hooked.append)
        assert hooked == [graph]
        await tester.consume_many("in", [(f"k{i}", "x") for i in range(4)])
        assert tester.table_keys("g-table") == ["k0", "k1", "k2", "k3"]
        tester.clear_values()
        assert tester.table_keys("g-table") == []
        await tester.consume("in", "k0", "x")
        assert tester.table_value("g-table", "k0") == 1, "counting starts again from an empty table"
