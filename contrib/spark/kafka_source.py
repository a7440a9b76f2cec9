"""Reading Kafka for Spark: partition bounds on the driver, offset ranges on the executors.

The driver side (:class:`KafkaPlanner`) asks the cluster for partitions and watermarks through
the backend's admin client. The executor side (:func:`read_range`) reads one ``[start, end)``
range with a confluent-kafka consumer configured from the same settings (security included),
assigned at ``start`` (no group, no commits), and turns each fetched chunk into one Arrow record
batch without a Python object per record (key, value and header values as the bytes on the
wire, undecoded: :func:`broker.contrib.spark.arrow.kafka_batch`). A range ends at ``end`` or at the
partition end the broker reports (transaction markers and aborted records leave gaps in offsets). A start
below the first retained offset fails the task (``failOnDataLoss``, default true) instead of
skipping silently.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from broker.backends.kafka import sdk
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.errors import translate
from broker.backends.kafka.rdkafka_config import reader_config
from broker.contrib.spark import runtime
from broker.contrib.spark.arrow import kafka_batch
from broker.contrib.spark.offsets import Offsets, Range
from broker.contrib.spark.options import Options
from broker.errors import ConfigError, ReceiveError, Timeout
from broker.log import TopicPartition

__all__ = ["DataLoss", "KafkaPlanner", "commit_group", "read_range"]


class DataLoss(ReceiveError):
    """Records a range needs are gone (retention or compaction removed them)."""


def _backend(options: Options) -> KafkaBackend:
    backend = options.connect()
    if not isinstance(backend, KafkaBackend):
        raise ConfigError(f"expected a kafka:// backend, got {type(backend).__name__}")
    return backend


class KafkaPlanner:
    """Partitions and watermarks of the source's topics, for the driver (one admin client)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.topics = options.topics()
        self._backend: KafkaBackend | None = None

    @property
    def backend(self) -> KafkaBackend:
        """The connection, opened on first use."""
        if self._backend is None:
            self._backend = _backend(self.options)
        return self._backend

    async def _bounds(self) -> tuple[Offsets, Offsets]:
        admin = self.backend.admin
        tps: list[TopicPartition] = []
        for topic in self.topics:
            count = await admin.partitions(topic)
            tps.extend(TopicPartition(topic, p) for p in range(count))
        marks = await admin.watermarks_many(tps)
        low: Offsets = {t: {} for t in self.topics}
        high: Offsets = {t: {} for t in self.topics}
        for tp, (first, nxt) in marks.items():
            low[tp.topic][str(tp.partition)] = max(first, 0)
            high[tp.topic][str(tp.partition)] = max(nxt, 0)
        return low, high

    def bounds(self) -> tuple[Offsets, Offsets]:
        """``(earliest, latest)`` offsets of every partition of every topic."""
        return runtime.run(self._bounds())

    def committed(self, group: str) -> Offsets:
        """The offsets ``group`` committed (partitions without a commit are left out)."""
        _, latest = self.bounds()
        tps = [TopicPartition(t, int(p)) for t, ps in latest.items() for p in ps]
        found = runtime.run(self.backend.admin.committed(group, tps))
        out: Offsets = {}
        for tp, offset in found.items():
            if offset is not None:
                out.setdefault(tp.topic, {})[str(tp.partition)] = offset
        return out

    def close(self) -> None:
        """Close the connection."""
        if self._backend is not None:
            backend, self._backend = self._backend, None
            runtime.run(backend.close())


def commit_group(options: Options, group: str, offsets: Offsets) -> None:
    """Commit ``offsets`` for consumer group ``group`` without joining it (for lag metrics and hand-over)."""
    backend = _backend(options)
    ck = sdk.confluent()
    settings = backend.settings
    config = reader_config(settings, settings.consumer_options())
    config["group.id"] = group
    consumer = ck.Consumer(config)
    try:
        tps = [ck.TopicPartition(t, int(p), o) for t, ps in offsets.items() for p, o in ps.items()]
        if tps:
            consumer.commit(offsets=tps, asynchronous=False)
    except ck.KafkaException as exc:
        raise translate(exc, f"committing offsets of group {group!r}") from exc
    finally:
        consumer.close()


def _consumer_config(options: Options) -> dict[str, Any]:
    settings = _backend(options).settings
    config = reader_config(settings, settings.consumer_options())
    config.update(
        {
            "group.id": f"polybroker-spark-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 50,
            "fetch.min.bytes": 1,
        }
    )
    config.update(settings.consumer_config or {})  # the user's raw settings still win
    return config


def read_range(options: Options, part: Range) -> Iterator[Any]:
    """Arrow record batches of the records ``[part.start, part.end)`` of one partition."""
    ck = sdk.confluent()
    chunk = options.get_int("fetchRecords", 50_000)
    timeout = options.get_float("readTimeout", 120.0)
    fail_on_loss = options.get_bool("failOnDataLoss", True)
    eof_code = ck.KafkaError._PARTITION_EOF
    lost_codes = {ck.KafkaError.OFFSET_OUT_OF_RANGE, ck.KafkaError._AUTO_OFFSET_RESET}
    consumer = ck.Consumer(_consumer_config(options))
    try:
        consumer.assign([ck.TopicPartition(part.topic, part.partition, part.start)])
        position = part.start
        end = part.end
        deadline = time.monotonic() + timeout
        while position < end:
            messages: Sequence[Any] = consumer.consume(min(chunk, end - position), 0.2)
            if not messages:
                if time.monotonic() > deadline:
                    raise Timeout(
                        f"{part.topic}[{part.partition}]: no records for {timeout}s at offset {position} "
                        f"(range ends at {end}); raise option readTimeout if the broker is slow"
                    )
                continue
            data = []
            reached = False
            for message in messages:
                error = message.error()
                if error is None:
                    data.append(message)
                elif error.code() == eof_code:
                    reached = reached or message.offset() >= end
                elif error.code() in lost_codes:
                    if fail_on_loss:
                        raise DataLoss(
                            f"{part.topic}[{part.partition}]: offset {position} is no longer retained "
                            f"({error.str()}); records up to {end} were lost. Set failOnDataLoss=false to "
                            "skip to the first retained record"
                        )
                    low, _ = consumer.get_watermark_offsets(ck.TopicPartition(part.topic, part.partition))
                    consumer.seek(ck.TopicPartition(part.topic, part.partition, max(low, position)))
                else:
                    raise translate(error, f"reading {part.topic}[{part.partition}]", ReceiveError)
            if data:
                if data[-1].offset() >= end:
                    data = [m for m in data if m.offset() < end]
                if data:
                    position = data[-1].offset() + 1
                    deadline = time.monotonic() + timeout
                    yield kafka_batch(data, part.topic, part.partition)
            if reached:
                break
    finally:
        consumer.close()
