"""Processors on Tansu keep their tables on disk by default (issue 34, point 1).

Each test restarts the application (a new Processor over the same data directory; the broker
keeps running): the restart reads nothing of the table topic back, a stale store (its offset
beyond what the broker holds) is detected and recovered from the broker, and a store held by
a running processor is locked.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.processor import (
    Context,
    Emitter,
    LmdbStorage,
    Processor,
    StorageLocked,
    View,
    define_group,
    input,
    persist,
)
from broker.testing import wait_until
from tests.integration.kafka.support import unique

pytestmark = pytest.mark.slow

PARTITIONS = 2
PATIENCE = 30.0


def count(ctx: Context, _: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


async def emit(log: object, topic: str, users: list[str]) -> None:
    async with Emitter(log, topic, "str") as emitter:  # type: ignore[arg-type]
        for user in users:
            emitter.emit(user, "click")


async def test_a_restarted_processor_reads_its_tables_from_disk_not_from_the_broker(
    exact_backend: KafkaBackend, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = exact_backend.log()
    topic, group = unique("clicks"), unique("stored")
    await log.create_topic(topic, PARTITIONS)
    graph = define_group(group, input(topic, "str", count), persist("int64"))
    users = [f"user-{i}" for i in range(12)]
    await emit(log, topic, users * 2)
    async with Processor(log, graph, commit_interval=0.1) as first:  # no storage: the default
        await wait_until(lambda: all(first.get(u) == 2 for u in users), PATIENCE)
        store_dir = data_dir / "processor" / group / f"{group}-table.0"
        assert (store_dir / "data.mdb").exists()
        with pytest.raises(StorageLocked):  # held by the running processor
            LmdbStorage(store_dir)
    # The application restarts: its tables come from disk, nothing is read back from the broker.
    caplog.set_level(logging.WARNING, logger="broker.backends.kafka.processor")
    async with Processor(log, graph, commit_interval=0.1) as again:
        stats = await again.stats()
        recoveries = [s.table.recovery for s in stats.group.values() if s.table is not None]
        assert len(recoveries) == PARTITIONS
        assert all(r.start_offset == r.hwm and r.hwm > 0 for r in recoveries)
        assert all(again.get(u) == 2 for u in users)
        await emit(log, topic, users)
        await wait_until(lambda: all(again.get(u) == 3 for u in users), PATIENCE)
    assert not any("in memory" in r.getMessage() for r in caplog.records)
    # A view with no storage keeps the table on disk too, under <data dir>/view.
    async with View(log, graph.table_topic, "int64") as view:
        await view.wait_running(PATIENCE)
        assert all(view.get(u) == 3 for u in users)
    assert (data_dir / "view" / f"{graph.table_topic}.0" / "data.mdb").exists()


async def test_a_stale_store_is_detected_and_recovered_from_the_broker(
    exact_backend: KafkaBackend, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = exact_backend.log()
    topic, group = unique("clicks"), unique("stale")
    await log.create_topic(topic, 1)
    graph = define_group(group, input(topic, "str", count), persist("int64"))
    await emit(log, topic, ["ann", "bob", "ann"])
    async with Processor(log, graph, commit_interval=0.1) as first:
        await wait_until(lambda: first.get("ann") == 2 and first.get("bob") == 1, PATIENCE)
    # The store now claims table offsets the broker never held (as after a broker reset).
    store = LmdbStorage(data_dir / "processor" / group / f"{group}-table.0")
    store.set("ann", b"77")
    store.set_offset(10_000)
    store.flush()
    store.close()
    caplog.set_level(logging.WARNING, logger="broker.backends.kafka.processor")
    async with Processor(log, graph, commit_interval=0.1) as again:
        assert again.get("ann") == 2 and again.get("bob") == 1
    assert any("dropping the local state" in r.getMessage() for r in caplog.records)
