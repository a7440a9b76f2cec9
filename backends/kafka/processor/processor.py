"""The processor: runs a group graph's callbacks over co-partitioned inputs with a group table.

Start-up follows goka's order: check that inputs and joins are co-partitioned (equal partition
counts), create the loop and table topics when missing (the table compacted), recover every
lookup view, then join the consumer group. On each assignment the owned partitions' group
table and joined tables are recovered (in parallel) before any of their input is processed.
With ``recover_ahead`` (goka's ``WithRecoverAhead``) every partition's tables are recovered
before joining and then followed as hot standbys, so an assignment recovers only their tail.

Processing is batched: one poll returns up to ``batch_size`` records and each is handled
sequentially (so per partition in offset order) by its callback. Emits and loopbacks are sent
at once, without waiting. A *checkpoint* follows every ``commit_interval`` seconds or
``commit_every`` messages, and whenever input pauses: it writes the table changes made since the
last checkpoint (coalesced per key: the table topic is compacted, so only the last value
matters, as in Quix Streams' changelogs), waits until the log acknowledged every send, flushes
the local stores with the table offset, and only then commits the input offsets. So an input
offset is committed only after its callback returned and every emit, loopback and table write
it caused succeeded (the commit rule); any failure stops the processor with nothing since the
last checkpoint committed, and a restart reprocesses it (at-least-once). With
``auto_reconnect=True`` a broker failure (not a callback's) restarts the processor by itself
after a backoff (``backoff``, reset after ``backoff_reset`` seconds of healthy running).

Co-partitioning across instances relies on the log's group assignment giving each member the
same partition numbers of every subscribed topic. The in-memory log does; on Kafka the processor
forces librdkafka's ``range`` assignor, which does for topics of equal partition counts, and
refuses (``ConfigError`` at start) a connection set for another strategy or for
``group.protocol=consumer`` (see :mod:`.assignment`). An assignment that still splits a partition
number across members stops the processor with :class:`NotCopartitioned`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

from broker import Record
from broker.backends.kafka.processor.assignment import group_consumer_options, kafka_log_of
from broker.backends.kafka.processor.context import Context
from broker.backends.kafka.processor.defaults import memory_when_locked, resolve_processor_storage
from broker.backends.kafka.processor.errors import (
    CallbackFailed,
    GraphError,
    NotCopartitioned,
    NotOwned,
    ProcessorError,
    StorageLocked,
    VisitAborted,
)
from broker.backends.kafka.processor.graph import Edge, GroupGraph
from broker.backends.kafka.processor.partition import PartitionState
from broker.backends.kafka.processor.settings import (
    Assignment,
    NilHandling,
    ProcessorOptions,
    ProcessorState,
    RestartBackoff,
    resolve_partitioner,
)
from broker.backends.kafka.processor.stats import (
    InputStats,
    OutputStats,
    PartitionStats,
    ProcessorStats,
    TableStats,
    table_stats,
)
from broker.backends.kafka.processor.storage import Storage
from broker.backends.kafka.processor.table import (
    KeyPlacement,
    PartitionTable,
    TableFollower,
    TableStatus,
    mark_running,
    partitioner_name,
    recover,
)
from broker.backends.kafka.processor.topics import TopicManager, TopicManagerConfig, resolve_topic_manager
from broker.backends.kafka.processor.view import View
from broker.codecs import Codec
from broker.errors import (
    AuthenticationFailed,
    BrokerError,
    ClosedError,
    ConfigError,
    DecodeError,
    EncodeError,
    InvalidMessage,
    MessageTooLarge,
    MissingDependency,
    NotSupported,
    PermissionDenied,
    UnknownTopic,
)
from broker.log import Log, LogConsumer, TopicPartition, with_client_id

if TYPE_CHECKING:
    from broker.backends.kafka.processor.tracing import CallbackTracing

__all__ = ["Processor"]

log = logging.getLogger("broker.backends.kafka.processor")


#: Failures a restart cannot cure: the processor stops on them even with ``auto_reconnect``.
_PERMANENT: tuple[type[BaseException], ...] = (
    ProcessorError,
    ConfigError,
    ClosedError,
    MissingDependency,
    InvalidMessage,
    NotSupported,
    PermissionDenied,
    AuthenticationFailed,
    MessageTooLarge,
    UnknownTopic,
    EncodeError,
    DecodeError,
)


def restartable_failure(exc: BaseException) -> bool:
    """True for a broker failure a restart may cure (the log unreachable, a send or poll failing).

    Callback failures, graph and co-partitioning errors, configuration and codec errors are not.
    """
    if isinstance(exc, _PERMANENT):
        return False
    return isinstance(exc, BrokerError | OSError | TimeoutError)


class _Listener:
    """Forwards the consumer's rebalance calls to the processor (keeps them off its public API)."""

    def __init__(self, proc: Processor) -> None:
        self.proc = proc

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        await self.proc._on_assigned(partitions)

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        await self.proc._on_revoked(partitions)


class _InputEdge:
    """An input (or loop) edge, flattened for the hot path."""

    __slots__ = ("callback", "codec", "is_async", "topic")

    def __init__(self, edge: Edge) -> None:
        assert edge.callback is not None
        self.topic = edge.topic
        self.codec = edge.codec
        self.callback = edge.callback
        self.is_async = edge.is_async


