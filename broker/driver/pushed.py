"""Portable iterator shells for brokers that push deliveries to the client.

Where the broker delivers on its own (AMQP ``basic.consume``, a receive thread of an SDK), every
backend needs the same iterator around it: start the subscription on enter or on the first read,
buffer what arrives, hand messages out one at a time or in batches with a timeout, drop
deliveries that went stale meanwhile, and on ``close()`` wake every waiter with
:class:`~broker.errors.ClosedError`. That shell lives here once; a backend writes a
:class:`PushDriver` (subscribe, turn a delivery into a :class:`~broker.Message`, unsubscribe)
and hands out :class:`PushedMessageIterator` / :class:`PushedBatchedMessageIterator` over it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, Protocol, Self

from broker.driver.batch_limits import check_batch_limits
from broker.driver.clock import clock
from broker.driver.resources import AsyncResource, BatchedMessageIteration, MessageIteration
from broker.errors import ClosedError, Timeout
from broker.message import Message

__all__ = ["PushDriver", "PushedBatchedMessageIterator", "PushedMessageIterator"]

#: Put in the buffer by ``close()``: wakes a waiter, which puts it back for the next one.
_CLOSED: Final = object()


class PushDriver(Protocol):
    """What a backend supplies for one subscription whose broker pushes deliveries."""

    #: Names the subscription in errors (``the consumer of <name> is closed``).
    name: str

    async def start(self, deliver: Callable[[Any], None]) -> None:
        """Subscribe; from then on call ``deliver(delivery)`` for every delivery, on the event loop.

        Raise a :class:`~broker.errors.BrokerError` when subscribing fails (the shell tries again
        on the next read).
        """

    def stale(self, delivery: Any) -> bool:
        """True for a delivery that may no longer be handed out (the broker took it back)."""

    def message(self, delivery: Any, now: float) -> Message:
        """The :class:`~broker.Message` of a delivery about to be handed out at ``now``."""

    async def stop(self) -> None:
        """Unsubscribe and release the subscription's resources (the broker takes back what is
        unsettled). Called once, after every waiter was woken; must not raise."""


class PushedMessages(AsyncResource):
    """The part both shells share: start on first use, the delivery buffer, hand-out, close."""

    def __init__(self, driver: PushDriver) -> None:
        self.driver = driver
        self._buffer: asyncio.Queue[Any] = asyncio.Queue()
        self._started = False
        self._start_lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.driver.name}{' closed' if self._closed else ''}>"

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    async def __aenter__(self) -> Self:
        await self._start()
        return self

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"the consumer of {self.driver.name} is closed")

    async def _start(self) -> None:
        if self._closed:
            raise self._closed_error()
        if self._started:
            return
        async with self._start_lock:
            if self._closed:
                raise self._closed_error()
            if not self._started:
                await self.driver.start(self._buffer.put_nowait)
                self._started = True

    def _hand_out(self, delivery: Any) -> Message:
        if delivery is _CLOSED:
            self._buffer.put_nowait(_CLOSED)  # wake the next waiter too
            raise self._closed_error()
        return self.driver.message(delivery, clock.time())

    async def _next(self, timeout: float | None) -> Message:
        if self._closed:
            raise self._closed_error()
        await self._start()
        stale = self.driver.stale
        try:
            async with asyncio.timeout(timeout):
                delivery = await self._buffer.get()
                while delivery is not _CLOSED and stale(delivery):
                    delivery = await self._buffer.get()
        except TimeoutError:
            raise Timeout(f"no message from {self.driver.name} within {timeout}s") from None
        return self._hand_out(delivery)

    def _take_ready(self, batch: list[Message], size: int) -> None:
        """Add what is buffered already to ``batch``, up to ``size`` messages."""
        buffer, stale = self._buffer, self.driver.stale
        while len(batch) < size and not buffer.empty():
            delivery = buffer.get_nowait()
            if delivery is _CLOSED:
                buffer.put_nowait(delivery)
                return
            if not stale(delivery):
                batch.append(self._hand_out(delivery))

    async def close(self) -> None:
        """Stop the subscription: every waiter gets ``ClosedError``, the driver unsubscribes. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._buffer.put_nowait(_CLOSED)
        async with self._start_lock:  # a start in progress finishes first, then is stopped
            pass
        await self.driver.stop()


class PushedMessageIterator(PushedMessages, MessageIteration):
    """A MessageIterator over a :class:`PushDriver`."""

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message; ``Timeout`` when none arrives within ``timeout`` seconds."""
        return await self._next(timeout)


class PushedBatchedMessageIterator(PushedMessages, BatchedMessageIteration):
    """A BatchedMessageIterator over a :class:`PushDriver`: what was delivered, up to ``batch_size``."""

    def __init__(self, driver: PushDriver, batch_size: int, batch_timeout: float) -> None:
        check_batch_limits(batch_size, batch_timeout)
        super().__init__(driver)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """Up to ``batch_size`` messages as soon as any came; ``[]`` after the timeout."""
        try:
            batch = [await self._next(self.batch_timeout if timeout is None else timeout)]
        except Timeout:
            return []
        self._take_ready(batch, self.batch_size)
        return batch
