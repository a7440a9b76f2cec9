"""Local table storage: the narrow interface, and the in-memory store.

A :class:`Storage` holds one partition of one table: keys to encoded values, plus the *offset*:
the next table-topic offset that is not yet reflected in the store (Kafka's convention, the
same as a committed offset). Recovery reads the table topic from there. Writes may be buffered;
:meth:`Storage.flush` makes them and the offset durable together, so after a restart the store
is never ahead of the table topic.

A :data:`StorageBuilder` opens the store of ``(name, partition)``; ``name`` is a table topic
(or a prefixed name for views). :func:`memory_storage` keeps nothing across restarts;
:func:`broker.backends.kafka.processor.lmdb_storage.lmdb_storage` does.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

__all__ = [
    "MemoryStorage",
    "NullStorage",
    "Storage",
    "StorageBuilder",
    "key_range",
    "memory_storage",
    "null_storage",
]


@runtime_checkable
class Storage(Protocol):
    """One partition of a table, stored locally. One writer (the owning task), many readers."""

    def get(self, key: str) -> bytes | None:
        """The value of ``key`` (``None`` if absent)."""

    def has(self, key: str) -> bool:
        """True if ``key`` has a value."""

    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key``."""

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent)."""

    def iterate(
        self, start: str | None = None, limit: str | None = None, *, prefix: str | None = None
    ) -> Iterator[tuple[str, bytes]]:
        """Pairs in key order with ``start <= key < limit`` (and starting with ``prefix``)."""

    def offset(self) -> int | None:
        """The next table offset not yet in the store (``None``: nothing was ever recovered)."""

    def set_offset(self, offset: int) -> None:
        """Record that every table record below ``offset`` is reflected in the store."""

    def mark_recovered(self) -> None:
        """Recovery is complete: persist what was buffered while recovering."""

    def flush(self) -> None:
        """Make buffered writes and the offset durable, atomically."""

    def clear(self) -> None:
        """Drop every key and the offset (the table topic was recreated)."""

    def close(self) -> None:
        """Release the store *without* flushing (call :meth:`flush` first to keep writes)."""


#: Opens the store of ``(name, partition)``.
StorageBuilder = Callable[[str, int], Storage]


def key_range(start: str | None, limit: str | None, prefix: str | None) -> tuple[str, str | None]:
    """The half-open key range ``[lo, hi)`` for ``start``/``limit``/``prefix`` (``hi=None``: no bound)."""
    lo = start or ""
    hi = limit
    if prefix:
        lo = max(lo, prefix)
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1) if ord(prefix[-1]) < 0x10FFFF else None
        if end is not None and (hi is None or end < hi):
            hi = end
    return lo, hi


class _OffsetInMemory:
    """The table offset and the recovered flag of a store that persists nothing (kept in memory)."""

    __slots__ = ("_offset", "recovered")

    def __init__(self) -> None:
        self._offset: int | None = None
        self.recovered = False

    def offset(self) -> int | None:
        """The next table offset not in the store (records below it were seen)."""
        return self._offset

    def set_offset(self, offset: int) -> None:
        """Every table record below ``offset`` was seen."""
        self._offset = offset

    def mark_recovered(self) -> None:
        """Nothing to persist in memory."""
        self.recovered = True

    def flush(self) -> None:
        """Nothing to persist in memory."""

    def close(self) -> None:
        """Nothing to release."""


class MemoryStorage(_OffsetInMemory):
    """A dict; iteration sorts a snapshot of the keys. Nothing survives the process."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        super().__init__()
        self._data: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"<MemoryStorage {len(self._data)} keys, offset {self._offset}>"

    def get(self, key: str) -> bytes | None:
        """The value of ``key``."""
        return self._data.get(key)

    def has(self, key: str) -> bool:
        """True if ``key`` has a value."""
        return key in self._data

    def set(self, key: str, value: bytes) -> None:
        """Store ``value``."""
        self._data[key] = value

    def delete(self, key: str) -> None:
        """Remove ``key``."""
        self._data.pop(key, None)

    def iterate(
        self, start: str | None = None, limit: str | None = None, *, prefix: str | None = None
    ) -> Iterator[tuple[str, bytes]]:
        """A snapshot of the pairs in ``[start, limit)`` (and under ``prefix``), in key order."""
        lo, hi = key_range(start, limit, prefix)
        keys = sorted(self._data)
        first = bisect.bisect_left(keys, lo)
        last = len(keys) if hi is None else bisect.bisect_left(keys, hi)
        data = self._data
        snapshot = [(k, data[k]) for k in keys[first:last]]
        return iter(snapshot)

    def clear(self) -> None:
        """Drop everything."""
        self._data.clear()
        self._offset = None

    def __len__(self) -> int:
        return len(self._data)


class NullStorage(_OffsetInMemory):
    """A store that keeps no values (goka's null storage): for tables a processor only writes.

    ``ctx.value()`` reads nothing back and views over it find nothing; only the table offset is
    kept (in memory), so recovery skips the records instead of storing them.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<NullStorage offset {self._offset}>"

    def get(self, key: str) -> bytes | None:
        """Nothing is kept: always None."""
        return None

    def has(self, key: str) -> bool:
        """Nothing is kept: always False."""
        return False

    def set(self, key: str, value: bytes) -> None:
        """Dropped."""

    def delete(self, key: str) -> None:
        """Nothing to delete."""

    def iterate(
        self, start: str | None = None, limit: str | None = None, *, prefix: str | None = None
    ) -> Iterator[tuple[str, bytes]]:
        """Nothing to iterate."""
        return iter(())

    def clear(self) -> None:
        """Forget the offset."""
        self._offset = None


def null_storage() -> StorageBuilder:
    """A builder of :class:`NullStorage` stores (tables that are written, never read locally)."""

    def build(name: str, partition: int) -> Storage:
        return NullStorage()

    return build


def memory_storage() -> StorageBuilder:
    """A builder of fresh :class:`MemoryStorage` stores (recovery always reads the whole table)."""

    def build(name: str, partition: int) -> Storage:
        return MemoryStorage()

    return build
