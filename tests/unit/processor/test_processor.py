"""Processor start-up checks, topics, rebalancing, stats, get and options (in-memory log)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.processor import (
    Assignment,
    Context,
    NotCopartitioned,
    NotOwned,
    PartitionerMismatch,
    Processor,
    ProcessorError,
    ProcessorOptions,
    ProcessorState,
    define_group,
    input,
    inputs,
    join,
    loop,
    output,
    persist,
)
from broker.driver.partitioning import partitioner_by_name
from broker.errors import ClosedError, ConfigError, UnknownSetting
from broker.log import TopicPartition
from broker.testing import wait_until
from tests.unit.processor.support import inmem_backend


@pytest.fixture
async def backend() -> AsyncIterator[InmemBackend]:
    backend = inmem_backend()
    async with backend:
        yield backend


@pytest.fixture
def log(backend: InmemBackend) -> InmemLog:
    return backend.log()


def count(ctx: Context, msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


async def test_inputs_must_be_copartitioned(log: InmemLog) -> None:
    await log.create_topic("a", 2)
    await log.create_topic("b", 3)
    with pytest.raises(NotCopartitioned, match="a=2, b=3"):
        await Processor(log, define_group("g", inputs(["a", "b"], "str", count), persist("int64"))).run()
    await log.create_topic("users", 3)
    with pytest.raises(NotCopartitioned, match="users=3"):
        await Processor(log, define_group("g2", input("a", "str", count), join("users", "str"))).run()


async def test_missing_inputs_are_an_error_unless_created(log: InmemLog) -> None:
    graph = define_group("g", input("absent", "str", count), persist("int64"))
    with pytest.raises(ProcessorError, match="'absent' does not exist"):
        await Processor(log, graph).run()
    async with Processor(log, graph, create_partitions=2) as proc:
        assert proc.partitions == {0, 1}
    assert await log.partitions("absent") == 2


async def test_own_topics_are_created_with_the_input_partition_count(
    backend: InmemBackend, log: InmemLog
) -> None:
    await log.create_topic("in", 4)
    graph = define_group(
        "g", input("in", "str", count), loop("str", count), output("out", "str"), persist("int64")
    )
    async with Processor(log, graph):
        pass
    assert await log.partitions("g-table") == 4
    assert await log.partitions("g-loop") == 4
    assert await log.partitions("out") == 4
    assert backend.broker.topics["g-table"].config == {"cleanup.policy": "compact"}
    assert backend.broker.topics["g-loop"].config == {}


async def test_an_existing_table_with_another_partition_count_is_refused(log: InmemLog) -> None:
    await log.create_topic("in", 2)
    await log.create_topic("g-table", 3)
    with pytest.raises(NotCopartitioned, match="g-table"):
        await Processor(log, define_group("g", input("in", "str", count), persist("int64"))).run()


async def test_a_split_assignment_is_not_copartitioned(log: InmemLog) -> None:
    await log.create_topic("a", 2)
    await log.create_topic("b", 2)
    proc = Processor(log, define_group("g", inputs(["a", "b"], "str", count)))
    with pytest.raises(NotCopartitioned, match="not co-partitioned"):
        await proc._on_assigned([TopicPartition("a", 0), TopicPartition("b", 1)])


async def test_instances_split_partitions_and_the_rebalance_callback_sees_it(log: InmemLog) -> None:
    await log.create_topic("in", 4)
    seen: dict[str, list[Assignment]] = {"one": [], "two": []}
    graph = define_group("g", input("in", "str", count), persist("int64"))
    one = Processor(log, graph, rebalance_callback=seen["one"].append)

    async def record_two(assignment: Assignment) -> None:
        seen["two"].append(assignment)

    two = Processor(log, graph, rebalance_callback=record_two)
    async with one:
        assert one.partitions == {0, 1, 2, 3}
        async with two:
            await wait_until(lambda: len(one.partitions) == 2, 5)
            assert one.partitions | two.partitions == {0, 1, 2, 3}
            assert not one.partitions & two.partitions
        await wait_until(lambda: one.partitions == {0, 1, 2, 3}, 5)
    assert seen["one"][0] == Assignment(frozenset({0, 1, 2, 3}), frozenset({0, 1, 2, 3}), frozenset())
    assert any(a.revoked for a in seen["one"])
    assert seen["two"][0].added == two_partitions(seen["two"])
    assert seen["two"][-1].partitions == frozenset()


def two_partitions(assignments: list[Assignment]) -> frozenset[int]:
    return assignments[0].partitions


async def test_stats_count_inputs_outputs_lag_and_recovery(log: InmemLog) -> None:
    await log.create_topic("in", 2)
    for i in range(6):
        await log.produce("in", b"x", key=f"k{i}", partition=i % 2)

    def cb(ctx: Context, msg: Any) -> None:
        count(ctx, msg)
        ctx.emit("out", ctx.key, "seen")

    graph = define_group("g", input("in", "str", cb), output("out", "str"), persist("int64"))
    async with Processor(log, graph) as proc:
        await wait_until(
            lambda: sum(p.inputs["in"].count for p in proc._parts.values() if "in" in p.inputs) == 6, 5
        )
        # table writes are counted when a checkpoint writes them: the idle checkpoint follows the input
        await wait_until(
            lambda: all(p.table is not None and p.table.writes == 3 for p in proc._parts.values()), 5
        )
        stats = await proc.stats()
        assert set(stats.group) == {0, 1}
        for p in (0, 1):
            part = stats.group[p]
            assert part.inputs["in"].count == 3 and part.inputs["in"].bytes == 3
            assert part.inputs["in"].last_offset == 2 and part.inputs["in"].lag == 0
            assert part.outputs["out"].count == 3
            assert part.table is not None and part.table.status.name == "RUNNING" and part.table.writes == 3
            assert part.table.recovery.finished is not None
        assert stats.lookups == {}


async def test_get_reads_owned_partitions_only(log: InmemLog) -> None:
    await log.create_topic("in", 2)
    graph = define_group("g", input("in", "str", count), persist("int64"))
    async with Processor(log, graph) as one:
        for key in ("a", "b", "c", "d"):
            await log.produce("in", b"x", key=key, partition=partitioner_by_name("murmur2")(key.encode(), 2))
        await wait_until(lambda: all(one.get(k) == 1 for k in "abcd"), 5)
        assert one.get("nobody") is None
        async with Processor(log, graph) as two:
            await wait_until(lambda: len(one.partitions) == 1 and len(two.partitions) == 1, 5)
            owner, other = (
                (one, two) if partitioner_by_name("murmur2")(b"a", 2) in one.partitions else (two, one)
            )
            assert owner.get("a") == 1
            with pytest.raises(NotOwned, match="partition"):
                other.get("a")
    stateless = Processor(log, define_group("s", input("in", "str", count)))
    with pytest.raises(ProcessorError, match="no group table"):
        stateless.get("a")


async def test_fnv1a_partitioner_places_emits_like_goka(log: InmemLog) -> None:
    await log.create_topic("in", 1)
    await log.create_topic("out", 8)
    graph = define_group(
        "g", input("in", "str", lambda ctx, msg: ctx.emit("out", msg, "v")), output("out", "str")
    )
    async with Processor(log, graph, partitioner="fnv1a"):
        for key in ("alpha", "beta", "gamma"):
            await log.produce("in", key.encode(), key="k")
        fnv = partitioner_by_name("fnv1a")
        reader = log.reader()
        reader.assign({TopicPartition("out", p): 0 for p in range(8)})
        got: list[tuple[str | None, int]] = []

        async def read() -> bool:
            got.extend((r.key, r.partition) for r in await reader.poll(10, 0.05))
            return len(got) == 3

        for _ in range(50):
            if await read():
                break
        await reader.close()
    assert sorted(got) == sorted((k, fnv(k.encode(), 8)) for k in ("alpha", "beta", "gamma"))


async def test_lifecycle(log: InmemLog) -> None:
    await log.create_topic("in", 1)
    proc = Processor(log, define_group("g", input("in", "str", count), persist("int64")))
    assert proc.state is ProcessorState.IDLE and "Processor 'g'" in repr(proc)
    await proc.stop()  # not started: nothing to do
    task = proc.start()
    assert proc.start() is task
    await proc.wait_ready(5)
    assert proc.recovered and proc.state.value == "running"
    await proc.stop()
    await proc.stop()
    assert proc.state.value == "stopped" and task.done()
    with pytest.raises(ClosedError):
        await proc.run()


async def test_wait_ready_raises_when_the_processor_fails(log: InmemLog) -> None:
    proc = Processor(log, define_group("g", input("missing", "str", count)))
    proc.start()
    with pytest.raises(ProcessorError, match="does not exist"):
        await proc.wait_ready(5)


async def test_options(log: InmemLog) -> None:
    graph = define_group("g", input("in", "str", count))
    with pytest.raises(UnknownSetting):
        Processor(log, graph, batchsize=3)
    with pytest.raises(ConfigError):
        ProcessorOptions(batch_size=0)
    with pytest.raises(ConfigError):
        ProcessorOptions(poll_timeout=0)
    with pytest.raises(ConfigError):
        ProcessorOptions(create_partitions=0)
    with pytest.raises(ConfigError):
        ProcessorOptions(start="middle")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        ProcessorOptions(partitioner="crc32")
    with pytest.raises(ConfigError):
        ProcessorOptions(nil_handling="ignore")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Processor(log, "not a graph")  # type: ignore[arg-type]
    base = ProcessorOptions(batch_size=5)
    built = Processor(log, graph, base, poll_timeout=1.0).options
    assert (built.batch_size, built.poll_timeout) == (5, 1.0)


async def test_start_latest_skips_existing_input(log: InmemLog) -> None:
    await log.create_topic("in", 1)
    await log.produce("in", b"old", key="k")
    got: list[str] = []
    async with Processor(
        log, define_group("g", input("in", "str", lambda c, m: got.append(m))), start="latest"
    ):
        await log.produce("in", b"new", key="k")
        await wait_until(lambda: got == ["new"], 5)


async def test_a_callback_may_stop_its_processor(log: InmemLog) -> None:
    await log.create_topic("in", 1)
    for value in (b"a", b"stop", b"c"):
        await log.produce("in", value, key="k")
    seen: list[str] = []
    holder: list[Processor] = []

    async def cb(ctx: Context, msg: str) -> None:
        seen.append(msg)
        if msg == "stop":
            await holder[0].stop()

    proc = Processor(log, define_group("g", input("in", "str", cb)), batch_size=1)
    holder.append(proc)
    await asyncio.wait_for(proc.run(), 5)
    assert seen == ["a", "stop"] and proc.state is ProcessorState.STOPPED
    assert (await log.committed("g", [TopicPartition("in", 0)]))[TopicPartition("in", 0)] == 2


async def test_a_group_table_written_by_goka_is_refused_under_murmur2(log: InmemLog) -> None:
    # goka places keys with FNV-1a; read with murmur2, lookups and views would miss keys silently.
    fnv = partitioner_by_name("fnv1a")
    await log.create_topic("in", 4)
    await log.create_topic("g-table", 4)
    for i in range(40):
        key = f"user-{i}"
        await log.produce("g-table", b"%d" % i, key=key, partition=fnv(key.encode(), 4))
    graph = define_group("g", input("in", "str", count), persist("int64"))
    with pytest.raises(ProcessorError, match="fit fnv1a") as stopped:
        async with Processor(log, graph):
            pass
    assert isinstance(stopped.value.__cause__, PartitionerMismatch)
    async with Processor(log, graph, partitioner="fnv1a") as proc:  # the writers' partitioner: fine
        await proc.wait_ready(5)
        assert [proc.get(f"user-{i}") for i in range(40)] == list(range(40))


async def test_async_callbacks_of_different_partitions_run_at_once_in_order_within_each(
    log: InmemLog,
) -> None:
    # The record of partition 0 waits for the one of partition 1: handled one at a time (goka
    # serves each partition on its own goroutine; our old loop served all in one), it never ends.
    await log.create_topic("in", 3)
    for i in range(3):
        for p in range(3):
            await log.produce("in", b"%d" % i, key=f"p{p}-{i}", partition=p)
    partition_one_started = asyncio.Event()
    running: dict[int, int] = {}
    order: dict[int, list[int]] = {0: [], 1: [], 2: []}
    overlapped = False

    async def cb(ctx: Context, msg: Any) -> None:
        nonlocal overlapped
        p = ctx.partition
        running[p] = running.get(p, 0) + 1
        overlapped = overlapped or running[p] > 1
        if p == 1:
            partition_one_started.set()
        if p == 0 and msg == "0":
            await asyncio.wait_for(partition_one_started.wait(), 5)
        await asyncio.sleep(0)
        order[p].append(int(msg))
        running[p] -= 1

    graph = define_group("g", input("in", "str", cb))
    async with Processor(log, graph, partition_concurrency=4):
        await wait_until(lambda: all(len(v) == 3 for v in order.values()), 5)
    assert order == {0: [0, 1, 2], 1: [0, 1, 2], 2: [0, 1, 2]}, "records of a partition kept their order"
    assert not overlapped, "two records of one partition were handled at once"


async def test_partition_concurrency_bounds_the_partitions_handled_at_once(log: InmemLog) -> None:
    await log.create_topic("in", 4)
    for i in range(3):
        for p in range(4):
            await log.produce("in", b"%d" % i, key=f"p{p}-{i}", partition=p)
    running = peak = 0
    handled: list[tuple[int, int]] = []

    async def cb(ctx: Context, msg: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        handled.append((ctx.partition, int(msg)))
        running -= 1

    graph = define_group("g", input("in", "str", cb))
    async with Processor(log, graph, partition_concurrency=2):
        await wait_until(lambda: len(handled) == 12, 5)
    assert peak == 2, f"{peak} partitions were handled at once with partition_concurrency=2"
    for p in range(4):
        assert [i for q, i in handled if q == p] == [0, 1, 2]


async def test_a_failing_partition_stops_the_others_and_nothing_is_committed(log: InmemLog) -> None:
    await log.create_topic("in", 2)
    await log.produce("in", b"boom", key="a", partition=0)
    await log.produce("in", b"slow", key="b", partition=1)
    finished: list[str] = []

    async def cb(ctx: Context, msg: Any) -> None:
        if msg == "boom":
            await asyncio.sleep(0.05)
            raise RuntimeError("handler failed")
        await asyncio.sleep(10)  # cancelled when partition 0 fails
        finished.append(msg)

    proc = Processor(log, define_group("g", input("in", "str", cb), persist("int64")))
    with pytest.raises(ProcessorError, match="handler failed"):
        async with asyncio.timeout(5):
            await proc.run()
    assert finished == []
    committed = await log.committed("g", [TopicPartition("in", 0), TopicPartition("in", 1)])
    assert all(offset in (None, 0) for offset in committed.values()), committed


def test_partition_concurrency_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="partition_concurrency"):
        ProcessorOptions(partition_concurrency=0)


async def test_hot_standby_keeps_other_partitions_tables_so_a_failover_reads_only_the_tail(
    log: InmemLog,
) -> None:
    await log.create_topic("in", 2)

    def value(members: list[Processor], key: str) -> Any:
        for member in members:
            if member._partitioner(key.encode(), 2) in member.partitions:
                return member.get(key)
        return None

    async def takeover(group: str, with_standby: bool) -> dict[int, tuple[int, int]]:
        """Recovery (start offset, high watermark) of each partition the first member takes over."""
        graph = define_group(group, input("in", "str", count), persist("int64"))
        one = Processor(log, graph, hot_standby=with_standby)
        two = Processor(log, graph, hot_standby=with_standby)
        async with one:
            async with two:
                await wait_until(lambda: len(one.partitions) == 1 and len(two.partitions) == 1, 5)
                for i in range(200):
                    await log.produce("in", b"x", key=f"{group}-{i % 40}")
                keys = [f"{group}-{i}" for i in range(40)]
                await wait_until(lambda: all(value([one, two], k) == 5 for k in keys), 5)
                if with_standby:
                    assert one.standby_partitions == frozenset({0, 1}) - one.partitions
                    await wait_until(lambda: standby_caught_up(one), 5)
                taken = set(two.partitions)
            await wait_until(lambda: one.partitions == {0, 1}, 5)  # the failover
            stats = await one.stats()
            assert [one.get(k) for k in keys] == [5] * 40, "the table after the takeover is wrong"
        out = {}
        for p in taken:
            table = stats.group[p].table
            assert table is not None
            out[p] = (table.recovery.start_offset, table.recovery.hwm)
        return out

    cold = await takeover("cold", with_standby=False)
    assert all(start == 0 and hwm > 0 for start, hwm in cold.values()), cold  # the whole table again
    warm = await takeover("warm", with_standby=True)
    # the standby had read the table up to the last checkpoints: the new owner reads only their tail
    assert all(0 < start <= hwm for start, hwm in warm.values()), warm


async def test_recover_ahead_recovers_every_table_before_joining_so_the_assignment_reads_only_the_tail(
    log: InmemLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await log.create_topic("in", 2)
    murmur2 = partitioner_by_name("murmur2")

    async def first_assignment(group: str, ahead: bool) -> dict[int, tuple[int, int, int]]:
        """Per partition at the first assignment: (table end at start-up, recovery start, its end)."""
        graph = define_group(group, input("in", "str", count), persist("int64"))
        table_codec = graph.table_edge.codec  # type: ignore[union-attr]
        keys = [f"{group}-{i}" for i in range(40)]
        async with Processor(log, graph) as earlier:  # a previous run filled the table
            for i in range(200):
                await log.produce("in", b"x", key=keys[i % 40])
            await wait_until(lambda: all(earlier.get(k) == 5 for k in keys), 5)
        table_topic = f"{group}-table"
        filled = {p: (await log.watermarks(TopicPartition(table_topic, p)))[1] for p in (0, 1)}
        assert all(filled.values())
        proc = Processor(log, graph, recover_ahead=ahead)
        at_join: dict[int, int | None] = {}
        join = log.consumer

        def consumer(*args: Any, **kwargs: Any) -> Any:
            # Joining the group: note what the standbys hold; then table records arrive (the tail).
            for p, tables in proc._standby.items():
                at_join[p] = tables[0].storage.offset()
            for key in keys[:10]:
                p = murmur2(key.encode(), 2)
                log.send(table_topic, table_codec.encode(7), key=key, partition=p)
            return join(*args, **kwargs)

        monkeypatch.setattr(log, "consumer", consumer)
        try:
            async with proc:
                await wait_until(lambda: proc.partitions == {0, 1}, 5)
                assert [proc.get(k) for k in keys] == [7] * 10 + [5] * 30
                stats = await proc.stats()
        finally:
            monkeypatch.setattr(log, "consumer", join)
        if ahead:
            assert at_join == filled, "the tables were not recovered before joining the group"
        else:
            assert not at_join
        out = {}
        for p in (0, 1):
            table = stats.group[p].table
            assert table is not None
            out[p] = (filled[p], table.recovery.start_offset, table.recovery.hwm)
        return out

    cold = await first_assignment("cold-start", ahead=False)
    assert all(start == 0 and hwm > filled for filled, start, hwm in cold.values()), cold  # everything
    ahead = await first_assignment("ahead", ahead=True)
    # recovered before joining: the assignment reads at most the records that arrived since
    assert all(filled <= start <= hwm for filled, start, hwm in ahead.values()), ahead
    assert sum(hwm - filled for filled, _, hwm in ahead.values()) == 10


def standby_caught_up(proc: Processor) -> bool:
    tables = [t for ts in proc._standby.values() for t in ts]
    return bool(tables) and all(t.writes > 0 for t in tables)
