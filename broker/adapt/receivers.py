"""Iterators and streams -> receivers with N workers; fan-in of receivers.

A receiver runs until its task is cancelled or the source raises a broker error. One feeder
pulls from the source into a small queue; ``concurrency`` workers take from it and call the
handler. A handler that raises has its still-unsettled messages nacked and the error logged;
the receiver keeps going. The nack's delay comes from ``nack_delay``: by default a bounded
exponential :class:`~broker.backoff.Backoff` by delivery attempt (0.1 s doubling up to 10 s), so
a handler that always fails neither spins nor starves other messages; a number is a fixed delay,
and ``None`` redelivers at once. When the receiver stops,
messages that were taken but not handled (queued, or in a handler that was interrupted) are
nacked, so they are redelivered rather than lost. A source error stops the workers and is
raised from ``receive()``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from broker.adapt._common import log, messages_in, nack_leftovers
from broker.backoff import DEFAULT_BACKOFF, Backoff, FailureCounter
from broker.errors import ClosedError, ConfigError
from broker.interfaces import (
    BatchedMessageIterator,
    BatchedReceiver,
    BatchHandler,
    Handler,
    MessageIterator,
    Receiver,
)
from broker.message import Message

__all__ = ["batched_receiver", "fan_in", "receiver", "receiver_from_batches"]

_STOP = object()

#: What ``nack_delay`` takes: a Backoff by attempt, a fixed delay in seconds, or None (at once).
NackDelay = Backoff | float | None


async def _nack_failed(unit: Any, nack_delay: NackDelay, failures: FailureCounter) -> None:
    """Nack the unsettled messages of a failed handler call, each with its backoff delay."""
    if not isinstance(nack_delay, Backoff):
        await nack_leftovers([unit], nack_delay)
        return
    leftovers = messages_in([unit])
    if not leftovers:
        return
    delays = {nack_delay.delay(failures.attempt(m)) for m in leftovers}
    if len(delays) == 1:
        await nack_leftovers(leftovers, delays.pop())
    else:
        for message in leftovers:
            await nack_leftovers([message], nack_delay.delay(failures.attempt(message)))


async def _run(
    feed: Callable[[Callable[[Any], Awaitable[None]]], Awaitable[None]],
    handle: Callable[[Any], Awaitable[None]],
    concurrency: int,
    nack_delay: NackDelay,
) -> None:
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
    failures = FailureCounter()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
    held: dict[int, Any] = {}  # units inside a handler; left here if the handler is interrupted

    async def worker() -> None:
        while True:
            unit = await queue.get()
            if unit is _STOP:
                queue.put_nowait(_STOP)
                return
            key = id(unit)
            held[key] = unit
            try:
                await handle(unit)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("message handler failed; nacking its unsettled messages")
                await _nack_failed(unit, nack_delay, failures)
            del held[key]

    async def feeder() -> None:
        try:
            await feed(queue.put)
        except ClosedError:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            await queue.put(_STOP)
            raise
        await queue.put(_STOP)

    loop = asyncio.get_running_loop()
    workers = [loop.create_task(worker()) for _ in range(concurrency)]
    feed_task = loop.create_task(feeder())
    error: BaseException | None = None
    try:
        try:
            await feed_task
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
        await asyncio.gather(*workers)
    finally:
        tasks = [feed_task, *workers]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        leftovers = list(held.values())
        while not queue.empty():
            unit = queue.get_nowait()
            if unit is not _STOP:
                leftovers.append(unit)
        if messages_in(leftovers):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(nack_leftovers(leftovers))
    if error is not None:
        raise error


class _IteratorReceiver:
    """A Receiver over a message iterator (or a batched one, unpacked)."""

    def __init__(
        self, feed: Callable[..., Awaitable[None]], concurrency: int, nack_delay: NackDelay
    ) -> None:
        self._feed = feed
        self.concurrency = concurrency
        self.nack_delay = nack_delay

    async def receive(self, handler: Handler) -> None:
        """Call ``handler`` for every message until cancelled."""
        await _run(self._feed, handler, self.concurrency, self.nack_delay)


class _BatchReceiver:
    """A BatchedReceiver over a batched iterator or batched stream."""

    def __init__(
        self, feed: Callable[..., Awaitable[None]], concurrency: int, nack_delay: NackDelay
    ) -> None:
        self._feed = feed
        self.concurrency = concurrency
        self.nack_delay = nack_delay

    async def receive_batch(self, handler: BatchHandler) -> None:
        """Call ``handler`` for every non-empty batch until cancelled."""
        await _run(self._feed, handler, self.concurrency, self.nack_delay)


def receiver(
    iterator: MessageIterator, concurrency: int = 1, nack_delay: NackDelay = DEFAULT_BACKOFF
) -> Receiver:
    """A receiver calling its handler for each message of ``iterator``, ``concurrency`` at a time."""

    async def feed(put: Callable[[Message], Awaitable[None]]) -> None:
        while True:
            message = await iterator.next_message()
            try:
                await put(message)
            except asyncio.CancelledError:
                await nack_leftovers([message])
                raise

    return _IteratorReceiver(feed, concurrency, nack_delay)


def receiver_from_batches(
    iterator: BatchedMessageIterator, concurrency: int = 1, nack_delay: NackDelay = DEFAULT_BACKOFF
) -> Receiver:
    """A receiver calling its handler per message of the batches pulled from ``iterator``."""

    async def feed(put: Callable[[Message], Awaitable[None]]) -> None:
        while True:
            batch = await iterator.next_batch()
            for i, message in enumerate(batch):
                try:
                    await put(message)
                except asyncio.CancelledError:
                    await nack_leftovers(batch[i:])
                    raise

    return _IteratorReceiver(feed, concurrency, nack_delay)


def batched_receiver(
    source: BatchedMessageIterator | AsyncIterator[list[Message]],
    concurrency: int = 1,
    nack_delay: NackDelay = DEFAULT_BACKOFF,
) -> BatchedReceiver:
    """A batched receiver: each worker takes whole batches from a batched iterator or stream."""

    async def feed(put: Callable[[list[Message]], Awaitable[None]]) -> None:
        if hasattr(source, "next_batch"):
            while True:
                batch = await source.next_batch()
                if batch:
                    try:
                        await put(batch)
                    except asyncio.CancelledError:
                        await nack_leftovers(batch)
                        raise
        else:
            async for batch in source:
                if batch:
                    try:
                        await put(batch)
                    except asyncio.CancelledError:
                        await nack_leftovers(batch)
                        raise

    return _BatchReceiver(feed, concurrency, nack_delay)


class _FanIn:
    def __init__(self, receivers: tuple[Receiver, ...]) -> None:
        self.receivers = receivers

    async def receive(self, handler: Handler) -> None:
        """Run every receiver with ``handler``; the first error stops them all and is raised."""
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(r.receive(handler)) for r in self.receivers]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))


def fan_in(*receivers: Receiver) -> Receiver:
    """One receiver running several; the first error cancels the others and is raised."""
    if not receivers:
        raise ValueError("fan_in needs at least one receiver")
    return _FanIn(receivers)
