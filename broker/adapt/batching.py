"""Iterator -> batched iterator, with lib-brokers' semantics.

Each ``next_batch()`` opens a window of ``timeout`` seconds and pulls until ``batch_size``
items arrived or the window closed; a closed window returns the partial batch (possibly
empty). A broker error with a partial batch in hand returns the partial batch first and
raises the error from the next call, so no item is held back unacknowledged. Cancelling
``next_batch()`` nacks the messages it had already taken. ``async with`` enters the source
iterator (on several brokers that makes the subscription exist) and leaves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

from broker.adapt._common import Pull, SourceWrapper, nack_leftovers
from broker.driver.resources import AsyncResource, _batches_until_closed
from broker.errors import ClosedError
from broker.interfaces import BatchedIterator, BatchedMessageIterator, MessageIterator, RecordIterator
from broker.message import Message, Record

__all__ = ["batched_messages", "batched_records"]

T = TypeVar("T")


class _Batching(SourceWrapper, AsyncResource, Generic[T]):
    def __init__(self, source: Any, pull: Pull[T], batch_size: int, timeout: float) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if timeout is None or timeout < 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        self.source = source
        self._pull = pull
        self.batch_size = batch_size
        self.timeout = timeout
        self._error: BaseException | None = None
        self.source_closed = False

    async def next_batch(self, timeout: float | None = None) -> list[T]:
        """Up to ``batch_size`` items that arrive within the window (``timeout`` overrides it)."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self.source_closed:
            raise ClosedError("the batched iterator's source is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout if timeout is None else timeout)
        batch: list[T] = []
        pull = self._pull
        try:
            while len(batch) < self.batch_size:
                remaining = deadline - loop.time()
                try:
                    batch.append(await pull(remaining if remaining > 0 else 0))
                except TimeoutError:
                    break
        except asyncio.CancelledError:
            await nack_leftovers(batch)
            raise
        except ClosedError:
            self.source_closed = True
            if batch:
                return batch
            raise
        except Exception as exc:
            if batch:
                self._error = exc
                return batch
            raise
        return batch

    def __aiter__(self) -> AsyncIterator[list[T]]:
        return _batches_until_closed(self.next_batch)

    async def close(self) -> None:
        """Close the source iterator."""
        await self.source.close()


def batched_messages(
    iterator: MessageIterator, batch_size: int = 100, timeout: float = 1.0
) -> BatchedMessageIterator:
    """A batched message iterator over ``iterator`` (which it owns and closes)."""
    return _Batching[Message](iterator, iterator.next_message, batch_size, timeout)


def batched_records(iterator: RecordIterator, batch_size: int = 100, timeout: float = 1.0) -> BatchedIterator:
    """A batched record iterator over ``iterator`` (which it owns and closes)."""
    return _Batching[Record](iterator, iterator.next_record, batch_size, timeout)
