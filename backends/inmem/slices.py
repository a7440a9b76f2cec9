"""Reading a run of entries out of one in-memory partition (its parallel lists), for logs and queues."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from broker.backends.inmem.store import Partition

__all__ = ["Entry", "partition_slice"]

#: One entry of a partition: ``(offset, value, key, attributes, publish time)``.
Entry = tuple[int, bytes | None, str | None, Mapping[str, str], float]


def partition_slice(part: Partition, position: int, limit: int) -> tuple[Iterator[Entry], int]:
    """Up to ``limit`` entries of ``part`` from ``position`` on, and the offset after the last.

    A ``position`` below the first retained offset starts at that offset instead.
    """
    base = part.base
    if position < base:
        position = base
    end = min(base + len(part.values), position + limit)
    lo, hi = position - base, end - base
    entries = zip(
        range(position, end),
        part.values[lo:hi],
        part.keys[lo:hi],
        part.attributes[lo:hi],
        part.times[lo:hi],
        strict=True,
    )
    return entries, end
