"""Key partitioners shared by every partitioned-log backend.

``murmur2`` is the Kafka ecosystem's default (Java client, librdkafka's ``murmur2_random``), so
records keyed here land on the same partition as records keyed by Java or librdkafka producers.
``fnv1a`` is the 32-bit FNV-1a hash goka uses, for reading goka-partitioned topics.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Partitioner", "fnv1a", "murmur2", "partition_for", "partitioner_by_name"]

#: ``(key bytes, partition count) -> partition``.
Partitioner = Callable[[bytes, int], int]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 hash of ``data`` (seed 0x9747b28c), as an unsigned int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - (length & 3)
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def fnv1a(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & _MASK
    return h


def _murmur2_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _fnv1a_partition(key: bytes, partitions: int) -> int:
    # goka (sarama's hash partitioner) reads the hash as a signed int32 and takes its absolute value.
    h = fnv1a(key)
    if h >= 0x80000000:
        h -= 0x100000000
    return abs(h % partitions if h >= 0 else -((-h) % partitions))


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` with the Kafka default (murmur2)."""
    return _murmur2_partition(key, partitions)


def partitioner_by_name(name: str) -> Partitioner:
    """``"murmur2"`` (default everywhere) or ``"fnv1a"`` (goka-compatible)."""
    if name == "murmur2":
        return _murmur2_partition
    if name == "fnv1a":
        return _fnv1a_partition
    from broker.errors import ConfigError

    raise ConfigError(f"unknown partitioner {name!r}; choose 'murmur2' or 'fnv1a'")
