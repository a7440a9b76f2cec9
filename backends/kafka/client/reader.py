"""The helpers' ``Reader``: read partitions outside any consumer group, from chosen offsets.

Each partition starts at ``FIRST_OFFSET``, ``LAST_OFFSET`` or an explicit offset. The handler gets
``(message, commit)`` like the Consumer's, but ``commit`` does nothing: a reader never commits,
and any number of readers may read the same records. ``partition_eof(topic, partition, offset)``
is called each time a partition is read to its end (librdkafka's ``enable.partition.eof`` is
turned on when a callback is given, unless the config says otherwise).

Reading errors reach ``error_callback`` and reading goes on (kefka's ``Reader`` hands every
``kafka.Error`` to its ``ErrorCallback``): librdkafka's transient errors and failed fetches; only a
fatal librdkafka error (or one that is not a broker error) ends :meth:`Reader.read`, reported first.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.backends.kafka.client.consumer import ErrorCallback, MessageHandler, fetch_or_pause
from broker.backends.kafka.client.logs import (
    LoggerLike,
    TransientErrors,
    report_failure,
    resolve_logger,
    with_sdk_logger,
)
from broker.backends.kafka.errors import translate
from broker.backends.kafka.sdk_consumer import ReaderCore
from broker.driver.resources import AsyncResource
from broker.errors import BrokerError, ConfigError, UnknownTopic
from broker.log import OFFSET_BEGINNING, OFFSET_END, TopicPartition

__all__ = [
    "FIRST_OFFSET",
    "LAST_OFFSET",
    "PartitionEOFCallback",
    "Reader",
    "Watermarks",
    "read_topic_partitions",
]

#: Start at the oldest retained record.
FIRST_OFFSET = OFFSET_BEGINNING
#: Start after the newest record (read only what arrives from now on).
LAST_OFFSET = OFFSET_END

#: ``partition_eof(topic, partition, offset)``: the partition was read up to ``offset``.
PartitionEOFCallback = Callable[[str, int, int], Awaitable[None] | None]

_names = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Watermarks:
    """The offsets of one partition: ``low`` is the first retained, ``high`` the next to be written."""

    low: int
    high: int
    #: Set (and the offsets are -1) when the query failed.
    error: BrokerError | None = None


async def _noop_commit() -> None:
    """A reader never commits."""


class _EventCore(ReaderCore):
    """A ReaderCore that keeps partition-EOF events in the stream, in order.

    Other error events are logged and handed to the reader's error callback (``transient``).
    """

    transient: TransientErrors | None = None

    def _on_event(self, message: Any, error: Any) -> None:
        super()._on_event(message, error)
        if self.transient is not None:
            self.transient.on_event(message.topic(), error)

    def _accept(self, messages: list[Any], epoch: int) -> None:
        keep = []
        for message in messages:
            error = message.error()
            if error is None or error.name() == "_PARTITION_EOF":
                keep.append(message)
            else:
                self._on_event(message, error)
        if epoch != self._epoch or self.paused:
            keep = self._filter(keep, epoch)
        if self._pos < len(self._buffer):
            self._buffer = self._buffer[self._pos :] + keep
        else:
            self._buffer = keep
        self._pos = 0

    def _took(self, messages: list[Any]) -> None:
        self._took_records([m for m in messages if m.error() is None])

    def _took_records(self, messages: list[Any]) -> None:
        super()._took(messages)


class Reader(AsyncResource):
    """Read ``partitions`` (``{(topic, partition): start offset}``) outside any group."""

    def __init__(
        self,
        config: Mapping[str, Any],
        handler: MessageHandler,
        partitions: Mapping[TopicPartition | tuple[str, int], int],
        *,
        partition_eof: PartitionEOFCallback | None = None,
        error_callback: ErrorCallback | None = None,
        poll_timeout: float = 1.0,
        logger: LoggerLike | None = None,
        batch_size: int = 100,
        close_timeout: float = 10.0,
    ) -> None:
        if handler is None:
            raise ConfigError("the Reader needs a handler")
        if not partitions:
            raise ConfigError("the Reader needs at least one (topic, partition) with a start offset")
        self.log = resolve_logger(logger)
        self.handler = handler
        self.partition_eof = partition_eof
        self.error_callback = error_callback
        self.poll_timeout = poll_timeout
        settings: dict[str, Any] = {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": partition_eof is not None,
        }
        settings.update(with_sdk_logger(config, self.log))
        self._transient = TransientErrors(self.log, error_callback)
        self._transient.install(settings)
        self.partitions = {TopicPartition(tp[0], tp[1]): offset for tp, offset in partitions.items()}
        self._core = _EventCore(
            settings, name=f"client-reader-{next(_names)}", prefetch=batch_size, close_timeout=close_timeout
        )
        self._core.transient = self._transient
        self._core.assign(self.partitions)

    @property
    def core(self) -> ReaderCore:
        """The reader underneath (positions, seek, pause)."""
        return self._core

    def _report(self, exc: BaseException, what: str) -> None:
        report_failure(self.log, self.error_callback, exc, what)

    async def read(self) -> None:
        """Read until :meth:`close` or cancellation, calling the handler for every message."""
        core = self._core
        self._transient.loop = asyncio.get_running_loop()
        self._transient.error_callback = self.error_callback
        while True:
            messages = await fetch_or_pause(core, self.poll_timeout, self._report, "reading failed")
            if messages is None:
                return
            for message in messages:
                if core.closing:
                    return
                try:
                    if message.error() is not None:
                        if self.partition_eof is not None:
                            result = self.partition_eof(
                                message.topic(), message.partition(), message.offset()
                            )
                            if inspect.isawaitable(result):
                                await result
                        continue
                    result = self.handler(message, _noop_commit)
                    if inspect.isawaitable(result):
                        await result
                except Exception as exc:
                    self._report(exc, f"the handler failed on {message.topic()}[{message.partition()}]")

    async def watermarks(self, timeout: float = 5.0) -> dict[TopicPartition, Watermarks]:
        """The watermarks of every configured partition; a failed query sets that entry's ``error``."""
        out: dict[TopicPartition, Watermarks] = {}
        for tp in self.partitions:
            try:
                out[tp] = Watermarks(*await self._core.watermarks(tp, timeout))
            except Exception as exc:
                out[tp] = Watermarks(
                    -1, -1, translate(exc, f"cannot read the watermarks of {tp}", UnknownTopic)
                )
        return out

    async def close(self) -> None:
        """Stop reading and release the consumer. Idempotent."""
        await self._core.close()


async def read_topic_partitions(
    config: Mapping[str, Any],
    handler: MessageHandler,
    partitions: Mapping[TopicPartition | tuple[str, int], int],
    **options: Any,
) -> None:
    """Read like :class:`Reader` until the calling task is cancelled (then close and re-raise)."""
    reader = Reader(config, handler, partitions, **options)
    try:
        await reader.read()
    finally:
        await asyncio.shield(reader.close())
