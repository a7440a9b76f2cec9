"""Iterators, batched iterators and receivers -> async-iterator streams; streams -> batched streams.

A stream runs a pump task that pulls the next item as soon as the previous one is queued
("double buffering"), up to ``buffer`` items ahead. The iteration ends when the source is
closed; any other broker error is raised from the iteration, once. ``aclose()`` (or leaving
``async with``) stops the pump and nacks messages that were taken but never handed out.
``async with`` also enters the stream's source (on several brokers entering a consumer makes its
subscription exist, so what is published inside the block is delivered) and leaves it after the
pump stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from broker.adapt._common import SourceWrapper, hand_over, nack_leftovers
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError
from broker.interfaces import (
    BatchedIterator,
    BatchedMessageIterator,
    MessageIterator,
    Receiver,
    RecordIterator,
)
from broker.message import Message, Record

__all__ = [
    "Stream",
    "batch_stream",
    "batched_message_stream",
    "message_stream",
    "message_stream_from_batches",
    "record_batch_stream",
    "record_stream",
    "stream_from_receiver",
]

T = TypeVar("T")

_END = object()


class Stream(SourceWrapper, AsyncResource, Generic[T]):
    """An async iterator fed by a background pump; ``async with`` enters ``source`` (what the
    pump reads) and, on the way out, closes the stream (``aclose()``) and leaves ``source``."""

    def __init__(
        self,
        produce: Callable[[Callable[[T], Awaitable[None]]], Awaitable[None]],
        buffer: int,
        source: Any = None,
    ) -> None:
        self._produce = produce
        #: What the pump reads (an iterator, a receiver, a stream), or None.
        self.source = source
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=max(1, buffer))
        self._task: asyncio.Task[None] | None = None
        self._finished = False

    def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        try:
            await self._produce(self._queue.put)
        except ClosedError:
            pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._queue.put(_Failure(exc))
            return
        await self._queue.put(_END)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        if self._finished:
            raise StopAsyncIteration
        if self._task is None:
            self._start()
        item = await self._queue.get()
        if item is _END:
            self._finished = True
            raise StopAsyncIteration
        if isinstance(item, _Failure):
            self._finished = True
            raise item.error
        return item  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Stop the pump and nack what was taken but not handed out."""
        self._finished = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        leftovers = []
        while not self._queue.empty():
            leftovers.append(self._queue.get_nowait())
        await nack_leftovers(leftovers)

    async def close(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
        await super().__aexit__(exc_type, exc, tb)


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _pumping(pull: Callable[[], Awaitable[T]], skip_empty: bool = False) -> Callable[..., Awaitable[None]]:
    async def produce(put: Callable[[T], Awaitable[None]]) -> None:
        while True:
            item = await pull()
            if skip_empty and not item:
                continue
            await hand_over((item,), put)

    return produce


def message_stream(iterator: MessageIterator, buffer: int = 10) -> Stream[Message]:
    """Stream the messages of ``iterator``."""
    return Stream(_pumping(iterator.next_message), buffer, iterator)


def message_stream_from_batches(iterator: BatchedMessageIterator, buffer: int = 10) -> Stream[Message]:
    """Stream the messages of a batched iterator one at a time."""

    async def produce(put: Callable[[Message], Awaitable[None]]) -> None:
        while True:
            await hand_over(await iterator.next_batch(), put)

    return Stream(produce, buffer, iterator)


def batched_message_stream(iterator: BatchedMessageIterator, buffer: int = 2) -> Stream[list[Message]]:
    """Stream the non-empty batches of a batched message iterator."""
    return Stream(_pumping(iterator.next_batch, skip_empty=True), buffer, iterator)


def record_stream(iterator: RecordIterator, buffer: int = 1) -> Stream[Record]:
    """Stream the records of a record iterator."""
    return Stream(_pumping(iterator.next_record), buffer, iterator)


def record_batch_stream(iterator: BatchedIterator, buffer: int = 1) -> Stream[list[Record]]:
    """Stream the non-empty batches of a batched record iterator."""
    return Stream(_pumping(iterator.next_batch, skip_empty=True), buffer, iterator)


def stream_from_receiver(receiver: Receiver, buffer: int = 10) -> Stream[Message]:
    """Run ``receiver`` in the background and stream what it receives."""

    async def produce(put: Callable[[Message], Awaitable[None]]) -> None:
        await receiver.receive(put)

    return Stream(produce, buffer, receiver)


def batch_stream(source: AsyncIterator[T], batch_size: int = 100, timeout: float = 1.0) -> Stream[list[T]]:
    """Window a stream into batches.

    A batch is emitted when it holds ``batch_size`` items or ``timeout`` seconds after its first
    item arrived, whichever comes first (a fixed window, so latency stays bounded under a steady
    trickle); the remainder is emitted when the source ends.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")

    async def produce(put: Callable[[list[T]], Awaitable[None]]) -> None:
        inner: Stream[T] = Stream(_forward(source), batch_size)
        loop = asyncio.get_running_loop()
        batch: list[T] = []
        try:
            while True:
                try:
                    if not batch:
                        batch.append(await inner.__anext__())
                        deadline = loop.time() + timeout
                    async with asyncio.timeout_at(deadline):
                        while len(batch) < batch_size:
                            batch.append(await inner.__anext__())
                except TimeoutError:
                    pass
                except StopAsyncIteration:
                    if batch:
                        await put(batch)
                    return
                out, batch = batch, []
                await put(out)
        except asyncio.CancelledError:
            await nack_leftovers(batch)
            raise
        finally:
            await inner.aclose()
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()

    return Stream(produce, 1, source)


def _forward(source: AsyncIterator[T]) -> Callable[[Callable[[T], Awaitable[None]]], Awaitable[None]]:
    async def produce(put: Callable[[T], Awaitable[None]]) -> None:
        async for item in source:
            await hand_over((item,), put)

    return produce
