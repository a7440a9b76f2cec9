"""The ``broker`` data source: PySpark's Python Data Source API over every polybroker backend.

Imported by :func:`broker.contrib.spark.register` only (it imports PySpark). Spark pickles these classes
by reference, so Spark's Python workers must be able to import ``broker.contrib.spark`` (install
polybroker into the interpreter ``PYSPARK_PYTHON`` names).

* ``spark.read.format("broker")`` - a batch read of offset ranges (``startingOffsets``,
  ``endingOffsets``);
* ``spark.readStream.format("broker")`` - replayable backends (Kafka, JetStream, Pulsar) keep
  ``{topic: {partition: next offset}}`` in the checkpoint, so a restarted query resumes with
  no loss and no duplicates from the source; other backends (Pub/Sub, Service Bus, or any with
  ``mode=ack``) use the journaling, acknowledge-on-commit reader of :mod:`broker.contrib.spark.acks`;
* ``df.write.format("broker")`` / ``writeStream.format("broker")`` - publish rows through the
  backend's publisher with a deterministic message id per row (:mod:`broker.contrib.spark.sink`).

Reads yield :data:`broker.contrib.spark.arrow.READ_SCHEMA` on every backend: ``key binary, value binary,
topic string, partition int, offset long, timestamp timestamp, attributes map<string,binary>, id
string`` (keys and attribute values are the bytes the broker holds; ``CAST(key AS STRING)`` where
they are text). The sink takes those rows as they are, or string keys and attribute values.

Options (case does not matter; all values are strings):

=========================  ======================================================================
``url`` / ``urlEnv``       the broker (or ``config`` / ``configEnv`` JSON, ``setting.<name>``,
                           ``secretEnv.<name>``; see :mod:`broker.contrib.spark.options`)
``topic``                  topic(s) to read (Kafka: comma-separated) or to write to (else the
                           ``topic`` column)
``startingOffsets``        ``earliest`` (default), ``latest`` or JSON ``{"t": {"0": 42}}``
                           (``-2`` earliest, ``-1`` latest); ignored on restart (the checkpoint wins)
``endingOffsets``          batch reads: ``latest`` (default) or JSON
``group``                  Kafka: start from this consumer group's commits and commit each
                           finished micro-batch there (``commitGroup=false`` to only read them)
``maxRecordsPerTrigger``   at most this many offsets per micro-batch (PySpark 4.2+; Kafka,
                           JetStream; alias ``maxOffsetsPerTrigger``)
``failOnDataLoss``         Kafka: fail when a range's records are gone (default ``true``)
``readTimeout``            seconds a range may wait for its records (default 120)
``fetchRecords``           records per fetch and per Arrow batch (Kafka 50,000; others 1,000)
``mode``                   ``replay`` / ``ack`` / ``auto`` (default: replay where possible)
``subscription``           ack mode: the subscription to consume
``journal``                ack mode: directory for the batch journal (shared with executors)
``pullTimeout``            ack mode: seconds one pull waits (default 1)
``extendInterval``         ack mode: seconds between deadline extensions (default 10)
``idAttribute``            sink: attribute carrying the message id (``none`` to omit)
``trace.<name>``           sink: attribute ``<name>`` for rows without a ``traceparent``
                           (``broker.contrib.spark.trace_options()`` makes them on the driver)
``valueFormat``            ``avro``: decode registry-framed Avro values into columns (with
                           ``avroSchema``, ``avroColumnPrefix``, ``schemaRegistryUrl``,
                           ``schemaRegistryAuthEnv``; see
                           :mod:`broker.contrib.spark.registry_avro`)
=========================  ======================================================================
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from broker.contrib.spark import _compat, registry_avro
from broker.contrib.spark.acks import AckSource, read_journal
from broker.contrib.spark.arrow import READ_SCHEMA
from broker.contrib.spark.offsets import (
    Offsets,
    Range,
    limit_offsets,
    parse_position,
    plan_ranges,
    resolve_position,
)
from broker.contrib.spark.options import Options
from broker.contrib.spark.sink import write_batches
from broker.errors import ConfigError, NotSupported

__all__ = ["BrokerDataSource"]

log = logging.getLogger("broker.contrib.spark")

if _compat.has_read_limits():
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    _AVAILABLE_NOW: tuple[type, ...] = (SupportsTriggerAvailableNow,)
else:  # PySpark 4.1: no admission control, no AvailableNow hook
    ReadLimit = object  # type: ignore[misc,assignment]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc,assignment]
    _AVAILABLE_NOW = ()

#: Backends whose records can be read again from an offset.
REPLAYABLE = ("kafka", "nats", "pulsar")


class RangePartition(InputPartition):
    """One Spark task: the records ``[start, end)`` of one partition."""

    def __init__(self, part: Range) -> None:
        super().__init__(None)
        self.topic = part.topic
        self.partition = part.partition
        self.start = part.start
        self.end = part.end

    def range(self) -> Range:
        """The range as a plain value."""
        return Range(self.topic, self.partition, self.start, self.end)


class JournalPartition(InputPartition):
    """One Spark task of an acknowledging source: journaled messages ``[start, end)``."""

    def __init__(self, journal: str, start: int, end: int) -> None:
        super().__init__(None)
        self.journal = journal
        self.start = start
        self.end = end


@dataclass
class Written(WriterCommitMessage):
    """What one writer task reports to the driver."""

    rows: int
    partition: int


def _mode(options: Options) -> str:
    mode = (options.get("mode") or "").lower()
    scheme = options.scheme()
    if mode in ("", "auto"):
        return "replay" if scheme in REPLAYABLE else "ack"
    if mode == "replay" and scheme not in REPLAYABLE:
        raise NotSupported(
            f"{scheme}:// cannot be replayed from offsets by this source; use mode=ack "
            "(journal + acknowledge on commit, at-least-once)"
        )
    if mode not in ("replay", "ack"):
        raise ConfigError(f"option 'mode' is 'replay', 'ack' or 'auto', got {mode!r}")
    return mode


class _Planner:
    """The per-backend driver side of a replayable source."""

    def __init__(self, options: Options) -> None:
        scheme = options.scheme()
        if scheme == "kafka":
            from broker.contrib.spark.kafka_source import KafkaPlanner

            self.impl: Any = KafkaPlanner(options)
        elif scheme == "nats":
            from broker.contrib.spark.jetstream_source import JetStreamPlanner

            self.impl = JetStreamPlanner(options)
        elif scheme == "pulsar":
            from broker.contrib.spark.pulsar_source import PulsarPlanner

            self.impl = PulsarPlanner(options)
        else:
            raise NotSupported(f"{scheme}:// has no replayable source here; use mode=ack")
        self.scheme = scheme

    def bounds(self) -> tuple[Offsets, Offsets]:
        result: tuple[Offsets, Offsets] = self.impl.bounds()
        return result

    def close(self) -> None:
        self.impl.close()


def _read_range(options: Options, part: Range) -> Iterator[Any]:
    batches = _read_raw_range(options, part)
    if registry_avro.enabled(options):
        return registry_avro.decoded_batches(options, batches)
    return batches


def _read_raw_range(options: Options, part: Range) -> Iterator[Any]:
    scheme = options.scheme()
    if scheme == "kafka":
        from broker.contrib.spark import kafka_source

        return kafka_source.read_range(options, part)
    if scheme == "nats":
        from broker.contrib.spark import jetstream_source

        return jetstream_source.read_range(options, part)
    if scheme == "pulsar":
        from broker.contrib.spark import pulsar_source

        return pulsar_source.read_range(options, part)
    raise NotSupported(f"{scheme}:// has no replayable source here")


def _start(options: Options, planner: _Planner, earliest: Offsets, latest: Offsets) -> Offsets:
    group = options.get("group")
    text = options.get("startingOffsets")
    if group is not None and text is None and planner.scheme == "kafka":
        committed = planner.impl.committed(group)
        start = resolve_position("earliest", earliest, latest)
        for topic, partitions in committed.items():
            start.setdefault(topic, {}).update(partitions)
        return start
    return resolve_position(parse_position(text, "earliest"), earliest, latest)


class BrokerBatchReader(DataSourceReader):
    """``spark.read.format("broker")``: the records between two positions, one task per partition."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per non-empty topic partition range."""
        if _mode(self.options) != "replay":
            raise NotSupported(f"batch reads need a replayable backend ({', '.join(REPLAYABLE)})")
        planner = _Planner(self.options)
        try:
            earliest, latest = planner.bounds()
            start = _start(self.options, planner, earliest, latest)
            end_text = self.options.get("endingOffsets")
            end = resolve_position(parse_position(end_text, "latest"), earliest, latest)
        finally:
            planner.close()
        return [RangePartition(r) for r in plan_ranges(start, end, earliest)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one range (on an executor)."""
        if not isinstance(partition, RangePartition):  # Spark reads one empty partition for no ranges
            return iter(())
        return _read_range(self.options, partition.range())


class BrokerStreamReader(DataSourceStreamReader, *_AVAILABLE_NOW):  # type: ignore[misc]
    """``spark.readStream.format("broker")`` on a replayable backend: offset ranges in the checkpoint."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.max_records = options.get_int("maxRecordsPerTrigger", options.get_int("maxOffsetsPerTrigger", 0))
        if self.max_records:
            _compat.require_read_limits("option maxRecordsPerTrigger")
            if options.scheme() == "pulsar":
                raise NotSupported("maxRecordsPerTrigger: Pulsar offsets (packed message ids) are not dense")
        self._planner: _Planner | None = None
        self._target: Offsets | None = None
        self._earliest: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_planner"] = None
        return state

    @property
    def planner(self) -> _Planner:
        """The driver's connection for offsets (opened on first use, kept between triggers)."""
        if self._planner is None:
            self._planner = _Planner(self.options)
        return self._planner

    def _bounds(self) -> tuple[Offsets, Offsets]:
        earliest, latest = self.planner.bounds()
        self._earliest = earliest
        return earliest, latest

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts (``startingOffsets``: earliest, latest or JSON; or ``group``'s commit)."""
        earliest, latest = self._bounds()
        return _start(self.options, self.planner, earliest, latest)

    def prepareForTriggerAvailableNow(self) -> None:
        """AvailableNow: read up to the offsets that exist now, then stop."""
        self._target = self._bounds()[1]

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The end of the next micro-batch (never behind ``start``; within the read limit)."""
        end = self._target if self._target is not None else self._bounds()[1]
        begin = start or {}
        out: Offsets = {}
        for topic, partitions in end.items():
            out[topic] = {}
            for partition, stop in partitions.items():
                out[topic][partition] = max(int(stop), int(begin.get(topic, {}).get(partition, 0)))
        for topic, partitions in begin.items():  # a partition never goes away from the offsets
            for partition, offset in partitions.items():
                out.setdefault(topic, {}).setdefault(partition, int(offset))
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            out = limit_offsets(begin, out, limit.max_rows)
        return out

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxRecordsPerTrigger)`` when that option is set."""
        if self.max_records and ReadMaxRows is not None:
            return ReadMaxRows(self.max_records)
        assert ReadAllAvailable is not None
        return ReadAllAvailable()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task per partition with records in ``[start, end)``."""
        return [RangePartition(r) for r in plan_ranges(start, end, self._earliest)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one range (on an executor)."""
        if not isinstance(partition, RangePartition):  # Spark reads one empty partition for no ranges
            return iter(())
        return _read_range(self.options, partition.range())

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished everything below ``end``; with option ``group`` (Kafka), commit it there too."""
        group = self.options.get("group")
        if (
            group is not None
            and self.planner.scheme == "kafka"
            and self.options.get_bool("commitGroup", True)
        ):
            from broker.contrib.spark.kafka_source import commit_group

            commit_group(self.options, group, {t: dict(ps) for t, ps in end.items()})

    def stop(self) -> None:
        """Close the driver's connection."""
        if self._planner is not None:
            planner, self._planner = self._planner, None
            planner.close()


class AckStreamReader(DataSourceStreamReader, *_AVAILABLE_NOW):  # type: ignore[misc]
    """``spark.readStream.format("broker")`` on a queue: journal, then acknowledge on commit."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.source: AckSource | None = AckSource(options)
        self.journal = self.source.journal

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["source"] = None
        return state

    def _source(self) -> AckSource:
        if self.source is None:
            self.source = AckSource(self.options)
        return self.source

    def initialOffset(self) -> dict[str, Any]:
        """After whatever the journal holds already."""
        return self._source().initial()

    def prepareForTriggerAvailableNow(self) -> None:
        """AvailableNow: stop once a pull comes back empty."""
        self._source().available_now = True

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """Pull and journal the next messages; their end offset."""
        source = self._source()
        begin = start or source.initial()
        max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        return source.latest(begin, max_rows)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task reading the journal."""
        first, last = int(start.get("seq", 0)), int(end.get("seq", 0))
        return [JournalPartition(self.journal, first, last)] if last > first else []

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The journaled rows (on an executor)."""
        assert isinstance(partition, JournalPartition)
        batches = read_journal(partition.journal, partition.start, partition.end)
        if registry_avro.enabled(self.options):
            return registry_avro.decoded_batches(self.options, batches)
        return batches

    def commit(self, end: dict[str, Any]) -> None:
        """Acknowledge everything below ``end``."""
        self._source().commit(end)

    def stop(self) -> None:
        """Acknowledge what the checkpoint committed, close the connection."""
        if self.source is not None:
            self.source.stop()


class BrokerBatchWriter(DataSourceArrowWriter):
    """``df.write.format("broker")``: publish every row; ids ``<write id>:<task>:<row>``."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Publish one task's rows (on an executor)."""
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        rows = write_batches(self.options, iterator, f"{self.write_id}:{partition}")
        return Written(rows, partition)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded (their messages are already published)."""
        total = sum(m.rows for m in messages if isinstance(m, Written))
        log.info("broker sink: wrote %d rows", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed: published rows stay published (at-least-once)."""
        log.warning("broker sink: write aborted; rows of successful tasks are already published")


class BrokerStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("broker")``: ids ``<query id>:<batch id>:<task>:<row>``."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Publish one task's rows of a micro-batch (on an executor)."""
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("the broker stream writer runs inside a Spark task")
        partition = context.partitionId()
        query = context.getLocalProperty("sql.streaming.queryId") or "query"
        batch = context.getLocalProperty("streaming.sql.batchId") or "batch"
        rows = write_batches(self.options, iterator, f"{query}:{batch}:{partition}")
        return Written(rows, partition)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch is done."""
        total = sum(m.rows for m in messages if isinstance(m, Written))
        log.debug("broker sink: batch %d wrote %d rows", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A task failed: the batch runs again after a restart, publishing the same ids."""
        log.warning("broker sink: batch %d aborted; its rows are written again on retry", batchId)


class BrokerDataSource(DataSource):
    """The ``broker`` format: read and write any polybroker backend from Spark."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("broker")``."""
        return "broker"

    def _options(self) -> Options:
        return Options(dict(self.options))

    def schema(self) -> str:
        """:data:`broker.contrib.spark.arrow.READ_SCHEMA`, then the decoded Avro columns with
        ``valueFormat=avro``."""
        options = self._options()
        if registry_avro.enabled(options):
            return f"{READ_SCHEMA}, {registry_avro.extra_schema(options)}"
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader."""
        return BrokerBatchReader(self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader: offset ranges, or journal-and-acknowledge for queues."""
        options = self._options()
        if _mode(options) == "ack":
            return AckStreamReader(options)
        return BrokerStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> BrokerBatchWriter:
        """A batch writer."""
        return BrokerBatchWriter(self._options())

    def streamWriter(self, schema: StructType, overwrite: bool) -> BrokerStreamWriter:
        """A streaming writer."""
        return BrokerStreamWriter(self._options())
