"""``run_group``: a processor group graph as one Spark Structured Streaming query.

The group's input topics and its loop topic are read by the ``broker`` source (one query,
offsets in the checkpoint; Kafka inputs start from the group's committed offsets and the group's
offsets are committed as Spark commits batches, so a single-machine
:class:`~broker.backends.kafka.processor.Processor` can take over), grouped by message key, and handed
to :class:`GroupProcessor` through ``transformWithState``. It runs the graph's **own callbacks**
with the processor's own :class:`~broker.backends.kafka.processor.Context` class, so ``value``,
``set_value``, ``delete``, ``emit``, ``loopback``, ``headers``, ``timestamp`` and the misuse
errors behave as on one machine. The group table lives in Spark's state store (RocksDB), one
value per key holding the same bytes as the ``<group>-table`` topic. Emits, loopbacks and each
key's final table value of a micro-batch are written by the ``broker`` sink; the table updates
go to ``<group>-table`` (tombstones for deletes), so a single-machine processor or a
:class:`~broker.backends.kafka.processor.View` can take over the table. A new query starts from that
topic's content (``initialState``).

Guarantees: the table is exactly-once (state and source offsets move together in the
checkpoint); emits and table records are at-least-once, and a replayed batch repeats them with
identical message ids (``<group>:<source topic>:<partition>:<offset>:<emit index>``).

Keys and headers: the source yields binary keys and attribute values (see
:mod:`broker.contrib.spark.arrow`); the operator groups by those bytes and hands callbacks the
library's ``str`` (``decode("utf-8", "surrogateescape")``, as the Kafka backend's own reads do),
so a key or header that is not UTF-8 reaches ``ctx.key`` / ``ctx.headers`` exactly as on one
machine. :data:`OUTPUT_SCHEMA` is binary for ``key`` and attribute values as well (``key
binary``, ``attributes map<string,binary>``), not string: emitted keys and headers are encoded
back with ``surrogateescape`` and the table row carries the grouping key's bytes unchanged, so
such keys are written byte-exact by the ``broker`` sink (a ``string`` column could not hold them:
Arrow refuses the surrogate escapes). The operator's rows go to the ``broker`` sink only, which
takes binary or string keys and attribute values alike.

Within a micro-batch a key's messages are handled in (timestamp, topic, partition, offset)
order; loopbacks reach the group one micro-batch later. Not supported on Spark yet (raise
:class:`~broker.contrib.spark.errors.UnsupportedOnSpark`): ``join`` and ``lookup`` edges,
``ctx.join``/``ctx.lookup``, ``ctx.defer_commit()``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from broker import Record
from broker.backends.kafka.processor.context import Context
from broker.backends.kafka.processor.errors import CallbackFailed, ProcessorError
from broker.backends.kafka.processor.graph import GroupGraph
from broker.backends.kafka.processor.settings import NilHandling
from broker.contrib.spark import runtime
from broker.contrib.spark.arrow import to_bytes, to_text
from broker.contrib.spark.errors import UnsupportedOnSpark
from broker.contrib.spark.options import Options
from broker.driver.acking import EMPTY_ATTRIBUTES
from broker.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["OUTPUT_SCHEMA", "GroupProcessor", "check_graph", "run_group"]

#: What the stateful operator yields: rows for the ``broker`` sink (keys and attribute values as
#: bytes, like the source's :data:`~broker.contrib.spark.arrow.READ_SCHEMA`).
OUTPUT_SCHEMA = "topic string, key binary, value binary, attributes map<string,binary>, id string"


def check_graph(graph: GroupGraph) -> None:
    """Raise :class:`UnsupportedOnSpark` for edges ``run_group`` cannot run yet."""
    if not isinstance(graph, GroupGraph):
        raise TypeError(f"run_group needs a GroupGraph (define_group), got {type(graph).__name__}")
    graph.validate()
    unsupported = [*graph.joint_tables, *graph.lookup_tables]
    if unsupported:
        raise UnsupportedOnSpark(
            f"group {graph.group!r}: {', '.join(repr(e) for e in unsupported)} are not supported on "
            "Spark yet; run this group with the single-machine Processor"
        )


class _KeyStore:
    """The group-table row of the key being handled (what ``Context`` reads and writes)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | None) -> None:
        self.data = data

    def get(self, key: str) -> bytes | None:
        return self.data

    def set(self, key: str, data: bytes) -> None:
        self.data = data

    def delete(self, key: str) -> None:
        self.data = None


