"""The emitter: writes keyed messages into a stream from outside any processor.

``emit()`` encodes at once (an encoding error raises there) and queues the record, returning a
future of ``(TopicPartition, offset)``; ``emit_sync()`` waits for it. Keys are partitioned with
the same partitioner as processors (murmur2 by default, ``fnv1a`` for goka), so an emitted key
reaches the processor instance that owns it. ``finish()`` refuses further emits and waits for
every pending one; it raises the first delivery failure (goka's ``Emit`` lost messages silently
when its promises were not checked).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Self

from broker.backends.kafka.processor.codecs import resolve_codec
from broker.backends.kafka.processor.errors import EmitterClosed
from broker.backends.kafka.processor.settings import resolve_partitioner
from broker.backends.kafka.processor.topics import TopicManager
from broker.codecs import Codec
from broker.driver.partitioning import Partitioner
from broker.errors import ConfigError, UnknownTopic
from broker.log import Log, TopicPartition, with_client_id

if TYPE_CHECKING:
    from broker.backends.kafka.processor.tracing import EmitTracing

__all__ = ["Emitter"]

Delivery = tuple[TopicPartition, int]

_module_log = logging.getLogger("broker.backends.kafka.processor")


class Emitter:
    """``async with Emitter(log, "user-clicks", "str") as emitter: emitter.emit("alice", "click")``."""

    def __init__(
        self,
        log_port: Log,
        topic: str,
        codec: Codec[Any] | str,
        *,
        partitioner: str | Partitioner = "murmur2",
        headers: Mapping[str, str] | None = None,
        create_partitions: int | None = 1,
        client_id: str | None = None,
        tracer_provider: Any = None,
        propagator: Any = None,
        logger: logging.Logger | None = None,
        topic_manager: TopicManager | None = None,
    ) -> None:
        #: ``client_id``: the client id its producer reports to the broker (goka's ``WithClientID``).
        #: ``tracer_provider``: an OpenTelemetry ``TracerProvider`` (opt-in; the ``otel`` extra):
        #: each emit is a ``publish <topic>`` span, a child of the current context, ended when the
        #: log acknowledged it, and its context goes into the message's headers (``propagator``:
        #: default OpenTelemetry's global one). ``None``: no spans, no headers added.
        #: ``logger`` (goka's ``WithEmitterLogger``): where the emitter logs the topics it creates
        #: and the deliveries that failed (default: the module logger ``broker.backends.kafka.processor``).
        if logger is not None and not isinstance(logger, logging.Logger):
            raise ConfigError(f"logger must be a logging.Logger or None, got {logger!r}")
        self._logger: logging.Logger = logger or _module_log
        #: ``topic_manager``: creates the missing topic as a stream (its replication and retention);
        #: None: ``create_topic`` on the log with ``create_partitions`` partitions.
        self._topic_manager = topic_manager
        self._log = with_client_id(log_port, client_id)
        self._tracing: EmitTracing | None = None
        if tracer_provider is not None:
            from broker.backends.kafka.processor.tracing import EmitTracing, system_of

            self._tracing = EmitTracing(tracer_provider, propagator, topic, system_of(log_port))
        self.topic = topic
        self.codec = resolve_codec(codec, f"emitter({topic!r})")
        self._partitioner = resolve_partitioner(partitioner)
        self._headers = dict(headers or {})
        self._create = create_partitions
        self._partitions: int | None = None
        self._starting: asyncio.Task[int] | None = None
        self._pending: list[asyncio.Future[Delivery]] = []
        self._finished = False

    def __repr__(self) -> str:
        return f"<Emitter {self.topic!r}{' finished' if self._finished else ''}>"

    async def start(self) -> None:
        """Learn the topic's partition count (creating it with ``create_partitions`` if missing)."""
        if self._partitions is None:
            self._partitions = await self._count()

    async def _count(self) -> int:
        try:
            return await self._log.partitions(self.topic)
        except UnknownTopic:
            if self._create is None:
                raise
        self._logger.info("emitter: creating topic %r with %d partition(s)", self.topic, self._create)
        if self._topic_manager is not None:
            await self._topic_manager.ensure_stream(self.topic, self._create)
        else:
            await self._log.create_topic(self.topic, self._create)
        return await self._log.partitions(self.topic)

    def _attributes(self, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
        if not headers:
            return self._headers or None
        merged = dict(self._headers)
        merged.update(headers)
        return merged

    def emit(
        self, key: str | None, value: Any, headers: Mapping[str, str] | None = None
    ) -> asyncio.Future[Delivery]:
        """Queue ``value`` (``None``: a tombstone) under ``key``; await the result for the offset."""
        if self._finished:
            raise EmitterClosed(f"emitter of {self.topic!r} is finished")
        data = None if value is None else self.codec.encode(value)
        attributes = self._attributes(headers)
        loop = asyncio.get_running_loop()
        tracing = self._tracing
        span = None
        if tracing is not None:
            span, attributes = tracing.start(self.topic, data, attributes)
        if self._partitions is None:
            future = loop.create_task(self._emit_later(key, data, attributes))
        else:
            future = asyncio.ensure_future(self._send(key, data, attributes))
        if span is not None:
            future.add_done_callback(functools.partial(tracing.finish, span))  # type: ignore[union-attr]
        self._track(future)
        return future

    def _send(
        self, key: str | None, data: bytes | None, attributes: Mapping[str, str] | None
    ) -> Awaitable[Delivery]:
        assert self._partitions is not None
        partition = None if key is None else self._partitioner(key.encode(), self._partitions)
        return self._log.send(self.topic, data, key=key, partition=partition, attributes=attributes)

    async def _emit_later(
        self, key: str | None, data: bytes | None, attributes: Mapping[str, str] | None
    ) -> Delivery:
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._count())
        self._partitions = await asyncio.shield(self._starting)
        return await self._send(key, data, attributes)

    def _track(self, future: asyncio.Future[Delivery]) -> None:
        pending = self._pending
        if len(pending) >= 4096:
            pending[:] = [f for f in pending if not f.done() or f.cancelled() or f.exception() is not None]
        pending.append(future)

    async def emit_sync(
        self, key: str | None, value: Any, headers: Mapping[str, str] | None = None
    ) -> Delivery:
        """Emit and wait until the log has it; returns ``(TopicPartition, offset)``."""
        return await self.emit(key, value, headers)

    async def finish(self, timeout: float | None = None) -> None:
        """Refuse new emits, wait for the pending ones; raises the first delivery failure."""
        self._finished = True
        pending, self._pending = self._pending, []
        if not pending:
            return
        async with asyncio.timeout(timeout):
            results = await asyncio.gather(*pending, return_exceptions=True)
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            self._logger.warning(
                "emitter of %r: %d of %d emit(s) failed; the first: %r",
                self.topic,
                len(failures),
                len(results),
                failures[0],
            )
            raise failures[0]

    async def close(self) -> None:
        """Same as :meth:`finish`."""
        await self.finish()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.finish()
