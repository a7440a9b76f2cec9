"""Unit-testing group callbacks with no broker: processors and views driven step by step.

The tester runs real :class:`Processor` and :class:`View` objects on an in-memory log, without
background tasks: :meth:`Tester.consume` writes one message and then steps every registered
processor and view until none has anything left to do, so everything the message caused
(emits, loopbacks, table writes, the messages those caused in other processors) happened
before it returns. Unlike goka's tester, topics may have several partitions.

    async with Tester(partitions=2) as tester:
        proc = await tester.processor(graph)
        await tester.consume("clicks", "alice", "click")
        assert tester.table_value("counter-table", "alice") == 1

Message time (goka's ``WithTime``): ``consume(..., timestamp=t)`` sets the time a callback
sees as ``ctx.timestamp`` for that message, and ``Tester(clock=...)`` stamps every other message
a processor consumes (emits, loopbacks, messages consumed without ``timestamp=``) with the
clock's reading when the tester wrote or delivered it; a fixed time is ``clock=lambda: t``.
Without either, ``ctx.timestamp`` is the time the in-memory log stored the message.

The log defaults to a fresh ``broker.connect("inmem://tester-<random>").log()``; pass
``log=`` to share one. Only a log whose ``poll(timeout=0)`` returns every record already
written can be stepped this way (the in-memory log does; a network log does not).
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from broker import Record
from broker.backends.kafka.processor.codecs import resolve_codec
from broker.backends.kafka.processor.emitter import Emitter
from broker.backends.kafka.processor.errors import NotOwned, ProcessorError
from broker.backends.kafka.processor.graph import GroupGraph
from broker.backends.kafka.processor.processor import Processor
from broker.backends.kafka.processor.settings import ProcessorOptions, ProcessorState, resolve_partitioner
from broker.backends.kafka.processor.topics import posix_seconds
from broker.backends.kafka.processor.view import View
from broker.codecs import Codec
from broker.driver.resources import AsyncResource
from broker.errors import ConfigError, UnknownTopic
from broker.log import OFFSET_END, Log, LogConsumer, LogReader, TopicPartition

__all__ = ["Clock", "Tester", "Timestamp", "Tracker"]

#: Where a tester's message times come from: POSIX seconds, e.g. ``time.time`` or a fake clock.
Clock = Callable[[], float]
#: A message time: POSIX seconds or an aware ``datetime``.
Timestamp = float | datetime.datetime


def _seconds(value: Timestamp) -> float:
    return posix_seconds(value, "a timestamp datetime")


class _StampingConsumer(AsyncResource):
    """A processor's group consumer whose records carry the tester's message times."""

    def __init__(self, inner: LogConsumer, stamp: Callable[[Record], float | None]) -> None:
        self.inner = inner
        self._stamp = stamp

    async def poll(self, max_records: int = 500, timeout: float | None = None) -> list[Record]:
        """The inner consumer's records, re-stamped."""
        records = await self.inner.poll(max_records, timeout)
        out = []
        for record in records:
            when = self._stamp(record)
            out.append(record if when is None else dataclasses.replace(record, publish_time=when))
        return out

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit through the inner consumer."""
        await self.inner.commit(offsets)

    def assignment(self) -> frozenset[TopicPartition]:
        """The inner consumer's assignment."""
        return self.inner.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Seek the inner consumer."""
        self.inner.seek(partition, offset)

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Pause the inner consumer's ``partitions``."""
        self.inner.pause(partitions)

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Resume the inner consumer's ``partitions``."""
        self.inner.resume(partitions)

    async def close(self) -> None:
        """Close the inner consumer."""
        await self.inner.close()