class _Partition:
    """Stands in for the processor's partition state: the key's store and its changes."""

    __slots__ = ("dirty", "joins", "store")

    def __init__(self, store: _KeyStore | None) -> None:
        self.store = store
        self.dirty: dict[str, bytes | None] = {}
        self.joins: dict[str, Any] = {}


class _Runner:
    """Stands in for the processor behind ``Context``: codecs, and sends collected as rows."""

    def __init__(self, graph: GroupGraph, headers: Mapping[str, str]) -> None:
        self.graph = graph
        table = graph.table_edge
        loop = graph.loop_edge
        self._table_codec = table.codec if table is not None else None
        self._loop_codec = loop.codec if loop is not None else None
        self._outputs = {e.topic: e.codec for e in graph.output_streams}
        self._join_codecs: dict[str, Any] = {}
        self._lookups: dict[str, Any] = {}
        self._headers = dict(headers)
        self.sent: list[tuple[str, str | None, bytes | None, dict[str, str] | None]] = []

    def _send(
        self,
        part: _Partition,
        topic: str,
        key: str | None,
        data: bytes | None,
        headers: Mapping[str, str] | None,
        trace: Mapping[str, str] | None = None,
    ) -> None:
        if trace:
            headers = {**trace, **headers} if headers else trace
        attributes = {**self._headers, **headers} if headers else (dict(self._headers) or None)
        self.sent.append((topic, key, data, attributes))

    def _defer(self, part: _Partition, record: Record) -> Any:
        raise UnsupportedOnSpark("ctx.defer_commit() is not supported on Spark yet")


def _seconds(value: Any) -> float | None:
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return None


def _attributes(
    pairs: Mapping[str, bytes | bytearray | None] | Iterable[tuple[str, bytes | bytearray | None]] | None,
) -> Mapping[str, str]:
    """A row's ``attributes`` as the library's ``str -> str`` attributes.

    Values are binary; the map comes as a mapping, or as ``(name, value)`` pairs (how Spark hands
    a map column to the operator).
    """
    if not pairs:
        return EMPTY_ATTRIBUTES
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    return {name: to_text(value) or "" for name, value in items}


def _attribute_bytes(attributes: Mapping[str, str] | None) -> dict[str, bytes | None] | None:
    """Attributes a callback sent, as the ``map<string,binary>`` of :data:`OUTPUT_SCHEMA`."""
    if attributes is None:
        return None
    return {name: to_bytes(value) for name, value in attributes.items()}


def _order(row: Row) -> tuple[float, str, int, int]:
    stamp = _seconds(row["timestamp"])
    return (stamp if stamp is not None else 0.0, row["topic"], row["partition"], row["offset"])


