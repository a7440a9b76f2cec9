"""The helpers' ``Consumer``: a consumer-group member calling ``handler(message, commit)``.

``commit`` is an async callable that commits the handed message's offset (and every lower one of
its partition), never moving a partition's commit backwards; a handler that never calls it
commits nothing, unless the config turns on librdkafka's auto commit (``enable.auto.commit``).
Then, as kefka documents, ``commit`` can be ignored: each message whose handler returned has its
offset stored (``store_offsets``, as if the handler had called ``commit``), librdkafka commits the
stored offsets every ``auto.commit.interval.ms`` and when partitions are revoked, and ``close()``
commits them before leaving the group, so a clean restart reads nothing handled again. A crash
loses at most the stores of the last interval: their messages are read again (at-least-once).

A handler that raises is logged and reported to ``error_callback``; consumption goes on, and its
message's offset is neither committed nor stored. Polling and reading errors reach
``error_callback`` too, as kefka's ``ErrorCallback`` sees them, and consumption goes on:
librdkafka's transient errors (all brokers down, a connection lost, an unknown topic: its
``error_cb`` and the error events in the fetched stream) and a fetch that fails with a
non-fatal error. Only a *fatal* librdkafka error (the client is unusable) or an error that is not
a broker error ends :meth:`Consumer.run`, after it was reported (kefka loops on, failing forever).

As with explicit commits, a later message of
the same partition whose handler returns does move the partition past it (a Kafka offset covers
every lower one), so the failed message is read again after a restart or rebalance only when no
later message of its partition was handled.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from broker.backends.kafka import sdk
from broker.backends.kafka.client.logs import (
    LoggerLike,
    TransientErrors,
    is_fatal,
    report_failure,
    resolve_logger,
    with_sdk_logger,
)
from broker.backends.kafka.client.metadata import lag_from
from broker.backends.kafka.errors import error_of, translate
from broker.backends.kafka.sdk_consumer import GroupCore
from broker.errors import AckError, ClosedError, ConfigError
from broker.log import TopicPartition

__all__ = ["Commit", "Consumer", "ErrorCallback", "MessageHandler"]

#: Commits the message it was handed with (``await commit()``).
Commit = Callable[[], Awaitable[None]]
#: ``handler(message, commit)``; may be a coroutine function or a plain function.
MessageHandler = Callable[[Any, Commit], Awaitable[None] | None]
#: Receives handler failures and consumer errors.
ErrorCallback = Callable[[BaseException], None]

_names = itertools.count(1)


class _ReportingGroupCore(GroupCore):
    """A group member whose error events (besides logging) reach the helper's error callback."""

    transient: TransientErrors | None = None

    def _on_event(self, message: Any, error: Any) -> None:
        super()._on_event(message, error)
        if self.transient is not None:
            self.transient.on_event(message.topic(), error)


async def fetch_or_pause(
    core: Any, poll_timeout: float, report: Callable[[BaseException, str], None], what: str
) -> list[Any] | None:
    """The messages ``core`` fetches within ``poll_timeout``; None once it is closed or closing.

    A failed fetch is reported (``report(exc, what)``); a fatal one is raised, any other is
    followed by a short pause and ``[]`` (the caller polls again, never spinning).
    """
    try:
        messages: list[Any] = await core.fetch(core.prefetch, poll_timeout)
    except ClosedError:
        return None
    except Exception as exc:
        if core.closing:
            return None
        report(exc, what)
        if is_fatal(exc):
            raise
        await asyncio.sleep(min(max(poll_timeout, 0.05), 1.0))
        return []
    return messages


#: librdkafka's spellings of a true boolean property (``rd_kafka_conf_set``; case-insensitive).
_TRUE: Final = frozenset({"true", "t", "1"})


