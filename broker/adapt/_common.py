"""Pieces the adapters share: pull functions, settling leftovers, logging."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from broker.message import Message

T = TypeVar("T")

#: A pull: wait up to ``timeout`` seconds (None: forever) for the next item; raise TimeoutError.
Pull = Callable[[float | None], Awaitable[T]]

log = logging.getLogger("broker.adapt")


async def enter_source(source: Any) -> None:
    """Enter ``source`` (``await source.__aenter__()``) when it is an async context manager."""
    enter = getattr(source, "__aenter__", None)
    if enter is not None:
        await enter()


async def leave_source(
    source: Any, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
) -> None:
    """Leave ``source`` (``__aexit__``); close it when it is not a context manager but closes."""
    leave = getattr(source, "__aexit__", None)
    if leave is not None:
        await leave(exc_type, exc, tb)
        return
    close = getattr(source, "close", None)
    if close is not None:
        await close()


class SourceWrapper:
    """``async with`` for a wrapper: entering it enters ``source``, the object wrapped (on several
    brokers entering is what makes the subscription exist), and leaving it leaves the source."""

    source: Any

    async def __aenter__(self) -> Self:
        await enter_source(self.source)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await leave_source(self.source, exc_type, exc, tb)


def messages_in(items: Iterable[Any]) -> list[Message]:
    """The unsettled Messages among ``items`` (items may be Messages, Records, or lists of them)."""
    out: list[Message] = []
    for item in items:
        if isinstance(item, Message):
            if not item.settled:
                out.append(item)
        elif isinstance(item, list):
            out.extend(m for m in item if isinstance(m, Message) and not m.settled)
    return out


#: Seconds that nacking the messages left over when a receiver, stream or batcher stops, is
#: cancelled or closes may take in all. A broker that has not answered by then is not waited for
#: any longer (a cancel or a close never hangs): the messages not nacked stay unsettled, never
#: acked, and the broker redelivers them at their ack deadline (lock expiry), so none is lost.
SHUTDOWN_NACK_TIMEOUT = 5.0


async def nack_leftovers(items: Iterable[Any], delay: float | None = None, *, bounded: bool = True) -> None:
    """Nack every unsettled Message in ``items``; never raises (failures are logged).

    ``bounded``: give up after :data:`SHUTDOWN_NACK_TIMEOUT` seconds (the messages not nacked by
    then are left to the broker's redelivery); False waits for every nack. Records need nothing:
    an uncommitted offset is read again by the next consumer.
    """
    leftovers = messages_in(items)
    if not leftovers:
        return
    nacks = [asyncio.ensure_future(m.nack(delay)) for m in leftovers]
    try:
        await asyncio.wait(nacks, timeout=SHUTDOWN_NACK_TIMEOUT if bounded else None)
    finally:
        for nack in nacks:
            if not nack.done():
                nack.cancel()  # an unanswered settlement: the message stays unsettled
                nack.add_done_callback(_retrieve)
    for message, nack in zip(leftovers, nacks, strict=True):
        if not nack.done():
            log.warning(
                "could not nack message %s on shutdown within %ss: the broker redelivers it after its "
                "ack deadline",
                message.id,
                SHUTDOWN_NACK_TIMEOUT,
            )
        elif not nack.cancelled() and nack.exception() is not None:
            log.warning("could not nack message %s on shutdown: %r", message.id, nack.exception())


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a cancelled nack's late failure as seen (it was logged as not done in time)."""
    if not task.cancelled():
        task.exception()


class StopFeeding(Exception):
    """Raised by a ``put`` that takes no more items (its receiver is stopping): :func:`hand_over`
    nacks the item it refused and those after it."""


async def hand_over(items: Sequence[T], put: Callable[[T], Awaitable[None]]) -> None:
    """``put`` each item in turn; when cancelled (or refused with :class:`StopFeeding`), nack what
    was not handed over, then re-raise."""
    for i, item in enumerate(items):
        try:
            await put(item)
        except (asyncio.CancelledError, StopFeeding):
            await nack_leftovers(items[i:])
            raise


async def run_until_first_error(tasks: list[asyncio.Task[Any]]) -> None:
    """Wait for all ``tasks``; the first that fails cancels the others and its error is raised.

    On the way out (error, cancellation) every task is cancelled and awaited, so none is left running.
    """
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
