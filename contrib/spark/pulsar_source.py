"""Reading Pulsar for Spark: packed message ids as offsets, replayed with Pulsar readers.

A record's offset is the backend's packed message id (``ledger << 40 | entry << 16 | batch + 1``,
ordered within a partition), so ``[start, end)`` ranges work as on Kafka; ``0`` means "before
the first message". The driver (:class:`PulsarPlanner`) finds each partition's last message id
with a short-lived subscription (subscribe, ``get_last_message_id``, unsubscribe: nothing is
retained for it). An executor (:func:`read_range`) replays one partition with the backend's
reader from the message before ``start`` and stops at ``end``. Packed offsets are not dense, so
``maxRecordsPerTrigger`` does not apply to Pulsar.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import _pulsar  # type: ignore[import-not-found]

from broker import Record
from broker.backends.pulsar.backend import PulsarBackend
from broker.backends.pulsar.mapping import DEFAULT_TENANT_NAMESPACE, offset_of
from broker.contrib.spark import runtime
from broker.contrib.spark.arrow import records_batch
from broker.contrib.spark.offsets import Offsets, Range
from broker.contrib.spark.options import Options
from broker.errors import ConfigError, Timeout

__all__ = ["PulsarPlanner", "partition_topic", "read_range", "unpack"]


def _backend(options: Options) -> PulsarBackend:
    backend = options.connect()
    if not isinstance(backend, PulsarBackend):
        raise ConfigError(f"expected a pulsar:// backend, got {type(backend).__name__}")
    return backend


def partition_topic(client: Any, topic: str, partition: int) -> str:
    """The name to read one partition of ``topic`` by (the topic itself when it is not partitioned)."""
    names = client.get_topic_partitions(topic)
    if len(names) == 1 and "-partition-" not in names[0]:
        return str(names[0])
    full = topic if "://" in topic else DEFAULT_TENANT_NAMESPACE + topic
    return f"{full}-partition-{partition}"


def unpack(offset: int, partition: int) -> Any:
    """The message id packed into ``offset`` (see :func:`broker.backends.pulsar.mapping.offset_of`)."""
    return _pulsar.MessageId(partition, offset >> 40, (offset >> 16) & 0xFFFFFF, (offset & 0xFFFF) - 1)


class PulsarPlanner:
    """Partitions and last message ids of the source's topics, for the driver."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.topics = options.topics()
        self._backend: PulsarBackend | None = None

    @property
    def backend(self) -> PulsarBackend:
        """The connection, opened on first use."""
        if self._backend is None:
            self._backend = _backend(self.options)
        return self._backend

    def _last(self, name: str) -> int:
        client = self.backend.client
        config = _pulsar.ConsumerConfiguration()
        config.subscription_initial_position(_pulsar.InitialPosition.Latest)
        consumer = client.subscribe(name, f"polybroker-spark-probe-{uuid.uuid4().hex}", config)
        try:
            last = consumer.get_last_message_id()
        finally:
            try:
                consumer.unsubscribe()
            finally:
                consumer.close()
        if last.ledger_id() < 0 or last.entry_id() < 0:
            return 0
        return offset_of(last) + 1

    def bounds(self) -> tuple[Offsets, Offsets]:
        """``(earliest, latest)``: 0 (before the first message) and the packed id after the last one."""
        low: Offsets = {}
        high: Offsets = {}
        client = self.backend.client
        for topic in self.topics:
            names = client.get_topic_partitions(topic)
            low[topic] = {}
            high[topic] = {}
            for index, name in enumerate(names):
                partition = int(name.rsplit("-partition-", 1)[1]) if "-partition-" in name else index
                low[topic][str(partition)] = 0
                high[topic][str(partition)] = self._last(name)
        return low, high

    def close(self) -> None:
        """Close the connection."""
        if self._backend is not None:
            backend, self._backend = self._backend, None
            runtime.run(backend.close())


def read_range(options: Options, part: Range) -> Iterator[Any]:
    """Arrow record batches of the messages of one partition with packed ids in ``[start, end)``."""
    chunk = options.get_int("fetchRecords", 1000)
    timeout = options.get_float("readTimeout", 120.0)
    backend = _backend(options)
    try:
        name = partition_topic(backend.client, part.topic, part.partition)
        start: Any = "earliest" if part.start <= 0 else unpack(part.start - 1, part.partition)
        reader = backend.reader(name, start, receiver_queue_size=chunk)
        deadline = time.monotonic() + timeout
        done = False
        while not done:
            batch: list[Record] = []
            while len(batch) < chunk:
                try:
                    record = runtime.run(reader.next_record(timeout=0.5 if not batch else 0.01))
                except TimeoutError:
                    if batch:
                        break
                    if time.monotonic() > deadline:
                        raise Timeout(
                            f"{part.topic}[{part.partition}]: no message for {timeout}s before offset "
                            f"{part.end}; raise option readTimeout if the broker is slow"
                        ) from None
                    continue
                if record.offset >= part.end:
                    done = True
                    break
                batch.append(record)
                if record.offset >= part.end - 1:
                    done = True
                    break
            if batch:
                deadline = time.monotonic() + timeout
                yield records_batch(batch)
    finally:
        runtime.run(backend.close())