def _is_true(value: Any) -> bool:
    """True when librdkafka reads ``value`` (a bool, or a string such as ``"true"``) as true."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


class _LoggingListener:
    """Logs rebalances at INFO; before partitions go, stores the offsets handled on them."""

    def __init__(self, log: LoggerLike, before_revoke: Callable[[], Awaitable[None]]) -> None:
        self.log = log
        self.before_revoke = before_revoke

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        self.log.info("assigned %s", [f"{p.topic}[{p.partition}]" for p in partitions])

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        self.log.info("revoked %s", [f"{p.topic}[{p.partition}]" for p in partitions])
        await self.before_revoke()  # librdkafka's auto commit of revoked partitions comes after


class Consumer:
    """Consume ``topics`` in the group named by ``config["group.id"]``.

    ``config`` is librdkafka's configuration; the helper's own defaults sit under it
    (``enable.auto.commit=false``, ``enable.auto.offset.store=false``) so the explicit commit is
    the only one, unless the config says otherwise. With ``enable.auto.commit`` true the helper
    stores the offset of each message whose handler returned (not of one whose handler raised),
    librdkafka's auto commit commits what is stored, and :meth:`close` commits it too: the handler
    need not call ``commit``. A config that also sets ``enable.auto.offset.store`` true leaves
    storing to librdkafka, which stores each offset when it hands the message over, before the
    handler ran and also for messages fetched ahead and never handled: a restart may then skip
    messages (at-most-once), which is why the helper stores them itself by default.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        handler: MessageHandler,
        topics: str | Sequence[str],
        *,
        poll_timeout: float = 1.0,
        error_callback: ErrorCallback | None = None,
        logger: LoggerLike | None = None,
        batch_size: int = 100,
        close_timeout: float = 10.0,
    ) -> None:
        if not config.get("group.id"):
            raise ConfigError("the Consumer needs 'group.id' in its config (use Reader outside a group)")
        if handler is None:
            raise ConfigError("the Consumer needs a handler")
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names or not all(names):
            raise ConfigError("the Consumer needs at least one topic")
        self.log = resolve_logger(logger)
        self.handler = handler
        self.poll_timeout = poll_timeout
        self.error_callback = error_callback
        settings = {"enable.auto.commit": False, "enable.auto.offset.store": False}
        settings.update(with_sdk_logger(config, self.log))
        self._transient = TransientErrors(self.log, error_callback)
        self._transient.install(settings)
        #: True when librdkafka commits by itself (``enable.auto.commit``): ``commit`` is optional.
        self.auto_commit = _is_true(settings["enable.auto.commit"])
        #: True when this helper stores each handled offset for that auto commit.
        self._stores = self.auto_commit and not _is_true(settings["enable.auto.offset.store"])
        #: Next offsets handled and not stored yet, per partition; sent by the next loop pass.
        self._to_store: dict[tuple[str, int], int] = {}
        self._store_scheduled = False
        self._core = _ReportingGroupCore(
            settings,
            names,
            name=f"client-consumer-{next(_names)}",
            prefetch=batch_size,
            close_timeout=close_timeout,
            listener=_LoggingListener(self.log, self._flush_stores),
            cooperative="cooperative" in str(settings.get("partition.assignment.strategy", "")),
        )
        self._core.transient = self._transient
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def core(self) -> GroupCore:
        """The group member underneath."""
        return self._core

    def _report(self, exc: BaseException, what: str) -> None:
        report_failure(self.log, self.error_callback, exc, what)

    async def commit(self, message: Any) -> None:
        """Commit ``message``'s offset + 1 for its partition (dropped if the partition was revoked)."""
        committer = self._core.committers.get((message.topic(), message.partition()))
        if committer is not None:
            await committer.commit_next(message.offset() + 1)

    # -- offsets stored for librdkafka's auto commit -------------------------------------------------
    def _handled(self, message: Any) -> None:
        """``message``'s handler returned: store its offset (on the next loop pass, merged with others)."""
        tp = (message.topic(), message.partition())
        if tp not in self._core.assigned:
            return  # revoked meanwhile: its next owner reads it again
        offset = message.offset() + 1
        if offset > self._to_store.get(tp, -1):
            self._to_store[tp] = offset
        if not self._store_scheduled:
            self._store_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_stores)

    def _take_stores(self) -> list[Any]:
        """The SDK offsets to store now (of partitions still assigned), and forget them."""
        self._store_scheduled = False
        pending, self._to_store = self._to_store, {}
        core = self._core
        if core.closed:
            return []
        tp_type = sdk.confluent().TopicPartition
        return [tp_type(tp[0], tp[1], offset) for tp, offset in pending.items() if tp in core.assigned]

    def _send_stores(self) -> None:
        offsets = self._take_stores()
        if offsets:
            self._core.thread.post(self._store_now, offsets)

    async def _flush_stores(self) -> None:
        """Store what was handled and wait until the SDK has it (before a revoke and at close)."""
        offsets = self._take_stores() if self._stores else []
        if offsets:
            await self._core.thread.submit(self._store_now, offsets)

    def _store_now(self, offsets: list[Any]) -> None:
        """On the SDK thread: store ``offsets`` for the auto commit (a refusal is logged)."""
        try:
            self._core.consumer.store_offsets(offsets=offsets)
        except Exception as exc:  # e.g. _STATE: the partition was revoked meanwhile (read again)
            self.log.warning(
                "storing offsets of %s failed: %s",
                sorted(f"{p.topic}[{p.partition}]@{p.offset}" for p in offsets),
                exc,
            )

    def _commit_stored(self) -> None:
        """On the SDK thread: commit the stored offsets now, and wait for the broker."""
        try:
            self._core.consumer.commit(asynchronous=False)
        except sdk.confluent().KafkaException as exc:
            error = error_of(exc)
            if error is None or error.name() != "_NO_OFFSET":  # _NO_OFFSET: nothing new to commit
                raise translate(exc, "committing the stored offsets failed", AckError) from exc

    async def _commit_on_close(self) -> None:
        """The last auto commit: what was handled is committed before the group is left."""
        core = self._core
        if not self._stores or core.closing or not core.assigned:
            return
        try:
            async with asyncio.timeout(core.close_timeout):
                await self._flush_stores()
                await core.thread.submit(self._commit_stored)
        except Exception as exc:  # closing goes on; librdkafka's own commit on leaving may still land
            self.log.warning("committing the stored offsets on close failed: %s", exc)

    async def run(self) -> None:
        """Consume until :meth:`close` or cancellation, calling the handler for every message.

        Polling errors are reported to ``error_callback`` and polling goes on; a fatal librdkafka
        error (or one that is not a broker error) is reported, then raised.

        :meth:`close` lets the handler finish the message it holds, then stops: messages fetched
        but not handed to the handler are read again by the partition's next owner.
        """
        core = self._core
        handler = self.handler
        if self._task is None:
            self._task = asyncio.current_task()
        self._transient.loop = asyncio.get_running_loop()
        self._transient.error_callback = self.error_callback
        while not self._stopping:
            messages = await fetch_or_pause(core, self.poll_timeout, self._report, "consuming failed")
            if messages is None:
                return
            for message in messages:
                if self._stopping:
                    return
                commit = _bind_commit(self, message)
                try:
                    result = handler(message, commit)
                    if inspect.isawaitable(result):
                        await result
                except Exception as exc:  # not stored, not committed
                    self._report(
                        exc,
                        f"the handler failed on {message.topic()}[{message.partition()}]@{message.offset()}",
                    )
                else:
                    if self._stores:
                        self._handled(message)

    def start(self) -> asyncio.Task[None]:
        """Run in a background task; cancelling the task stops consuming (then :meth:`close`)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())
        return self._task

    def assignments(self) -> list[TopicPartition]:
        """The partitions assigned to this member."""
        return sorted(TopicPartition(*tp) for tp in self._core.assigned)

    def subscription(self) -> list[str]:
        """The subscribed topics."""
        return list(self._core.topics)

    @staticmethod
    def _sdk_tp(tp: TopicPartition) -> Any:
        return sdk.confluent().TopicPartition(tp.topic, tp.partition)

    async def lag(self, timeout: float = 10.0) -> dict[TopicPartition, int]:
        """Lag per assigned partition: high watermark minus committed offset (minus low if none)."""
        partitions = self.assignments()
        if not partitions:
            return {}
        core = self._core
        committed = await core.thread.submit(
            core.consumer.committed, [self._sdk_tp(tp) for tp in partitions], timeout
        )
        offsets = {(p.topic, p.partition): p.offset for p in committed}
        out = {}
        for tp in partitions:
            low, high = await self._core.watermarks(tp, timeout)
            offset = offsets.get((tp.topic, tp.partition), -1)
            out[tp] = lag_from(low, high, offset if offset >= 0 else None)
        return out

    async def lag_for(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """Lag of one partition (``high - low`` when it is not assigned to this member)."""
        tp = TopicPartition(topic, partition)
        if tp not in self.assignments():
            low, high = await self._core.watermarks(tp, timeout)
            return high - low
        return (await self.lag(timeout))[tp]

    async def close(self) -> None:
        """Let the handler finish its message, stop, commit what is pending, leave the group.

        With auto commit on, the offsets stored for the messages handled are committed first.
        A handler still busy after ``close_timeout`` seconds is cancelled. Idempotent.
        """
        self._stopping = True
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            done, _ = await asyncio.wait([task], timeout=self._core.close_timeout)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._commit_on_close()
        await self._core.close()


def _bind_commit(consumer: Consumer, message: Any) -> Commit:
    async def commit() -> None:
        await consumer.commit(message)

    return commit