class Processor:
    """Runs ``graph`` on ``log_port``: ``await Processor(log, graph).run()`` until ``stop()``.

    Options are the fields of :class:`ProcessorOptions`, given as ``options=`` and/or keywords.
    """

    def __init__(
        self,
        log_port: Log,
        graph: GroupGraph,
        options: ProcessorOptions | None = None,
        **overrides: Any,
    ) -> None:
        if not isinstance(graph, GroupGraph):
            raise TypeError(f"graph must be a GroupGraph (use define_group), got {type(graph).__name__}")
        graph.validate()
        self.graph = graph
        self.options = ProcessorOptions.build(options, overrides)
        self._port = log_port
        #: Creates the loop, table and missing stream topics (goka's topic manager).
        self._topics = resolve_topic_manager(
            self.options.topic_manager,
            with_client_id(log_port, self.options.client_id),
            self.options.topic_config or TopicManagerConfig(table_config=self.options.table_config),
        )
        #: The stores' builder: ``storage``, or the default (disk on Kafka, memory elsewhere).
        self._storage = resolve_processor_storage(self.options.storage, log_port, graph.group)
        #: goka's ``WithLogger``: this processor's logger (default: the module's).
        self._logger: logging.Logger = self.options.logger or log
        #: On Kafka the ``range`` assignor, forced; other assignors are refused here (ConfigError).
        self._member_options = group_consumer_options(log_port, graph.group)
        self._log = with_client_id(log_port, self.options.client_id)
        self._partitioner = resolve_partitioner(self.options.partitioner)
        table_edge = graph.table_edge
        self._table_codec: Codec[Any] | None = table_edge.codec if table_edge is not None else None
        loop_edge = graph.loop_edge
        self._loop_codec: Codec[Any] | None = loop_edge.codec if loop_edge is not None else None
        self._inputs: dict[str, _InputEdge] = {e.topic: _InputEdge(e) for e in graph.input_streams}
        self._visitors: dict[str, Edge] = {e.topic: e for e in graph.visitors}
        if self.options.graph_hook is not None:
            self.options.graph_hook(graph)
        #: Visits asked for and not run yet: (visitor, meta, future of the number of keys visited).
        self._visits: list[tuple[Edge, Any, asyncio.Future[int]]] = []
        if loop_edge is not None:
            self._inputs[loop_edge.topic] = _InputEdge(loop_edge)
        self._any_async = any(edge.is_async for edge in self._inputs.values())  # the loop's too
        self._outputs: dict[str, Codec[Any]] = {e.topic: e.codec for e in graph.output_streams}
        self._join_codecs: dict[str, Codec[Any]] = {e.topic: e.codec for e in graph.joint_tables}
        self._lookups: dict[str, View] = {}
        self._partition_counts: dict[str, int] = {}
        self._npar = 0
        self._consumer: LogConsumer | None = None
        self._assigned: set[TopicPartition] = set()
        self._parts: dict[int, PartitionState] = {}
        #: Partitions assigned whose tables are being recovered (not yet in ``_parts``).
        self._opening: list[PartitionState] = []
        self._joins = TableFollower(self._log)
        #: Hot standby: tables of partitions not owned, kept up to date (partition -> its tables).
        self._standby: dict[int, list[PartitionTable]] = {}
        self._standby_follower = TableFollower(self._log, batch_size=max(self.options.batch_size, 10_000))
        self._standby_task: asyncio.Task[None] | None = None
        self._pending: list[Awaitable[tuple[TopicPartition, int]]] = []
        self._touched: set[PartitionState] = set()
        self._defer_tokens = 0
        self._state = ProcessorState.IDLE
        self._error: BaseException | None = None
        self._stopping = False
        self._ready = asyncio.Event()
        self._finished = asyncio.Event()
        self._recovering = False
        self._aborted = False
        self._manual = False
        self._uncommitted = 0
        self._checkpointed = 0.0
        self._task: asyncio.Task[None] | None = None
        self._runner: asyncio.Task[Any] | None = None
        self._ran = False
        self._restarts = 0
        self._headers: Mapping[str, str] = dict(self.options.headers)
        self._nil = self.options.nil_handling
        #: With ``tracer_provider``: the callbacks' spans and trace propagation (None: off).
        self._tracing: CallbackTracing | None = None
        if self.options.tracer_provider is not None:
            from broker.backends.kafka.processor.tracing import CallbackTracing, system_of

            self._tracing = CallbackTracing(
                self.options.tracer_provider, self.options.propagator, graph.group, system_of(log_port)
            )

    def __repr__(self) -> str:
        return f"<Processor {self.graph.group!r} {self._state.value} partitions={sorted(self._parts)}>"

    # -- public state ---------------------------------------------------------------------
    @property
    def state(self) -> ProcessorState:
        """Where the processor is in its life."""
        return self._state

    @property
    def error(self) -> BaseException | None:
        """Why the processor stopped, if it failed."""
        return self._error

    @property
    def partitions(self) -> frozenset[int]:
        """The partition numbers this instance owns."""
        return frozenset(self._parts)

    @property
    def recovered(self) -> bool:
        """True when lookups and every owned partition's tables are recovered and input flows."""
        return self._ready.is_set()

    @property
    def restarts(self) -> int:
        """How many times ``auto_reconnect`` restarted this processor after a broker failure."""
        return self._restarts

    def recovering_stats(self) -> dict[int, PartitionStats]:
        """Partitions assigned whose tables are still being recovered: their tables' progress.

        A snapshot; a partition moves to :attr:`partitions` (and :meth:`stats`) once recovered.
        """
        return {state.partition: state.stats() for state in self._opening}

    def standby_stats(self) -> dict[int, dict[str, TableStats]]:
        """With ``hot_standby`` (or ``recover_ahead``): the tables followed per partition not owned."""
        return {p: {t.topic: table_stats(t) for t in tables} for p, tables in sorted(self._standby.items())}

    # -- set-up ---------------------------------------------------------------------------
    @property
    def topic_manager(self) -> TopicManager:
        """The topic manager creating this processor's topics (``offset_for_time`` too)."""
        return self._topics

    async def _partitions_of(self, topic: str, create: int | None, *, table: bool = False) -> int:
        topics = self._topics
        try:
            return await topics.partitions(topic)
        except UnknownTopic:
            if create is None:
                raise
        if table:
            await topics.ensure_table(topic, create)
        else:
            await topics.ensure_stream(topic, create)
        return await topics.partitions(topic)

    async def _setup(self, *, manual: bool = False) -> None:
        """Check and create topics, recover lookups, join the group (``manual``: driven by a Tester)."""
        self._manual = manual
        self._state = ProcessorState.STARTING
        self._checkpointed = asyncio.get_running_loop().time()  # the interval counts from the start
        graph = self.graph
        counts: dict[str, int] = {}
        joined = {edge.topic for edge in graph.joint_tables}
        for edge in (*graph.input_streams, *graph.joint_tables):
            try:
                counts[edge.topic] = await self._partitions_of(
                    edge.topic, self.options.create_partitions, table=edge.topic in joined
                )
            except UnknownTopic as exc:
                raise ProcessorError(
                    f"group {graph.group!r}: {edge!r} topic {edge.topic!r} does not exist "
                    "(create it, or set create_partitions)"
                ) from exc
        if len(set(counts.values())) > 1:
            listing = ", ".join(f"{t}={n}" for t, n in sorted(counts.items()))
            raise NotCopartitioned(
                f"group {graph.group!r}: inputs and joins must have equal partition counts, got {listing}"
            )
        npar = self._npar = next(iter(counts.values()))
        own: list[tuple[str, bool]] = []
        if graph.loop_edge is not None:
            own.append((graph.loop_topic, False))
        if graph.table_edge is not None:
            own.append((graph.table_topic, True))
        for topic, is_table in own:
            try:
                if is_table:
                    await self._topics.ensure_table(topic, npar)
                else:
                    await self._topics.ensure_stream(topic, npar)
            except BrokerError as exc:
                raise NotCopartitioned(
                    f"group {graph.group!r}: cannot use {topic!r} with {npar} partitions: {exc}"
                ) from exc
            counts[topic] = npar
        for edge in graph.output_streams:
            counts[edge.topic] = await self._partitions_of(edge.topic, npar)
        self._partition_counts = counts
        self._start_lookups()
        self._state = ProcessorState.SETUP
        await self._recover_lookups()
        if self.options.recover_ahead:
            await self._recover_ahead()
        self._consumer = self._group_consumer(self._member_options)

    def _group_consumer(self, member_options: Mapping[str, Any]) -> LogConsumer:
        """Join the group; on Kafka with the co-partitioning ``range`` assignor forced."""
        graph = self.graph
        topics = list(graph.consumed_topics)
        listener = _Listener(self)
        kafka = kafka_log_of(self._port) if member_options else None
        if kafka is None:
            return self._log.consumer(graph.group, topics, start=self.options.start, listener=listener)
        client_id = self.options.client_id
        if client_id is None and kafka is not self._port:
            client_id = getattr(self._port, "client_id", None)
        consumer: LogConsumer = kafka.consumer(
            graph.group,
            topics,
            start=self.options.start,
            listener=listener,
            client_id=client_id,
            **member_options,
        )
        return consumer

    def _start_lookups(self) -> None:
        build = self._storage
        for edge in self.graph.lookup_tables:

            def prefixed(name: str, partition: int, _build: Any = build) -> Storage:
                return _build(f"view-{name}", partition)  # type: ignore[no-any-return]

            view = View(
                self._log,
                edge.topic,
                edge.codec,
                # A lookup view holds every partition: another process of the group on this host
                # holds the same stores, so a locked one is kept in memory instead.
                storage=memory_when_locked(prefixed, f"lookup view of {edge.topic!r}", self._logger),
                partitioner=self.options.partitioner,
                update_callback=self.options.update_callback,
                poll_timeout=self.options.poll_timeout,
                auto_reconnect=True,
                logger=self._logger,
            )
            self._lookups[edge.topic] = view

    async def _recover_lookups(self) -> None:
        if self._manual:
            for view in self._lookups.values():
                await view._step(0)
            return
        for view in self._lookups.values():
            view.start()
        for view in self._lookups.values():
            await view.wait_running()

    # -- rebalancing ----------------------------------------------------------------------
    async def _on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        self._ready.clear()
        self._assigned.update(partitions)
        owned = self._check_copartitioned()
        added = sorted(owned - set(self._parts))
        if added:
            await self._open_partitions(added)
        self._sync_standby()
        await self._rebalanced(frozenset(added), frozenset())
        self._ready.set()

    async def _on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        self._assigned.difference_update(partitions)
        gone = sorted({tp.partition for tp in partitions} & set(self._parts))
        if not gone:
            return
        if self._error is None:
            await self._wait_deferred(gone)
            if self._error is None:
                await self._commit()
        for p in gone:
            state = self._parts.pop(p)
            if self._keeps_standby and self._error is None:
                self._to_standby(state)
            else:
                self._close_partition(state, flush=self._error is None)
        self._sync_standby()
        await self._rebalanced(frozenset(), frozenset(gone))

    def _check_copartitioned(self) -> set[int]:
        topics = self.graph.consumed_topics
        numbers = {tp.partition for tp in self._assigned}
        missing = [
            TopicPartition(t, p)
            for p in numbers
            for t in topics
            if TopicPartition(t, p) not in self._assigned
        ]
        if missing:
            raise NotCopartitioned(
                f"group {self.graph.group!r}: the assignment is not co-partitioned; this member got "
                f"{sorted(self._assigned)} but not {sorted(missing)}. Use an assignor that gives every "
                "member the same partition numbers of each topic (Kafka: 'range')."
            )
        return numbers

    async def _rebalanced(self, added: frozenset[int], revoked: frozenset[int]) -> None:
        callback = self.options.rebalance_callback
        if callback is None:
            return
        owned = sorted(self._parts)
        offsets: dict[int, int] = {}
        if owned:
            first = self.graph.input_streams[0].topic
            committed = await self._log.committed(self.graph.group, [TopicPartition(first, p) for p in owned])
            offsets = {tp.partition: -1 if offset is None else offset for tp, offset in committed.items()}
        result = callback(Assignment(frozenset(self._parts), added, revoked, offsets))
        if inspect.isawaitable(result):
            await result

    async def _open_partitions(self, numbers: Sequence[int]) -> None:
        build = self._storage
        update = self.options.update_callback
        states: list[PartitionState] = []
        tables: list[PartitionTable] = []
        try:
            for p in numbers:
                standby = {t.topic: t for t in self._from_standby(p)}
                table = None
                if self.graph.table_edge is not None:
                    topic = self.graph.table_topic
                    table = standby.get(topic) or PartitionTable(topic, p, build(topic, p), update)
                    tables.append(table)
                joins = {}
                for edge in self.graph.joint_tables:
                    joined = standby.get(edge.topic) or PartitionTable(
                        edge.topic, p, build(edge.topic, p), update
                    )
                    joins[edge.topic] = joined
                    tables.append(joined)
                states.append(PartitionState(p, table, joins))
            self._opening = states
            self._recovering = True
            placement = KeyPlacement(
                self._partitioner, partitioner_name(self.options.partitioner), self._npar
            )
            owner = f"processor {self.graph.group!r}"
            await recover(self._log, tables, placement=placement, owner=owner, logger=self._logger)
            mark_running(tables)
        except BaseException:
            for table in tables:
                table.storage.close()
            raise
        finally:
            self._recovering = False
            self._opening = []
        for state in states:
            self._parts[state.partition] = state
            self._joins.add(state.joins.values())

    # -- hot standby ----------------------------------------------------------------------
    @property
    def _keeps_standby(self) -> bool:
        return self.options.hot_standby or self.options.recover_ahead

    async def _recover_ahead(self) -> None:
        """``recover_ahead``: recover every partition's tables now, before joining the group.

        They become standbys (followed from here on), so each assignment reads only their tail.
        """
        tables: list[PartitionTable] = []
        for p in range(self._npar):
            if p in self._parts or p in self._standby:
                continue
            partition_tables = self._standby_tables(p)
            if partition_tables:
                self._standby[p] = partition_tables  # closed by the teardown if recovery fails
                tables += partition_tables
        if not tables:
            return
        placement = KeyPlacement(self._partitioner, partitioner_name(self.options.partitioner), self._npar)
        await recover(
            self._log,
            tables,
            placement=placement,
            owner=f"processor {self.graph.group!r}",
            logger=self._logger,
        )
        mark_running(tables)
        self._standby_follower.add(tables)
        self._sync_standby()  # starts following them

    def _standby_tables(self, p: int) -> list[PartitionTable]:
        build = self._storage
        update = self.options.update_callback
        topics: list[str] = [self.graph.table_topic] if self.graph.table_edge is not None else []
        topics += [edge.topic for edge in self.graph.joint_tables]
        tables: list[PartitionTable] = []
        try:
            for topic in topics:
                tables.append(PartitionTable(topic, p, build(topic, p), update))
        except StorageLocked as exc:
            # Another process on this host owns (or keeps) partition p: no standby of it here.
            self._logger.info("%r: no hot standby of partition %d: %s", self.graph.group, p, exc)
            for table in tables:
                table.storage.close()
            return []
        return tables

    async def _follow_standby(self) -> None:
        """Apply table records to the standby stores as they arrive (the stores' only writer)."""
        follower = self._standby_follower
        while True:
            try:
                if not await follower.step(self.options.poll_timeout if self._standby else None):
                    await asyncio.sleep(self.options.poll_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a standby is an optimisation: keep the processor running
                self._logger.warning(
                    "%r: following the standby tables failed (retrying): %r", self.graph.group, exc
                )
                await asyncio.sleep(1.0)

    def _sync_standby(self) -> None:
        """With ``hot_standby`` (or ``recover_ahead``): follow the tables of every partition not owned."""
        if not self._keeps_standby or not self._npar:
            return
        if self._standby_task is None and not self._manual:
            self._standby_task = asyncio.get_running_loop().create_task(
                self._follow_standby(), name=f"processor-{self.graph.group}-standby"
            )
        for p in range(self._npar):
            if p in self._parts or p in self._standby:
                continue
            tables = self._standby_tables(p)
            if tables:
                for table in tables:
                    table.status = TableStatus.RECOVERING
                self._standby[p] = tables
                self._standby_follower.add(tables)

    def _from_standby(self, p: int) -> list[PartitionTable]:
        """Take partition ``p``'s standby tables (empty without one): its owner recovers the tail."""
        tables = self._standby.pop(p, [])
        if tables:
            self._standby_follower.remove([t.tp for t in tables])
        return tables

    def _let_go(self, state: PartitionState) -> list[PartitionTable]:
        """Stop following ``state``'s joins and forget it was touched; returns its tables (joins first)."""
        self._touched.discard(state)
        self._joins.remove([t.tp for t in state.joins.values()])
        tables = list(state.joins.values())
        if state.table is not None:
            tables.append(state.table)
        return tables

    def _to_standby(self, state: PartitionState) -> None:
        """Keep a revoked partition's tables as its standby (flushed, never closed)."""
        tables = self._let_go(state)
        for table in tables:
            with contextlib.suppress(Exception):
                table.storage.flush()
        if tables:
            self._standby[state.partition] = tables
            self._standby_follower.add(tables)

    @property
    def standby_partitions(self) -> frozenset[int]:
        """Partitions whose tables this member keeps up to date without owning them (hot standby)."""
        return frozenset(self._standby)

    def _close_partition(self, state: PartitionState, *, flush: bool) -> None:
        for table in self._let_go(state):
            if flush:
                with contextlib.suppress(Exception):
                    table.storage.flush()
            table.storage.close()
            table.status = TableStatus.STOPPED

    # -- processing -----------------------------------------------------------------------
    def _send(
        self,
        part: PartitionState,
        topic: str,
        key: str | None,
        data: bytes | None,
        headers: Mapping[str, str] | None,
        trace: Mapping[str, str] | None = None,
    ) -> None:
        """Queue an emit or loopback of ``part``'s current message.

        Headers: the processor's ``headers`` option, then the callback's trace context (``trace``,
        with tracing on), then the call's own ``headers``; later ones win.
        """
        if trace:
            merged = dict(self._headers)
            merged.update(trace)
            if headers:
                merged.update(headers)
            attributes: Mapping[str, str] | None = merged
        elif headers:
            merged = dict(self._headers)
            merged.update(headers)
            attributes = merged
        else:
            attributes = self._headers or None
        partition = None
        if key is not None:
            partition = self._partitioner(key.encode(), self._partition_counts[topic])
        self._pending.append(self._log.send(topic, data, key=key, partition=partition, attributes=attributes))
        stats = part.outputs.get(topic)
        if stats is None:
            stats = part.outputs[topic] = OutputStats()
        stats.count += 1
        stats.bytes += len(data) if data is not None else 0

    def _defer(self, part: PartitionState, record: Record) -> Callable[[BaseException | None], None]:
        self._defer_tokens += 1
        token = self._defer_tokens
        part.deferred[token] = (TopicPartition(record.topic, record.partition), record.offset)

        def done(error: BaseException | None = None) -> None:
            if part.deferred.pop(token, None) is None:
                return
            if error is not None and self._error is None:
                failure = CallbackFailed(
                    f"deferred commit of {record.topic}[{record.partition}]@{record.offset} failed: {error}"
                )
                failure.__cause__ = error
                self._error = failure

        return done

    async def _process(self, records: list[Record]) -> None:
        """Handle ``records``: with async callbacks, the runs of different partitions concurrently.

        Records of one partition keep their order (one callback at a time); at most
        ``partition_concurrency`` partitions are handled at once. The first failure cancels the
        others and is raised (the processor then stops without committing).
        """
        bound = self.options.partition_concurrency
        if bound > 1 and self._any_async and len(records) > 1:
            runs: dict[int, list[Record]] = {}
            for record in records:
                runs.setdefault(record.partition, []).append(record)
            if len(runs) > 1:
                await self._process_concurrently(list(runs.values()), bound)
                return
        await self._process_run(records)

    async def _process_concurrently(self, runs: list[list[Record]], bound: int) -> None:
        slots = asyncio.Semaphore(bound)

        async def handle(run: list[Record]) -> None:
            async with slots:
                await self._process_run(run)

        tasks = [asyncio.ensure_future(handle(run)) for run in runs]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:  # the first failure, in record order
            if task in done and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def _process_run(self, records: list[Record]) -> None:
        parts = self._parts
        inputs = self._inputs
        touched = self._touched
        nil = self._nil
        tracing = self._tracing
        now = time.time()  # one reading per run: the delays of its records
        for record in records:
            part = parts.get(record.partition)
            if part is None:  # a record of a partition revoked meanwhile: its new owner handles it
                self._logger.warning(
                    "skipping %s[%d]@%d: partition not owned", record.topic, record.partition, record.offset
                )
                continue
            edge = inputs[record.topic]
            touched.add(part)
            stats = part.inputs.get(record.topic)
            if stats is None:
                stats = part.inputs[record.topic] = InputStats()
            stats.count += 1
            stats.last_offset = record.offset
            stamp = record.publish_time
            if stamp is not None:
                stats.delay = max(0.0, now - stamp)
            raw = record.value
            tp = TopicPartition(record.topic, record.partition)
            if raw is None:
                if nil is NilHandling.IGNORE:
                    part.next_offsets[tp] = record.offset + 1
                    continue
                if nil is NilHandling.PROCESS:
                    message = None
                else:
                    message = self._decode(edge, record, b"")
            else:
                stats.bytes += len(raw)
                message = self._decode(edge, record, raw)
            ctx = Context(self, part, record)
            try:
                if tracing is not None:
                    await tracing.call(edge.callback, edge.is_async, ctx, message)
                elif edge.is_async:
                    await edge.callback(ctx, message)  # type: ignore[misc]
                else:
                    edge.callback(ctx, message)
            except ProcessorError:
                raise
            except Exception as exc:
                raise CallbackFailed(
                    f"callback for {record.topic}[{record.partition}]@{record.offset} raised {exc!r}"
                ) from exc
            if ctx._error is not None:
                raise ctx._error
            part.next_offsets[tp] = record.offset + 1

    def _decode(self, edge: _InputEdge, record: Record, raw: bytes) -> Any:
        try:
            return edge.codec.decode(raw)
        except Exception as exc:
            raise ProcessorError(
                f"cannot decode {record.topic}[{record.partition}]@{record.offset} with the codec of "
                f"{record.topic!r}: {exc}"
            ) from exc

    async def _commit(self) -> None:
        """Write the batch's table changes, wait for every send, flush stores, commit offsets."""
        touched = self._touched
        table_topic = self.graph.table_topic
        table_sends: list[tuple[PartitionState, Awaitable[tuple[TopicPartition, int]]]] = []
        for part in touched:
            dirty = part.dirty
            if dirty:
                send = self._log.send
                p = part.partition
                table_sends.extend((part, send(table_topic, v, key=k, partition=p)) for k, v in dirty.items())
                if part.table is not None:
                    part.table.writes += len(dirty)
                dirty.clear()
        pending, self._pending = self._pending, []
        try:
            for future in pending:
                await future
        except BaseException:
            await asyncio.gather(*pending, return_exceptions=True)  # retrieve the other failures
            raise
        last: dict[PartitionState, int] = {}
        for part, future in table_sends:
            _, offset = await future
            if offset > last.get(part, -1):
                last[part] = offset
        for part, offset in last.items():
            assert part.store is not None
            part.store.set_offset(offset + 1)
            part.store.flush()
        offsets: dict[TopicPartition, int] = {}
        for part in self._parts.values():
            ready = part.commit_offsets()
            if ready:
                offsets.update(ready)
                part.committed.update(ready)
        touched.clear()
        if offsets and self._consumer is not None:
            await self._consumer.commit(offsets)

    async def _wait_deferred(self, numbers: Sequence[int]) -> None:
        parts = [self._parts[p] for p in numbers if p in self._parts]
        if not any(p.deferred for p in parts):
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.options.defer_timeout):
                while any(p.deferred for p in parts) and self._error is None:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)

    async def _step(self, timeout: float, *, checkpoint: bool = False) -> int:
        """One batch: catch up joins, poll, process, checkpoint when due. Returns the records processed."""
        assert self._consumer is not None
        if self._lookups:
            await self._check_lookups()
        if self._joins.tables:
            await self._joins.step(0)
        if self._standby and self._manual:  # running, a task of its own follows them
            await self._standby_follower.step(0)
        records = await self._consumer.poll(self.options.batch_size, timeout)
        if self._error is not None:
            raise self._error
        if records:
            await self._process(records)
            self._uncommitted += len(records)
        if self._visits:
            await self._run_visits()
            checkpoint = True
        loop = asyncio.get_running_loop()
        if (
            checkpoint
            or not records
            or self._uncommitted >= self.options.commit_every
            or loop.time() - self._checkpointed >= self.options.commit_interval
        ):
            await self._commit()
            self._uncommitted = 0
            self._checkpointed = loop.time()
        if self._error is not None:
            raise self._error
        return len(records)

    async def visit_all(self, name: str, meta: Any = None) -> int:
        """Run visitor ``name`` once for every key of the group table this instance owns.

        Runs between input batches (never beside a callback) and returns the number of keys
        visited once their table writes were checkpointed. Raises :class:`VisitAborted` if the
        processor stops or a partition is revoked before every key was visited, ``GraphError`` for
        an unknown visitor.
        """
        edge = self._visitors.get(name)
        if edge is None:
            known = ", ".join(sorted(self._visitors)) or "none"
            raise GraphError(f"group {self.graph.group!r} has no visitor {name!r} (visitors: {known})")
        if self._finished.is_set() or self._stopping or not (self._ran or self._manual):
            raise VisitAborted(f"processor {self.graph.group!r} is not running")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._visits.append((edge, meta, future))
        if self._manual:  # the Tester drives the loop: run it now
            try:
                await self._run_visits()
            finally:
                if future.done() and not future.cancelled():
                    future.exception()  # raised here instead: never "unretrieved"
            await self._commit()
        return await future

    async def _run_visits(self) -> None:
        visits, self._visits = self._visits, []
        for position, (edge, meta, future) in enumerate(visits):
            try:
                visited = await self._visit(edge, meta)
            except BaseException as exc:
                failure = exc if isinstance(exc, ProcessorError) else VisitAborted(str(exc))
                for _, _, later in visits[position:]:
                    if not later.done():
                        later.set_exception(failure)
                raise
            if not future.done():
                future.set_result(visited)

    async def _visit(self, edge: Edge, meta: Any) -> int:
        visited = 0
        assert edge.callback is not None
        for number in sorted(self._parts):
            part = self._parts.get(number)
            if part is None or part.store is None:
                continue
            keys = [key for key, _ in part.store.iterate()]
            for key in keys:
                if self._parts.get(number) is not part:
                    raise VisitAborted(f"partition {number} was revoked during visit {edge.topic!r}")
                record = Record(edge.topic, number, -1, None, key=key)
                ctx = Context(self, part, record)
                self._touched.add(part)
                try:
                    if edge.is_async:
                        await edge.callback(ctx, meta)  # type: ignore[misc]
                    else:
                        edge.callback(ctx, meta)
                except ProcessorError:
                    raise
                except Exception as exc:
                    raise CallbackFailed(f"visitor {edge.topic!r} for key {key!r} raised {exc!r}") from exc
                if ctx._error is not None:
                    raise ctx._error
                visited += 1
        return visited

    def _abort_visits(self) -> None:
        visits, self._visits = self._visits, []
        for _, _, future in visits:
            if not future.done():
                future.set_exception(VisitAborted(f"processor {self.graph.group!r} stopped"))

    async def _check_lookups(self) -> None:
        for view in self._lookups.values():
            if self._manual:
                await view._step(0)
            elif view._task is not None and view._task.done():
                exc = view._task.exception() if not view._task.cancelled() else None
                raise ProcessorError(f"lookup view of {view.topic!r} stopped: {exc!r}") from exc

    async def _teardown(self) -> None:
        self._abort_visits()
        failed = self._error is not None or self._aborted
        self._state = ProcessorState.STOPPING
        consumer = self._consumer
        if consumer is not None:
            if not failed:
                try:
                    await self._wait_deferred(list(self._parts))
                    await self._commit()
                except Exception as exc:
                    self._logger.warning("the last checkpoint of %r failed: %r", self.graph.group, exc)
                    self._error = exc
                    failed = True
            try:
                await consumer.close()  # on_revoked commits what is left, unless failed
            except Exception as exc:
                self._logger.warning("closing the consumer of %r failed: %s", self.graph.group, exc)
            self._consumer = None
        for p in list(self._parts):
            self._close_partition(self._parts.pop(p), flush=not failed)
        self._pending.clear()
        self._touched.clear()
        with contextlib.suppress(Exception):
            await self._joins.close()
        if self._standby_task is not None:
            self._standby_task.cancel()
            with contextlib.suppress(BaseException):
                await self._standby_task
            self._standby_task = None
        with contextlib.suppress(Exception):
            await self._standby_follower.close()
        standby, self._standby = self._standby, {}
        for tables in standby.values():
            for table in tables:
                with contextlib.suppress(Exception):
                    if not failed:
                        table.storage.flush()
                    table.storage.close()
                table.status = TableStatus.STOPPED
        for view in self._lookups.values():
            with contextlib.suppress(Exception):
                await view.stop()
        if not failed:
            with contextlib.suppress(Exception):
                await self._log.flush(10.0)
        self._ready.clear()
        self._state = ProcessorState.FAILED if failed else ProcessorState.STOPPED

    # -- running --------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until :meth:`stop` (returns) or a failure (raises :class:`ProcessorError`).

        With ``auto_reconnect`` a broker failure (see :func:`restartable_failure`) tears the
        processor down and sets it up again after the ``backoff`` delay, as often as needed;
        it recovers from the committed offsets, so nothing since the last checkpoint is lost.
        """
        if self._ran:
            raise ClosedError("a processor runs only once; create a new one")
        self._ran = True
        self._runner = asyncio.current_task()
        loop = asyncio.get_running_loop()
        backoff = RestartBackoff(self.options.backoff, self.options.backoff_reset)
        try:
            while True:
                began = loop.time()
                await self._run_once()
                error = self._error
                if error is None or self._stopping or not self.options.auto_reconnect:
                    break
                if not restartable_failure(error):
                    break
                delay = backoff.next_delay(loop.time() - began)
                self._logger.warning(
                    "processor %r failed (%r); restarting in %.2fs (restart %d in a row)",
                    self.graph.group,
                    error,
                    delay,
                    backoff.attempt,
                )
                await self._wait_to_restart(delay)
                if self._stopping:  # stopped while waiting: a clean stop, not a failure
                    self._error = None
                    self._state = ProcessorState.STOPPED
                    break
                self._reset_for_restart()
                self._restarts += 1
        finally:
            self._finished.set()
        error = self._error
        if error is not None:
            if isinstance(error, ProcessorError):
                raise error
            raise ProcessorError(f"processor {self.graph.group!r} stopped: {error!r}") from error

    async def _run_once(self) -> None:
        """Set up, process until stopped or failed (the failure lands in ``_error``), tear down."""
        try:
            await self._setup()
            self._state = ProcessorState.RUNNING
            timeout = self.options.poll_timeout
            while not self._stopping:
                await self._step(timeout)
        except asyncio.CancelledError:
            # Cancelled mid-batch: sends may be unconfirmed, so nothing more is committed.
            self._aborted = True
            raise
        except BaseException as exc:
            if self._error is None:
                self._error = exc
        finally:
            await self._teardown()

    async def _wait_to_restart(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less if :meth:`stop` is called meanwhile."""
        deadline = asyncio.get_running_loop().time() + delay
        while not self._stopping:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            await asyncio.sleep(min(remaining, 0.05))

    def _reset_for_restart(self) -> None:
        """Forget a failed run (its teardown closed everything) so that ``_setup`` starts afresh."""
        self._error = None
        self._aborted = False
        self._assigned.clear()
        self._parts.clear()
        self._standby.clear()
        self._lookups = {}
        self._partition_counts = {}
        self._pending.clear()
        self._touched.clear()
        self._uncommitted = 0
        self._joins = TableFollower(self._log)
        self._standby_follower = TableFollower(self._log, batch_size=max(self.options.batch_size, 10_000))
        self._ready.clear()
        self._state = ProcessorState.STARTING

    def start(self) -> asyncio.Task[None]:
        """Run in a background task (see :meth:`wait_ready`, :meth:`stop`)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name=f"processor-{self.graph.group}"
            )
        return self._task

    async def stop(self, timeout: float | None = None) -> None:
        """Finish the current batch, commit, release the partitions and stop (idempotent).

        Does not raise the processor's failure; :attr:`error` (or awaiting :meth:`run`) does.
        """
        if not self._ran or self._finished.is_set():
            return
        self._stopping = True
        if asyncio.current_task() is self._runner:
            return  # called from a callback: the loop stops after this batch
        try:
            async with asyncio.timeout(timeout):
                await self._finished.wait()
        except TimeoutError:
            if self._task is not None:
                self._task.cancel()
        task = self._task
        if task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until lookups and owned partitions are recovered and input is being processed."""
        async with asyncio.timeout(timeout):
            while not self._ready.is_set():
                task = self._task
                if task is not None and task.done():
                    task.result()
                    raise ClosedError(f"processor {self.graph.group!r} stopped before it was ready")
                waiter = asyncio.ensure_future(self._ready.wait())
                pending: set[asyncio.Future[Any]] = {waiter}
                if task is not None:
                    pending.add(task)
                try:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()

    async def __aenter__(self) -> Self:
        self.start()
        await self.wait_ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- reading --------------------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The group table's value of ``key`` (``None`` if absent); :class:`NotOwned` elsewhere."""
        if self._table_codec is None:
            raise ProcessorError(f"group {self.graph.group!r} has no group table (no persist edge)")
        if not self._npar:
            raise NotOwned(f"processor {self.graph.group!r} owns no partitions yet")
        p = self._partitioner(key.encode(), self._npar)
        part = self._parts.get(p)
        if part is None or part.store is None:
            raise NotOwned(f"key {key!r} is in partition {p}, which this instance does not own")
        data = part.store.get(key)
        return None if data is None else self._table_codec.decode(data)

    async def stats(self) -> ProcessorStats:
        """Per-partition input/output counts and lag, table recovery progress, lookup views."""
        out = ProcessorStats()
        for p, part in sorted(self._parts.items()):
            snapshot = part.stats()
            for topic in self.graph.consumed_topics:
                stats = snapshot.inputs.setdefault(topic, InputStats())
                tp = TopicPartition(topic, p)
                with contextlib.suppress(Exception):
                    low, high = await self._log.watermarks(tp)
                    position = part.next_offsets.get(tp)
                    if position is None:
                        position = (await self._log.committed(self.graph.group, [tp])).get(tp) or low
                    stats.lag = max(0, high - position)
            out.group[p] = snapshot
        for name, view in self._lookups.items():
            out.lookups[name] = view.stats()
        return out
