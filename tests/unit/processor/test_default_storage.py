"""On-disk default storage, per-directory locks and stale stores (issue 34, point 1)."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import broker
from broker.backends.kafka.processor import (
    Context,
    LmdbStorage,
    MemoryStorage,
    Processor,
    StorageLocked,
    View,
    define_group,
    input,
    lmdb_storage,
    persist,
)
from broker.backends.kafka.processor.defaults import (
    DATA_DIR_ENV,
    data_dir,
    default_processor_storage_path,
    default_view_storage,
    default_view_storage_path,
    memory_when_locked,
    resolve_processor_storage,
    resolve_view_storage,
    set_data_dir,
)
from broker.testing import wait_until


def count(ctx: Context, _: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


@pytest.fixture(autouse=True)
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_data_directory_and_the_default_paths(
    data: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert data_dir() == data
    assert default_processor_storage_path("clicks") == data / "processor" / "clicks"
    assert default_processor_storage_path("a/b") == data / "processor" / "a%2fb"
    assert default_view_storage_path() == data / "view"
    monkeypatch.delenv(DATA_DIR_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "polybroker"
    set_data_dir(tmp_path / "set")
    try:
        assert data_dir() == tmp_path / "set"
        monkeypatch.setenv(DATA_DIR_ENV, str(data))
        assert data_dir() == data  # the environment wins
    finally:
        set_data_dir(None)


def test_disk_on_kafka_memory_on_the_in_memory_log(data: Path) -> None:
    kafka = broker.connect("kafka://127.0.0.1:1").log()
    inmem = broker.connect(f"inmem://defaults-{uuid.uuid4().hex}").log()
    store = resolve_processor_storage(None, kafka, "g")("g-table", 0)
    try:
        assert isinstance(store, LmdbStorage)
        assert Path(store.path) == data / "processor" / "g" / "g-table.0"
    finally:
        store.close()
    view_store = resolve_view_storage(None, kafka)("t", 1)
    try:
        assert isinstance(view_store, LmdbStorage) and Path(view_store.path) == data / "view" / "t.1"
    finally:
        view_store.close()
    assert isinstance(resolve_processor_storage(None, inmem, "g")("g-table", 0), MemoryStorage)
    assert isinstance(resolve_view_storage(None, inmem)("t", 0), MemoryStorage)
    # The options and the View pick them up.
    assert isinstance(
        Processor(inmem, define_group("g", input("i", "str", count)))._storage("x", 0), MemoryStorage
    )
    assert isinstance(View(inmem, "t", "str")._build("t", 0), MemoryStorage)


HOLD = """
import sys
from broker.backends.kafka.processor import LmdbStorage
store = LmdbStorage(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
store.close()
"""


def test_a_store_is_locked_for_one_process(tmp_path: Path) -> None:
    path = tmp_path / "g-table.0"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StorageLocked, match="locked by another process"):
            LmdbStorage(path)
        # A view falls back to memory for a store another process holds.
        fallback = memory_when_locked(lambda name, p: LmdbStorage(tmp_path / f"{name}.{p}"), "view")
        assert isinstance(fallback("g-table", 0), MemoryStorage)
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(10)
    LmdbStorage(path).close()  # released when the holder closed it
    first = LmdbStorage(path)
    try:
        with pytest.raises(StorageLocked, match="already open in this process"):
            LmdbStorage(path)
    finally:
        first.close()


def test_default_view_storage_is_on_disk(data: Path) -> None:
    store = default_view_storage()("clicks-table", 2)
    try:
        assert isinstance(store, LmdbStorage)
    finally:
        store.close()


async def test_a_stale_store_beyond_the_topic_is_dropped_and_recovered_from_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with broker.connect(f"inmem://stale-{uuid.uuid4().hex}?partitions=1") as backend:
        log = backend.log()
        graph = define_group("stale", input("clicks", "str", count), persist("int64"))
        storage = lmdb_storage(tmp_path / "stores")
        await log.create_topic("clicks", 1)
        for _ in range(3):
            await log.produce("clicks", b"x", key="alice")
        async with Processor(log, graph, storage=storage) as first:
            await wait_until(lambda: first.get("alice") == 3, 5)
        # The store claims a table offset the log never reached (a broker reset, a recreated topic).
        store = LmdbStorage(tmp_path / "stores" / "stale-table.0")
        store.set("alice", b"99")
        store.set_offset(1000)
        store.flush()
        store.close()
        caplog.set_level(logging.WARNING)
        async with Processor(log, graph, storage=storage) as again:
            assert again.get("alice") == 3  # recovered from the table topic, not the stale store
        assert any("dropping the local state" in r.getMessage() for r in caplog.records)
