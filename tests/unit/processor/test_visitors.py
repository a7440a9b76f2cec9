"""The visitor edge and ``Processor.visit_all`` (goka's Visitor / VisitAll), in the Tester and running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from backends.inmem import InmemBackend, InmemLog
from backends.kafka.processor import (
    CallbackFailed,
    Context,
    GraphError,
    Processor,
    ProcessorError,
    Tester,
    VisitAborted,
    define_group,
    input,
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