class Tracker:
    """Reads what was written to a topic after the tracker was made (goka's queue tracker)."""

    def __init__(
        self,
        reader: LogReader,
        topic: str,
        codec: Codec[Any] | None,
        start: dict[int, int],
        log: Log | None = None,
    ) -> None:
        self._reader = reader
        self._log = log
        self.topic = topic
        self.codec = codec
        #: Where the tracker started, per partition.
        self.start = dict(start)

    async def next_record(self) -> Record | None:
        """The next record, or ``None`` when everything written so far was read."""
        records = await self._reader.poll(1, 0)
        return records[0] if records else None

    async def next(self) -> tuple[str | None, Any] | None:
        """The next ``(key, decoded value)``, or ``None`` when everything was read."""
        record = await self.next_record()
        if record is None:
            return None
        if record.value is None or self.codec is None:
            return record.key, record.value
        return record.key, self.codec.decode(record.value)

    async def drain(self) -> list[tuple[str | None, Any]]:
        """Every ``(key, value)`` not read yet."""
        out = []
        while (item := await self.next()) is not None:
            out.append(item)
        return out

    def next_offset(self, partition: int = 0) -> int:
        """The next offset the tracker reads in ``partition``."""
        return self._reader.position(TopicPartition(self.topic, partition))

    async def hwm(self, partition: int = 0) -> int:
        """The high watermark of ``partition``: the offset the next record written there gets."""
        if self._log is None:
            raise ConfigError("this tracker was made without its log (use Tester.tracker)")
        _, high = await self._log.watermarks(TopicPartition(self.topic, partition))
        return high

    def seek(self, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        tp = TopicPartition(self.topic, partition)
        self._reader.unassign([tp])
        self._reader.assign({tp: offset})

    async def close(self) -> None:
        """Release the reader."""
        await self._reader.close()


class Tester(AsyncResource):
    """Drives processors, views and trackers on an in-memory log, deterministically."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        log: Log | None = None,
        *,
        partitions: int = 1,
        partitioner: str = "murmur2",
        max_rounds: int = 100_000,
        clock: Clock | None = None,
    ) -> None:
        if partitions < 1:
            raise ConfigError(f"partitions must be >= 1, got {partitions}")
        self._backend: Any = None
        if log is None:
            import broker

            self._backend = broker.connect(f"inmem://tester-{uuid.uuid4().hex}")
            log = self._backend.log()
        self.log: Log = log
        self.partitions = partitions
        self.partitioner = partitioner
        self._partition_of = resolve_partitioner(partitioner)
        self.max_rounds = max_rounds
        self.processors: list[Processor] = []
        self.views: list[View] = []
        self._codecs: dict[str, Codec[Any]] = {}
        self._trackers: list[Tracker] = []
        #: The clock stamping messages consumed by processors (``None``: the log's own times).
        self.clock = clock
        self._stamps: dict[tuple[str, int, int], float] = {}

    # -- codecs and topics ----------------------------------------------------------------
    def register_codec(self, topic: str, codec: Codec[Any] | str) -> None:
        """Use ``codec`` for ``topic`` (graphs and views register theirs; conflicts are errors)."""
        resolved = resolve_codec(codec, f"topic {topic!r}")
        known = self._codecs.get(topic)
        if known is not None and type(known) is not type(resolved):
            raise ConfigError(
                f"topic {topic!r} is used with two codecs: "
                f"{type(known).__name__} and {type(resolved).__name__}"
            )
        self._codecs.setdefault(topic, resolved)

    def codec(self, topic: str) -> Codec[Any] | None:
        """The codec registered for ``topic``."""
        return self._codecs.get(topic)

    async def ensure_topic(self, topic: str, config: Mapping[str, str] | None = None) -> int:
        """``topic``'s partition count, creating it with the tester's partition count if missing."""
        try:
            return await self.log.partitions(topic)
        except UnknownTopic:
            await self.log.create_topic(topic, self.partitions, config=config)
            return self.partitions

    # -- components -----------------------------------------------------------------------
    async def processor(
        self, graph: GroupGraph, options: ProcessorOptions | None = None, **overrides: Any
    ) -> Processor:
        """Start a processor for ``graph`` in step mode (its inputs are created if missing)."""
        for topic, codec in graph.codecs().items():
            self.register_codec(topic, codec)
        for edge in graph.lookup_tables:
            await self.ensure_topic(edge.topic, {"cleanup.policy": "compact"})
        overrides.setdefault("partitioner", self.partitioner)
        if options is None or options.create_partitions is None:
            overrides.setdefault("create_partitions", self.partitions)
        proc = Processor(self.log, graph, options, **overrides)
        try:
            await proc._setup(manual=True)
            if proc._consumer is not None:
                proc._consumer = _StampingConsumer(proc._consumer, self._stamp_of)
            proc._state = ProcessorState.RUNNING
            await proc._step(0, checkpoint=True)
        except BaseException as exc:
            await self._fail(proc, exc)
            raise
        self.processors.append(proc)
        await self.settle()
        return proc

    async def view(self, table: str, codec: Codec[Any] | str, **options: Any) -> View:
        """A view of ``table``, stepped with everything else (the topic is created if missing)."""
        self.register_codec(table, codec)
        await self.ensure_topic(table, {"cleanup.policy": "compact"})
        options.setdefault("partitioner", self.partitioner)
        view = View(self.log, table, codec, **options)
        await view._step(0)
        self.views.append(view)
        return view

    def emitter(self, topic: str, codec: Codec[Any] | str | None = None) -> Emitter:
        """An emitter on the tester's log (call :meth:`settle` after emitting to process)."""
        chosen = codec if codec is not None else self._codecs.get(topic)
        if chosen is None:
            raise ConfigError(f"no codec known for {topic!r}; pass codec=")
        return Emitter(
            self.log, topic, chosen, partitioner=self.partitioner, create_partitions=self.partitions
        )

    async def tracker(self, topic: str, codec: Codec[Any] | str | None = None) -> Tracker:
        """A tracker of ``topic`` starting at its current end."""
        count = await self.ensure_topic(topic)
        chosen = resolve_codec(codec, f"tracker({topic!r})") if codec is not None else self._codecs.get(topic)
        reader = self.log.reader()
        reader.assign({TopicPartition(topic, p): OFFSET_END for p in range(count)})
        start = {p: reader.position(TopicPartition(topic, p)) for p in range(count)}
        tracker = Tracker(reader, topic, chosen, start, self.log)
        self._trackers.append(tracker)
        return tracker

    # -- time -----------------------------------------------------------------------------
    def _stamp_of(self, record: Record) -> float | None:
        when = self._stamps.get((record.topic, record.partition, record.offset))
        if when is None and self.clock is not None:
            when = _seconds(self.clock())
        return when

    def _remember(self, tp: TopicPartition, offset: int, timestamp: Timestamp | None) -> None:
        if timestamp is None and self.clock is not None:
            timestamp = self.clock()
        if timestamp is not None:
            self._stamps[(tp.topic, tp.partition, offset)] = _seconds(timestamp)

    # -- driving --------------------------------------------------------------------------
    def _encode(self, topic: str, value: Any, codec: Codec[Any] | str | None) -> bytes | None:
        if value is None:
            return None
        chosen = resolve_codec(codec, topic) if codec is not None else self._codecs.get(topic)
        if chosen is None:
            if isinstance(value, bytes):
                return value
            raise ConfigError(f"no codec known for {topic!r}; pass codec= or bytes")
        return chosen.encode(value)

    async def _write(
        self, topic: str, key: str | None, data: bytes | None, headers: Mapping[str, str] | None
    ) -> tuple[TopicPartition, int]:
        count = await self.ensure_topic(topic)
        partition = None if key is None else self._partition_of(key.encode(), count)
        return await self.log.produce(topic, data, key=key, partition=partition, attributes=headers)

    async def consume(
        self,
        topic: str,
        key: str | None,
        value: Any,
        *,
        headers: Mapping[str, str] | None = None,
        codec: Codec[Any] | str | None = None,
        timestamp: Timestamp | None = None,
    ) -> None:
        """Write one message to ``topic`` and process everything it causes before returning.

        ``timestamp`` (POSIX seconds or an aware ``datetime``) is what the callback sees as
        ``ctx.timestamp`` (goka's ``WithTime``); the default is the tester's ``clock``, if any.
        """
        tp, offset = await self._write(topic, key, self._encode(topic, value, codec), headers)
        self._remember(tp, offset, timestamp)
        await self.settle()

    async def consume_many(
        self,
        topic: str,
        items: Iterable[tuple[str | None, Any]],
        *,
        codec: Codec[Any] | str | None = None,
        timestamp: Timestamp | None = None,
    ) -> None:
        """Write many ``(key, value)`` messages, then process everything they cause.

        ``timestamp`` stamps them all (default: the tester's ``clock``, read once per message).
        """
        count = await self.ensure_topic(topic)
        send = self.log.send
        futures = []
        for key, value in items:
            data = self._encode(topic, value, codec)
            partition = None if key is None else self._partition_of(key.encode(), count)
            futures.append(send(topic, data, key=key, partition=partition))
        for future in futures:
            tp, offset = await future
            self._remember(tp, offset, timestamp)
        await self.settle()

    async def settle(self) -> int:
        """Step every processor and view until none has work; returns the records handled."""
        total = 0
        for _ in range(self.max_rounds):
            handled = 0
            for view in self.views:
                handled += await view._step(0)
            for proc in list(self.processors):
                try:
                    handled += await proc._step(0, checkpoint=True)
                except BaseException as exc:
                    await self._fail(proc, exc)
                    raise
            if handled == 0:
                return total
            total += handled
        raise ProcessorError(
            f"the processors did not settle within {self.max_rounds} rounds (an endless loop?)"
        )

    async def _fail(self, proc: Processor, exc: BaseException) -> None:
        if proc._error is None:
            proc._error = exc
        if proc in self.processors:
            self.processors.remove(proc)
        await proc._teardown()

    # -- tables ---------------------------------------------------------------------------
    def _holders(self, table: str) -> Iterable[Any]:
        for proc in self.processors:
            if proc.graph.table_edge is not None and proc.graph.table_topic == table:
                yield proc
        for view in self.views:
            if view.topic == table:
                yield view
        for proc in self.processors:
            if table in proc._lookups:
                yield proc._lookups[table]

    def table_value(self, table: str, key: str) -> Any:
        """The decoded value of ``key`` in ``table`` (a group table, a view's or a lookup's)."""
        for holder in self._holders(table):
            try:
                return holder.get(key)
            except NotOwned:
                continue
        for proc in self.processors:
            if table in proc._join_codecs:
                p = self._partition_of(key.encode(), proc._npar)
                part = proc._parts.get(p)
                if part is not None:
                    data = part.joins[table].storage.get(key)
                    return None if data is None else proc._join_codecs[table].decode(data)
        raise ConfigError(f"no processor or view of this tester holds table {table!r}")

    def clear_values(self) -> None:
        """Empty every group table and view store (goka's ``ClearValues``); topics keep their records."""
        for proc in self.processors:
            for part in proc._parts.values():
                if part.store is not None:
                    for key in [k for k, _ in part.store.iterate()]:
                        part.store.delete(key)
        for view in self.views:
            for table in view._tables:
                for key in [k for k, _ in table.storage.iterate()]:
                    table.storage.delete(key)

    def table_keys(self, table: str) -> list[str]:
        """Every key of ``table``, sorted."""
        for proc in self.processors:
            if proc.graph.table_edge is not None and proc.graph.table_topic == table:
                keys = [k for part in proc._parts.values() if part.store for k, _ in part.store.iterate()]
                return sorted(keys)
        for holder in self._holders(table):
            return sorted(k for k, _ in holder.iterate())
        raise ConfigError(f"no processor or view of this tester holds table {table!r}")

    async def set_table_value(self, table: str, key: str, value: Any) -> None:
        """Set ``key`` in ``table``: in the owning processor's store and in the table topic."""
        codec = self._codecs.get(table)
        if codec is None:
            raise ConfigError(f"no codec known for table {table!r}")
        data = None if value is None else codec.encode(value)
        tp, offset = await self._write(table, key, data, None)
        for proc in self.processors:
            if proc.graph.table_edge is not None and proc.graph.table_topic == table:
                part = proc._parts.get(tp.partition)
                if part is not None and part.store is not None:
                    if data is None:
                        part.store.delete(key)
                    else:
                        part.store.set(key, data)
                    part.store.set_offset(offset + 1)
                    part.store.flush()
        await self.settle()

    # -- closing --------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop every processor and view, close trackers (and the log the tester made)."""
        for proc in self.processors:
            proc._stopping = True
            await proc._teardown()
        self.processors.clear()
        for view in self.views:
            await view._shutdown()
        self.views.clear()
        for tracker in self._trackers:
            await tracker.close()
        self._trackers.clear()
        self._stamps.clear()
        if self._backend is not None:
            await self.log.close()
            await self._backend.close()
