"""Mixins with the behaviour every backend's resources share.

A backend class supplies ``close()`` and its pull method; these give it ``async with`` and an
``async for`` that ends quietly once the resource is closed. :func:`stop_task` ends a resource's
background task from its ``close()``.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

from broker.errors import ClosedError
from broker.message import Message, Record

__all__ = [
    "AsyncResource",
    "BatchedMessageIteration",
    "BatchedRecordIteration",
    "MessageIteration",
    "RecordIteration",
    "stop_task",
]


class AsyncResource(abc.ABC):  # noqa: B024 - close() has a default on purpose
    """``async with`` support: leaving the block calls ``close()``."""

    async def close(self) -> None:
        """Release the resource (subclasses override; must be idempotent)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class MessageIteration(AsyncResource):
    """``async for message in iterator`` over ``next_message()``, ending when closed.

    The iterator is its own async iterator (no generator object in between: one call per item).
    """

    @abc.abstractmethod
    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message (subclasses implement it)."""

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.next_message()
        except ClosedError:
            raise StopAsyncIteration from None


class RecordIteration(AsyncResource):
    """``async for record in iterator`` over ``next_record()``, ending when closed."""

    @abc.abstractmethod
    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record (subclasses implement it)."""

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Record:
        try:
            return await self.next_record()
        except ClosedError:
            raise StopAsyncIteration from None

    def batches(self) -> AsyncIterator[list[Record]]:
        """Iterate over non-empty batches of ``next_batch()`` until closed (where the iterator has it)."""
        return _batches_until_closed(self.next_batch)  # type: ignore[attr-defined]


class BatchedMessageIteration(AsyncResource):
    """``async for batch in iterator`` over ``next_batch()``: non-empty batches until closed."""

    @abc.abstractmethod
    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """The next batch (subclasses implement it)."""

    def __aiter__(self) -> AsyncIterator[list[Message]]:
        return _batches_until_closed(self.next_batch)


class BatchedRecordIteration(AsyncResource):
    """``async for batch in iterator`` over ``next_batch()``: non-empty batches until closed."""

    @abc.abstractmethod
    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """The next batch (subclasses implement it)."""

    def __aiter__(self) -> AsyncIterator[list[Record]]:
        return _batches_until_closed(self.next_batch)


async def _batches_until_closed(pull: Any) -> AsyncIterator[Any]:
    while True:
        try:
            batch = await pull()
        except ClosedError:
            return
        if batch:
            yield batch


async def stop_task(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended, for a ``close()`` stopping its background task.

    What the task ended with (its cancellation, an error) is consumed here: a background task being
    stopped has nobody else to tell. The caller's own cancellation is never consumed: cancelled
    while waiting (its ``asyncio.timeout`` expired, say), the caller stops waiting at once and the
    ``CancelledError`` propagates, while the task goes on ending by itself. (``task.cancel()``
    followed by ``await task`` under ``suppress(CancelledError)`` would swallow the caller's
    cancellation with the task's, and a close bounded by its caller would run unbounded.)
    """
    if task is None:
        return
    if not task.done():
        task.cancel()
        if task is asyncio.current_task():
            return
        await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" report
