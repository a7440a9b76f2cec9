"""The Tester itself: partitions, trackers, table access, emitters, views, limits."""

from __future__ import annotations

from typing import Any

import pytest

from broker.backends.kafka.processor import (
    Context,
    ProcessorError,
    Tester,
    ViewState,
    define_group,
    input,
    loop,
    output,
    persist,
)
from broker.driver.partitioning import partitioner_by_name
from broker.errors import ConfigError
from broker.log import TopicPartition
from tests.unit.processor.support import inmem_backend


def count(ctx: Context, msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


async def test_several_partitions_keep_each_key_in_its_partition() -> None:
    async with Tester(partitions=4) as tester:
        partitions: dict[str, set[int]] = {}

        def cb(ctx: Context, msg: Any) -> None:
            partitions.setdefault(ctx.key or "", set()).add(ctx.partition)
            count(ctx, msg)

        proc = await tester.processor(define_group("wc", input("words", "str", cb), persist("int64")))
        assert proc.partitions == {0, 1, 2, 3}
        words = [f"w{i % 13}" for i in range(100)]
        await tester.consume_many("words", [(w, "x") for w in words])
        for word in set(words):
            assert tester.table_value("wc-table", word) == words.count(word)
            assert partitions[word] == {partitioner_by_name("murmur2")(word.encode(), 4)}
        assert len({p for ps in partitions.values() for p in ps}) > 1
        assert tester.table_keys("wc-table") == sorted(set(words))


async def test_fnv1a_tester() -> None:
    async with Tester(partitions=3, partitioner="fnv1a") as tester:
        where: list[int] = []
        await tester.processor(
            define_group("g", input("in", "str", lambda ctx, msg: where.append(ctx.partition)))
        )
        await tester.consume("in", "some-key", "x")
        assert where == [partitioner_by_name("fnv1a")(b"some-key", 3)]


async def test_trackers_start_at_the_end_and_can_seek() -> None:
    async with Tester() as tester:
        await tester.processor(
            define_group(
                "echo",
                input("in", "str", lambda ctx, msg: ctx.emit("out", ctx.key, msg)),
                output("out", "str"),
            )
        )
        await tester.consume("in", "a", "before")
        tracker = await tester.tracker("out")
        assert tracker.start == {0: 1} and tracker.next_offset() == 1
        await tester.consume("in", "b", "after")
        assert await tracker.drain() == [("b", "after")]
        tracker.seek(0, 0)
        assert await tracker.next() == ("a", "before")
        raw = await tester.tracker("out", codec="bytes")
        await tester.consume("in", "c", "raw")
        assert await raw.next() == ("c", b"raw")


async def test_set_table_value_is_seen_by_the_owner_and_survives_recovery() -> None:
    async with Tester(partitions=2) as tester:
        graph = define_group("g", input("in", "str", count), persist("int64"))
        await tester.processor(graph)
        await tester.set_table_value("g-table", "k", 41)
        await tester.consume("in", "k", "x")
        assert tester.table_value("g-table", "k") == 42
        await tester.set_table_value("g-table", "k", None)
        assert tester.table_value("g-table", "k") is None
        with pytest.raises(ConfigError, match="no codec"):
            await tester.set_table_value("unknown-table", "k", 1)
        with pytest.raises(ConfigError, match="holds table"):
            tester.table_value("unknown-table", "k")
        with pytest.raises(ConfigError, match="holds table"):
            tester.table_keys("unknown-table")


async def test_views_and_emitters_in_the_tester() -> None:
    async with Tester(partitions=2) as tester:
        await tester.processor(define_group("g", input("in", "str", count), persist("int64")))
        view = await tester.view("g-table", "int64")
        assert view.state is ViewState.RUNNING
        emitter = tester.emitter("in")
        async with emitter:
            emitter.emit("a", "x")
            await emitter.emit_sync("a", "y")
        await tester.settle()
        assert view.get("a") == 2 and tester.table_value("g-table", "a") == 2
        with pytest.raises(ConfigError, match="no codec"):
            tester.emitter("nowhere")


async def test_codec_conflicts_and_unknown_codecs_are_errors() -> None:
    async with Tester() as tester:
        await tester.processor(define_group("g", input("in", "str", count)))
        with pytest.raises(ConfigError, match="two codecs"):
            await tester.processor(define_group("h", input("in", "json", count)))
        with pytest.raises(ConfigError, match="no codec known"):
            await tester.consume("elsewhere", "k", {"not": "bytes"})
        await tester.consume("elsewhere", "k", b"raw bytes are fine")
        assert tester.codec("in") is not None


async def test_an_endless_loop_is_reported() -> None:
    async with Tester(max_rounds=20) as tester:
        await tester.processor(
            define_group(
                "spin",
                input("in", "str", lambda ctx, msg: ctx.loopback("k", "again")),
                loop("str", lambda ctx, msg: ctx.loopback("k", "again")),
            )
        )
        with pytest.raises(ProcessorError, match="did not settle"):
            await tester.consume("in", "k", "go")


async def test_lag_shows_unprocessed_input() -> None:
    async with Tester() as tester:
        proc = await tester.processor(define_group("g", input("in", "str", count), persist("int64")))
        await tester.consume("in", "k", "x")
        await tester.log.produce("in", b"y", key="k", partition=0)
        await tester.log.produce("in", b"z", key="k", partition=0)
        stats = await proc.stats()
        assert stats.group[0].inputs["in"].lag == 2 and stats.group[0].inputs["in"].count == 1
        await tester.settle()
        assert (await proc.stats()).group[0].inputs["in"].lag == 0
        assert tester.table_value("g-table", "k") == 3


async def test_a_tester_on_a_given_log() -> None:
    backend = inmem_backend()
    async with backend:
        log = backend.log()
        async with Tester(log, partitions=2) as tester:
            await tester.processor(define_group("g", input("in", "str", count), persist("int64")))
            await tester.consume("in", "k", "x")
        high = await log.watermarks(TopicPartition("g-table", partitioner_by_name("murmur2")(b"k", 2)))
        assert high == (0, 1)
    with pytest.raises(ConfigError):
        Tester(partitions=0)
