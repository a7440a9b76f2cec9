"""The helpers' ``Consumer``: a consumer-group member calling ``handler(message, commit)``.

``commit`` is an async callable that commits the handed message's offset (and every lower one of
its partition), never moving a partition's commit backwards; a handler that never calls it
commits nothing (unless the config turns on librdkafka's auto commit). A handler that raises is
logged and reported to ``error_callback``; consumption goes on.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from broker.backends.kafka import sdk
from broker.backends.kafka.client.logs import (
    LoggerLike,
    report_failure,
    resolve_logger,
    with_sdk_logger,
)
from broker.backends.kafka.client.metadata import lag_from
from broker.backends.kafka.sdk_consumer import GroupCore
from broker.errors import ClosedError, ConfigError
from broker.log import TopicPartition

__all__ = ["Commit", "Consumer", "ErrorCallback", "MessageHandler"]

#: Commits the message it was handed with (``await commit()``).
Commit = Callable[[], Awaitable[None]]
#: ``handler(message, commit)``; may be a coroutine function or a plain function.
MessageHandler = Callable[[Any, Commit], Awaitable[None] | None]
#: Receives handler failures and consumer errors.
ErrorCallback = Callable[[BaseException], None]

_names = itertools.count(1)


class _LoggingListener:
    """Logs rebalances at INFO."""

    def __init__(self, log: LoggerLike) -> None:
        self.log = log

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        self.log.info("assigned %s", [f"{p.topic}[{p.partition}]" for p in partitions])

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        self.log.info("revoked %s", [f"{p.topic}[{p.partition}]" for p in partitions])


class Consumer:
    """Consume ``topics`` in the group named by ``config["group.id"]``.

    ``config`` is librdkafka's configuration; the helper's own defaults sit under it
    (``enable.auto.commit=false``, ``enable.auto.offset.store=false``) so the explicit commit is
    the only one, unless the config says otherwise.
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
        self._core = GroupCore(
            settings,
            names,
            name=f"client-consumer-{next(_names)}",
            prefetch=batch_size,
            close_timeout=close_timeout,
            listener=_LoggingListener(self.log),
            cooperative="cooperative" in str(settings.get("partition.assignment.strategy", "")),
        )
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

    async def run(self) -> None:
        """Consume until :meth:`close` or cancellation, calling the handler for every message.

        :meth:`close` lets the handler finish the message it holds, then stops: messages fetched
        but not handed to the handler are read again by the partition's next owner.
        """
        core = self._core
        handler = self.handler
        if self._task is None:
            self._task = asyncio.current_task()
        while not self._stopping:
            try:
                messages = await core.fetch(core.prefetch, self.poll_timeout)
            except ClosedError:
                return
            except Exception as exc:
                self._report(exc, "consuming failed")
                if core.closing:
                    return
                raise
            for message in messages:
                if self._stopping:
                    return
                commit = _bind_commit(self, message)
                try:
                    result = handler(message, commit)
                    if inspect.isawaitable(result):
                        await result
                except Exception as exc:
                    self._report(
                        exc,
                        f"the handler failed on {message.topic()}[{message.partition()}]@{message.offset()}",
                    )

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

        A handler still busy after ``close_timeout`` seconds is cancelled. Idempotent.
        """
        self._stopping = True
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            done, _ = await asyncio.wait([task], timeout=self._core.close_timeout)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._core.close()


def _bind_commit(consumer: Consumer, message: Any) -> Commit:
    async def commit() -> None:
        await consumer.commit(message)

    return commit