class GroupProcessor(StatefulProcessor):
    """``transformWithState`` processor running a group graph's callbacks for one key at a time."""

    def __init__(
        self,
        graph: GroupGraph,
        *,
        headers: Mapping[str, str] | None = None,
        nil_handling: NilHandling = NilHandling.IGNORE,
    ) -> None:
        check_graph(graph)
        self.graph = graph
        self.headers = dict(headers or {})
        self.nil_handling = nil_handling
        self._table: Any = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Open the group table's value state (when the graph persists a table)."""
        if self.graph.table_edge is not None:
            self._table = handle.getValueState("table", "value binary")

    def handleInitialState(self, key: Any, initialState: Row, timerValues: TimerValues) -> None:
        """Seed a key's table value from the ``<group>-table`` topic (first batch of a new query)."""
        if self._table is not None and initialState["value"] is not None:
            self._table.update((bytes(initialState["value"]),))

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        """Run the callbacks on this key's messages; yield emits, loopbacks and the table update."""
        graph = self.graph
        group = graph.group
        inputs = {e.topic: e for e in graph.input_streams}
        loop = graph.loop_edge
        if loop is not None:
            inputs[loop.topic] = loop
        store: _KeyStore | None = None
        if self._table is not None:
            current = self._table.get() if self._table.exists() else None
            store = _KeyStore(bytes(current[0]) if current and current[0] is not None else None)
        part = _Partition(store)
        runner = _Runner(graph, self.headers)
        last: Row | None = None
        for row in sorted(rows, key=_order):
            last = row
            topic = row["topic"]
            edge = inputs.get(topic)
            if edge is None or edge.callback is None:
                raise ConfigError(f"group {group!r} got a message of {topic!r}, which is none of its inputs")
            raw = row["value"]
            record = Record(
                topic,
                row["partition"],
                row["offset"],
                bytes(raw) if raw is not None else None,
                to_text(row["key"]),
                _attributes(row["attributes"]),
                _seconds(row["timestamp"]),
            )
            if raw is None:
                if self.nil_handling is NilHandling.IGNORE:
                    continue
                message = None if self.nil_handling is NilHandling.PROCESS else edge.codec.decode(b"")
            else:
                try:
                    message = edge.codec.decode(bytes(raw))
                except Exception as exc:
                    raise ProcessorError(
                        f"cannot decode {topic}[{record.partition}]@{record.offset} with the codec of "
                        f"{topic!r}: {exc}"
                    ) from exc
            ctx = Context(runner, part, record)  # type: ignore[arg-type]
            try:
                if edge.is_async:
                    runtime.run(edge.callback(ctx, message))  # type: ignore[arg-type]
                else:
                    edge.callback(ctx, message)
            except ProcessorError:
                raise
            except Exception as exc:
                raise CallbackFailed(
                    f"callback for {topic}[{record.partition}]@{record.offset} raised {exc!r}"
                ) from exc
            if ctx._error is not None:
                raise ctx._error
            sent, runner.sent = runner.sent, []
            for index, (target, out_key, data, attributes) in enumerate(sent):
                yield Row(
                    topic=target,
                    key=to_bytes(out_key),
                    value=data,
                    attributes=_attribute_bytes(attributes),
                    id=f"{group}:{topic}:{record.partition}:{record.offset}:{index}",
                )
        if store is not None and part.dirty and last is not None:
            if store.data is None:
                self._table.clear()
            else:
                self._table.update((store.data,))
            yield Row(
                topic=graph.table_topic,
                key=bytes(key[0]) if key[0] is not None else None,
                value=store.data,
                attributes=None,
                id=f"{group}:table:{last['topic']}:{last['partition']}:{last['offset']}",
            )

    def close(self) -> None:
        """Nothing to release (the processor holds no clients)."""


def _ensure_topics(options: Options, graph: GroupGraph) -> None:
    """Create the loop and table topics (Kafka) with the inputs' partition count when missing."""
    backend: Any = options.connect()

    async def ensure() -> None:
        async with backend:
            make_log = getattr(backend, "log", None)
            if make_log is None:
                return
            log = make_log()
            counts = [await log.partitions(e.topic) for e in graph.input_streams]
            if len(set(counts)) > 1:
                raise ConfigError(
                    f"group {graph.group!r}: inputs are not co-partitioned "
                    f"({dict(zip(graph.consumed_topics, counts, strict=False))})"
                )
            count = counts[0]
            loop = graph.loop_edge
            if loop is not None:
                await log.create_topic(loop.topic, count)
            if graph.table_edge is not None:
                await log.create_topic(graph.table_topic, count, config={"cleanup.policy": "compact"})

    runtime.run(ensure())


