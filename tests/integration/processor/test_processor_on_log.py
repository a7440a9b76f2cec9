"""Processors, views and emitters end to end on a partitioned log (in-memory; Kafka: PROCESSOR_KAFKA=1)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.backends.kafka.processor import (
    Context,
    Emitter,
    Processor,
    View,
    define_group,
    input,
    join,
    lmdb_storage,
    lookup,
    memory_storage,
    output,
    persist,
)
from broker.backends.kafka.processor.storage import StorageBuilder
from broker.log import Log, TopicPartition
from broker.testing import wait_until

PATIENCE = 30.0


def counter(group: str, topic: str) -> Any:
    def count(ctx: Context, msg: Any) -> None:
        ctx.set_value((ctx.value() or 0) + 1)

    return define_group(group, input(topic, "str", count), persist("int64"))


async def emit_words(log: Log, topic: str, words: list[str]) -> None:
    async with Emitter(log, topic, "str") as emitter:
        for word in words:
            emitter.emit(word, "1")


async def processed(log: Log, group: str, topic: str, partitions: int) -> int:
    offsets = await log.committed(group, [TopicPartition(topic, p) for p in range(partitions)])
    return sum(v or 0 for v in offsets.values())


async def wait_processed(log: Log, group: str, topic: str, partitions: int, total: int) -> None:
    async with asyncio.timeout(PATIENCE):
        while await processed(log, group, topic, partitions) < total:  # noqa: ASYNC110 - polled state
            await asyncio.sleep(0.02)


def table_counts(proc: Processor, keys: set[str]) -> dict[str, int]:
    return {k: proc.get(k) or 0 for k in keys}


async def check_restart(log: Log, names: Callable[[str], str], storage: Callable[[], StorageBuilder]) -> None:
    topic, group = names("words"), names("wc")
    await log.create_topic(topic, 3)
    rnd = random.Random(7)
    first = [f"w{rnd.randrange(40)}" for _ in range(600)]
    await emit_words(log, topic, first)
    async with Processor(log, counter(group, topic), storage=storage()) as one:
        await wait_processed(log, group, topic, 3, len(first))
        assert table_counts(one, set(first)) == Counter(first)
    second = [f"w{rnd.randrange(60)}" for _ in range(400)]
    await emit_words(log, topic, second)
    async with Processor(log, counter(group, topic), storage=storage()) as two:
        await wait_processed(log, group, topic, 3, len(first) + len(second))
        expected = Counter(first) + Counter(second)
        assert table_counts(two, set(expected)) == expected
        stats = await two.stats()
    return_value = {p: s.table for p, s in stats.group.items()}
    assert all(t is not None for t in return_value.values())


async def test_restart_resumes_with_the_recovered_table(log: Log, names: Callable[[str], str]) -> None:
    await check_restart(log, names, memory_storage)


async def test_restart_with_local_storage_recovers_only_the_tail(
    log: Log, names: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = names("words"), names("wc")
    await log.create_topic(topic, 2)
    words = [f"w{i % 25}" for i in range(300)]
    await emit_words(log, topic, words)
    async with Processor(log, counter(group, topic), storage=lmdb_storage(tmp_path)):
        await wait_processed(log, group, topic, 2, len(words))
    async with Processor(log, counter(group, topic), storage=lmdb_storage(tmp_path)) as two:
        stats = await two.stats()
        for part in stats.group.values():
            assert part.table is not None
            recovery = part.table.recovery
            assert recovery.start_offset == recovery.hwm > 0  # nothing left to read: all was local
        more = [f"w{i % 30}" for i in range(100)]
        await emit_words(log, topic, more)
        await wait_processed(log, group, topic, 2, len(words) + len(more))
        expected = Counter(words) + Counter(more)
        assert table_counts(two, set(expected)) == expected


async def test_a_second_instance_takes_over_with_no_update_lost(
    log: Log, names: Callable[[str], str]
) -> None:
    topic, group = names("clicks"), names("counter")
    await log.create_topic(topic, 4)
    graph = counter(group, topic)
    keys = [f"user{i}" for i in range(20)]
    sent: Counter[str] = Counter()
    rnd = random.Random(3)

    async def send(count: int) -> None:
        batch = [rnd.choice(keys) for _ in range(count)]
        sent.update(batch)
        await emit_words(log, topic, batch)

    one = Processor(log, graph)
    two = Processor(log, graph)
    async with one:
        await send(200)
        async with two:
            await wait_until(
                lambda: bool(one.partitions and two.partitions) and len(one.partitions | two.partitions) == 4,
                PATIENCE,
            )
            assert not one.partitions & two.partitions
            await send(200)
            await wait_processed(log, group, topic, 4, 400)
            await send(100)  # in flight while two stops
        await wait_until(lambda: one.partitions == {0, 1, 2, 3}, PATIENCE)
        await send(200)
        await wait_processed(log, group, topic, 4, 700)
        assert table_counts(one, set(keys)) == {k: sent[k] for k in keys}


async def test_joins_and_lookups_see_the_right_values(log: Log, names: Callable[[str], str]) -> None:
    profiles, orders, prices, out = names("profiles"), names("orders"), names("prices"), names("enriched")
    users_group, prices_group, orders_group = names("users"), names("price-list"), names("orders-proc")
    for topic in (profiles, orders):
        await log.create_topic(topic, 3)
    await log.create_topic(prices, 2)

    def set_profile(ctx: Context, msg: dict[str, str]) -> None:
        ctx.set_value(msg)

    def set_price(ctx: Context, msg: str) -> None:
        ctx.set_value(int(msg))

    users = define_group(users_group, input(profiles, "json", set_profile), persist("json"))
    price_list = define_group(prices_group, input(prices, "str", set_price), persist("int64"))
    users_table, prices_table = users.table_topic, price_list.table_topic

    def enrich(ctx: Context, msg: dict[str, Any]) -> None:
        user = ctx.join(users_table)
        price = ctx.lookup(prices_table, msg["item"])
        ctx.emit(out, ctx.key, {"user": user["name"] if user else None, "total": (price or 0) * msg["qty"]})

    async with Processor(log, users) as _, Processor(log, price_list) as _:
        async with Emitter(log, profiles, "json") as emitter:
            await emitter.emit_sync("alice", {"name": "Alice"})
            await emitter.emit_sync("bob", {"name": "Bob"})
        async with Emitter(log, prices, "str") as emitter:
            await emitter.emit_sync("apple", "3")
            await emitter.emit_sync("pear", "5")
        await wait_processed(log, users_group, profiles, 3, 2)
        await wait_processed(log, prices_group, prices, 2, 2)
        enricher = define_group(
            orders_group,
            input(orders, "json", enrich),
            join(users_table, "json"),
            lookup(prices_table, "int64"),
            output(out, "json"),
        )
        async with Processor(log, enricher, create_partitions=3):
            results: list[tuple[str | None, Any]] = []
            reader = log.reader()
            reader.assign({TopicPartition(out, p): 0 for p in range(await log.partitions(out))})
            async with Emitter(log, orders, "json") as emitter:
                await emitter.emit_sync("alice", {"item": "pear", "qty": 2})
                await emitter.emit_sync("bob", {"item": "apple", "qty": 1})
                await emitter.emit_sync("carol", {"item": "plum", "qty": 9})

            async with asyncio.timeout(PATIENCE):
                while len(results) < 3:
                    import json

                    results.extend(
                        (r.key, json.loads(r.value or b"null")) for r in await reader.poll(10, 0.1)
                    )
            await reader.close()
    assert sorted(results, key=lambda r: str(r[0])) == [
        ("alice", {"user": "Alice", "total": 10}),
        ("bob", {"user": "Bob", "total": 3}),
        ("carol", {"user": None, "total": 0}),
    ]


async def test_a_view_follows_a_table_live(log: Log, names: Callable[[str], str]) -> None:
    topic, group = names("events"), names("live")
    await log.create_topic(topic, 2)
    graph = counter(group, topic)
    async with Processor(log, graph):
        await emit_words(log, topic, ["a", "b", "a"])
        await wait_processed(log, group, topic, 2, 3)
        async with View(log, graph.table_topic, "int64") as view:
            await view.wait_running(PATIENCE)
            assert (view.get("a"), view.get("b")) == (2, 1)
            changes = ["a", "c", "c", "c"]
            await emit_words(log, topic, changes)
            await wait_until(lambda: (view.get("a"), view.get("b"), view.get("c")) == (3, 1, 3), PATIENCE)
            assert dict(view.iterate()) == {"a": 3, "b": 1, "c": 3}
