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


async def nack_leftovers(items: Iterable[Any], delay: float | None = None) -> None:
    """Nack every unsettled Message in ``items``; never raises (failures are logged).

    Records need nothing: an uncommitted offset is read again by the next consumer.
    """
    leftovers = messages_in(items)
    if not leftovers:
        return
    results = await asyncio.gather(*(m.nack(delay) for m in leftovers), return_exceptions=True)
    for message, result in zip(leftovers, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("could not nack message %s on shutdown: %r", message.id, result)


async def hand_over(items: Sequence[T], put: Callable[[T], Awaitable[None]]) -> None:
    """``put`` each item in turn; when cancelled, nack what was not handed over, then re-raise."""
    for i, item in enumerate(items):
        try:
            await put(item)
        except asyncio.CancelledError:
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