def _has_offsets(checkpoint: str) -> bool:
    """True when a local ``checkpoint`` already holds offsets (Spark ignores initial state then)."""
    path = Path(checkpoint.removeprefix("file:")) / "offsets"
    return "://" not in checkpoint.removeprefix("file:") and path.is_dir() and any(path.iterdir())


def _initial_state(spark: SparkSession, options: Mapping[str, str], graph: GroupGraph) -> DataFrame | None:
    """The latest value per key of ``<group>-table`` (None when the topic is empty)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    table = spark.read.format("broker").options(**options).option("topic", graph.table_topic).load()
    latest = (
        table.withColumn("_n", F.row_number().over(Window.partitionBy("key").orderBy(F.col("offset").desc())))
        .where("_n = 1 and key is not null and value is not null")
        .select("key", "value")
    )
    if latest.isEmpty():
        return None
    return latest


def run_group(
    spark: SparkSession,
    graph: GroupGraph,
    *,
    checkpoint: str,
    url: str | None = None,
    options: Mapping[str, Any] | None = None,
    trigger: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    nil_handling: NilHandling = NilHandling.IGNORE,
    query_name: str | None = None,
    bootstrap_table: bool = True,
) -> StreamingQuery:
    """Start ``graph`` as a streaming query and return it (``query.awaitTermination()`` to wait).

    ``url`` (or the ``broker`` source options in ``options``: ``config``, ``secretEnv.*``, ...)
    names the broker; ``checkpoint`` holds offsets and the table state (keep it to resume).
    ``trigger`` is passed to ``DataStreamWriter.trigger`` (``{"availableNow": True}`` processes
    what is there and stops; default: micro-batches as data arrives). ``headers`` and
    ``nil_handling`` mean what they mean in :class:`~broker.backends.kafka.processor.ProcessorOptions`.
    With ``bootstrap_table`` a new query seeds its table from ``<group>-table``.
    """
    from broker.contrib.spark import register
    from broker.contrib.spark._compat import require_pyspark
    from broker.contrib.spark.errors import SparkVersionError

    pyspark = require_pyspark()
    check_graph(graph)
    source: dict[str, str] = {str(k): str(v) for k, v in (options or {}).items()}
    if url is not None:
        source["url"] = url
    for reserved in ("topic", "group", "checkpointlocation"):
        if reserved in {k.lower() for k in source}:
            raise ConfigError(f"run_group sets option {reserved!r} itself")
    grouped_data = spark.range(0).groupBy("id")
    if not hasattr(grouped_data, "transformWithState"):
        raise SparkVersionError("run_group (transformWithState)", "4.1", pyspark.__version__)
    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass", "") or ""
    if "RocksDB" not in provider:
        raise ConfigError(
            "run_group keeps the group table in Spark state with transformWithState, which needs the "
            "RocksDB state store: set spark.sql.streaming.stateStore.providerClass to "
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider "
            "(broker.contrib.spark.local_session() does)"
        )
    register(spark)
    _ensure_topics(Options(source), graph)
    initial = None
    if bootstrap_table and graph.table_edge is not None and not _has_offsets(checkpoint):
        initial = _initial_state(spark, source, graph)
    stream = (
        spark.readStream.format("broker")
        .options(**source)
        .option("topic", ",".join(graph.consumed_topics))
        .option("group", graph.group)
        .load()
        .select("key", "value", "topic", "partition", "offset", "timestamp", "attributes")
    )
    processor = GroupProcessor(graph, headers=headers, nil_handling=nil_handling)
    out = stream.groupBy("key").transformWithState(
        processor,
        OUTPUT_SCHEMA,
        "Append",
        "None",
        initialState=initial.groupBy("key") if initial is not None else None,
    )
    writer = out.writeStream.format("broker").options(**source).option("checkpointLocation", checkpoint)
    writer = writer.queryName(query_name or f"group-{graph.group}")
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()
