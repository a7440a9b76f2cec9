"""Mixins with the behaviour every backend's resources share.

A backend class supplies ``close()`` and its pull method; these give it ``async with`` and an
``async for`` that ends quietly once the resource is closed.
"""

from __future__ import annotations

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
]


class AsyncResource:
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
    """``async for message in iterator`` over ``next_message()``, ending when closed."""

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message (subclasses implement it)."""
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[Message]:
        return _until_closed(self.next_message)


class RecordIteration(AsyncResource):
    """``async for record in iterator`` over ``next_record()``, ending when closed."""

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record (subclasses implement it)."""
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[Record]:
        return _until_closed(self.next_record)


class BatchedMessageIteration(AsyncResource):
    """``async for batch in iterator`` over ``next_batch()``: non-empty batches until closed."""

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """The next batch (subclasses implement it)."""
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[list[Message]]:
        return _batches_until_closed(self.next_batch)


class BatchedRecordIteration(AsyncResource):
    """``async for batch in iterator`` over ``next_batch()``: non-empty batches until closed."""

    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """The next batch (subclasses implement it)."""
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[list[Record]]:
        return _batches_until_closed(self.next_batch)


async def _until_closed(pull: Any) -> AsyncIterator[Any]:
    while True:
        try:
            yield await pull()
        except ClosedError:
            return


async def _batches_until_closed(pull: Any) -> AsyncIterator[Any]:
    while True:
        try:
            batch = await pull()
        except ClosedError:
            return
        if batch:
            yield batch
