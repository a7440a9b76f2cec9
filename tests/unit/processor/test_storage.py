"""The storage interface on the in-memory store and the LMDB store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.backends.kafka.processor import LmdbStorage, MemoryStorage, Storage, lmdb_storage, memory_storage
from broker.errors import ConfigError


@pytest.fixture(params=["memory", "lmdb"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Storage]]:
    opened: list[Storage] = []
    builder = memory_storage() if request.param == "memory" else lmdb_storage(tmp_path)

    def build() -> Storage:
        store = builder("table", 0)
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


def test_get_set_delete_has(make: Callable[[], Storage]) -> None:
    store = make()
    assert isinstance(store, Storage)
    assert store.get("a") is None and not store.has("a")
    store.set("a", b"1")
    store.set("b", b"2")
    assert store.get("a") == b"1" and store.has("a")
    store.delete("a")
    store.delete("never")
    assert store.get("a") is None and not store.has("a")
    store.flush()
    assert store.get("b") == b"2"
    store.set("b", b"3")
    assert store.get("b") == b"3"


def test_iterate_in_key_order_with_ranges_and_prefixes(make: Callable[[], Storage]) -> None:
    store = make()
    for key in ["b", "a", "user:2", "user:10", "user:1", "z"]:
        store.set(key, key.encode())
    store.flush()
    store.set("c", b"c")  # buffered, not flushed
    store.delete("z")
    assert [k for k, _ in store.iterate()] == ["a", "b", "c", "user:1", "user:10", "user:2"]
    assert [k for k, _ in store.iterate("b", "user:1")] == ["b", "c"]
    assert [k for k, _ in store.iterate(prefix="user:")] == ["user:1", "user:10", "user:2"]
    assert [k for k, _ in store.iterate("user:10", prefix="user:")] == ["user:10", "user:2"]
    assert dict(store.iterate(prefix="user:1")) == {"user:1": b"user:1", "user:10": b"user:10"}
    assert list(store.iterate("zz")) == []


def test_offset_and_recovery_marks(make: Callable[[], Storage]) -> None:
    store = make()
    assert store.offset() is None
    store.set_offset(10)
    assert store.offset() == 10
    store.mark_recovered()
    store.clear()
    assert store.offset() is None and list(store.iterate()) == []


def test_lmdb_keeps_flushed_writes_and_the_offset_across_reopen(tmp_path: Path) -> None:
    store = LmdbStorage(tmp_path / "t.0")
    for i in range(3000):  # more than one iteration chunk
        store.set(f"k{i:05d}", str(i).encode())
    store.set_offset(3000)
    store.flush()
    store.set("unflushed", b"x")
    store.set_offset(3001)
    store.close()
    store.close()  # idempotent
    again = LmdbStorage(tmp_path / "t.0")
    try:
        assert again.offset() == 3000
        assert again.get("unflushed") is None
        keys = [k for k, _ in again.iterate()]
        assert len(keys) == 3000 and keys == sorted(keys)
        assert again.get("k02999") == b"2999"
    finally:
        again.close()


def test_lmdb_refuses_a_store_open_twice_and_overlong_keys(tmp_path: Path) -> None:
    store = LmdbStorage(tmp_path / "t.0")
    try:
        with pytest.raises(ConfigError, match="already open"):
            LmdbStorage(tmp_path / "t.0")
        with pytest.raises(ConfigError, match="bytes"):
            store.set("x" * 600, b"v")
    finally:
        store.close()


def test_lmdb_grows_its_map(tmp_path: Path) -> None:
    store = LmdbStorage(tmp_path / "small.0", map_size=64 * 1024)
    try:
        for i in range(2000):
            store.set(f"key-{i}", b"v" * 200)
        store.flush()
        assert store.get("key-1999") == b"v" * 200
    finally:
        store.close()


def test_memory_storage_is_fresh_per_build() -> None:
    build = memory_storage()
    first = build("t", 0)
    first.set("a", b"1")
    second = build("t", 0)
    assert isinstance(second, MemoryStorage) and second.get("a") is None
    assert len(second) == 0 and "0 keys" in repr(second)
