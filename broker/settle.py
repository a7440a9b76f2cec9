"""Settle many messages or records at once, using a backend's bulk path where it has one; and
warn about handlers that leave their messages unsettled."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any

from broker.driver.clock import clock
from broker.message import (
    Message,
    Record,
    RecordBatch,
    acks_in_bulk,
    claim_ack,
    late_ack_error,
    late_acks,
    release_claim,
)

__all__ = ["ack_all", "commit_highest_offsets", "nack_all"]

#: Where :class:`UnsettledWarnings` logs.
log = logging.getLogger("broker.settle")


async def ack_all(messages: Sequence[Message]) -> None:
    """Ack every unsettled message, one bulk call per backend where it supports bulk acks.

    A :class:`~broker.message.BulkAcker` offers ``ack_many(messages) -> others``: it acks the
    pending messages that are its own and returns the rest. Acks after a message's ack deadline
    are sent like the others; then :class:`~broker.errors.AckError` names the deadline (as
    :meth:`Message.ack <broker.message.Message.ack>` does).
    """
    pending = [m for m in messages if not m.settled and m._due]
    sent_at = clock.monotonic()
    remaining: Sequence[Message] = messages
    calls: list[Message] = []
    while remaining:
        acker = remaining[0].acker
        if not acks_in_bulk(acker):
            calls.extend(m for m in remaining if m.acker is acker and not m.settled)
            remaining = [m for m in remaining if m.acker is not acker]
        else:
            others = await acker.ack_many(remaining)
            if len(others) >= len(remaining):  # the acker claimed none of them: settle one by one
                calls.extend(m for m in remaining if m.acker is acker and not m.settled)
                others = [m for m in remaining if m.acker is not acker]
            remaining = others
    if calls:
        results = await asyncio.gather(*(m.ack() for m in calls), return_exceptions=True)
        for message, result in zip(calls, results, strict=True):
            # A message that stays acked had its ack sent (a late one: raised below, once for all).
            if isinstance(result, BaseException) and not message.state == "acked":
                raise result
    late = late_acks(pending, sent_at)
    if late:
        raise late_ack_error(late, sent_at)


async def ack_in_turn(
    messages: Iterable[Message], acker: object, send: Callable[[Message], Awaitable[None] | None]
) -> list[Message]:
    """The ``ack_many`` of a bulk acker whose broker settles one message per call.

    Each pending message of ``acker`` among ``messages`` is marked acked and sent with
    ``send(message)`` (awaited when it returns an awaitable: an SDK that acknowledges
    synchronously costs no coroutine per message), one after the other; the messages of other
    ackers are returned, in order. A failed send leaves its message (and the later ones, not
    claimed yet) pending and is raised.
    """
    others: list[Message] = []
    for message in messages:
        if message.acker is not acker:
            others.append(message)
        elif claim_ack(message):
            try:
                sent = send(message)
                if sent is not None:
                    await sent
            except BaseException:
                release_claim(message)
                raise
    return others


async def nack_all(messages: Sequence[Message], delay: float | None = None) -> None:
    """Nack every unsettled message; every nack is tried, then the first failure is raised."""
    results = await asyncio.gather(
        *(m.nack(delay) for m in messages if not m.settled), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def commit_highest_offsets(records: Iterable[Record]) -> None:
    """Commit, per partition, the highest offset among ``records`` (one commit per partition)."""
    if isinstance(records, RecordBatch):
        known = records.highest()
        if known is not None:  # the backend knows them from the read
            await _ack_each(known.values())
            return
    highest: dict[tuple[str, int], Record] = {}
    run: tuple[str, int] = ("", -1)
    best: Record | None = None
    for record in records:  # batches come in runs of one partition: one dict access per run
        topic, partition = record.topic, record.partition
        if partition != run[1] or topic != run[0]:
            if best is not None:
                highest[run] = best
            run = (topic, partition)
            best = highest.get(run)
        if best is None or record.offset > best.offset:
            best = record
    if best is not None:
        highest[run] = best
    await _ack_each(highest.values())


async def _ack_each(records: Collection[Record]) -> None:
    if len(records) == 1:  # the common case (one partition): no task per ack
        for record in records:
            await record.ack()
    elif records:
        await asyncio.gather(*(r.ack() for r in records))


def handler_name(handler: Callable[..., Any]) -> str:
    """``module.qualified.name`` of a handler: the function beneath decorators (``__wrapped__``) and
    ``functools.partial``; the class of a callable object."""
    target: Any = handler
    for _ in range(16):  # wrappers of wrappers, never a cycle
        if isinstance(target, functools.partial):
            target = target.func
        elif hasattr(target, "__wrapped__"):
            target = inspect.unwrap(target)
        else:
            break
    qualname = getattr(target, "__qualname__", None)
    module = getattr(target, "__module__", None)
    if not isinstance(qualname, str):  # a callable object: name its class
        qualname, module = type(target).__qualname__, type(target).__module__
    return f"{module}.{qualname}" if module else qualname


class UnsettledWarnings:
    """Warns when a receiver's handler returns and leaves a message unsettled.

    A handler that neither acks, nacks nor dead-letters its message (and does not raise) leaves
    it in flight: the broker redelivers it after its ack deadline, and again each time the handler
    does the same, with nothing in the application's logs. A receiver calls :meth:`check` after
    each handler call that returned; one WARNING is logged per message id (redeliveries of an id
    already named stay quiet), at most :attr:`limit` per :attr:`window` seconds, the rest counted
    in the next warning. The receiver does not settle the message itself: the ack policy is the
    application's.
    """

    #: Most warnings logged per :attr:`window`.
    limit = 10
    #: Seconds of the rate limit's window.
    window = 60.0
    #: Message ids remembered as warned about (the oldest are forgotten first).
    remember = 4096

    def __init__(self, handler: Callable[..., Any]) -> None:
        #: The handler's qualified name, as the warnings give it.
        self.handler = handler_name(handler)
        self._warned: dict[str, None] = {}
        self._window_start = float("-inf")
        self._in_window = 0
        self._suppressed = 0

    def check(self, unit: Any) -> None:
        """After the handler returned from ``unit`` (a Message or a batch): warn about what it left
        unsettled."""
        if isinstance(unit, Message):
            if not unit.settled:
                self._warn(unit)
        elif isinstance(unit, list):
            for message in unit:
                if isinstance(message, Message) and not message.settled:
                    self._warn(message)

    def _warn(self, message: Message) -> None:
        warned = self._warned
        key = message.id
        if key in warned:
            return
        warned[key] = None
        if len(warned) > self.remember:
            del warned[next(iter(warned))]
        now = clock.monotonic()
        if now - self._window_start >= self.window:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self.limit:
            self._suppressed += 1
            return
        self._in_window += 1
        suppressed, self._suppressed = self._suppressed, 0
        log.warning(
            "handler %s returned without settling message %s (no ack(), nack() or dead_letter()): the "
            "broker redelivers it after its ack deadline, and again each time this happens; settle "
            "every message the handler is given%s",
            self.handler,
            key,
            f" ({suppressed} more messages left unsettled were not logged)" if suppressed else "",
        )
