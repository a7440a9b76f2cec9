"""Portable iterator shells for brokers the client pulls from.

Where the client asks the broker for messages (a Pull RPC, an SDK receive call, a walk over an
in-memory subscription), every backend's consumer comes down to one method: take up to
``limit`` messages, as soon as any are there, raising :class:`~broker.errors.Timeout` when none
came within ``timeout`` seconds. A backend writes that method, ``_take(limit, timeout)``, and
these mixins turn it into the portable iterators once: ``next_message()`` takes one, and
``next_batch()`` takes up to ``batch_size`` (waiting ``batch_timeout`` by default) and answers
``[]`` instead of raising when nothing came. Brokers that push deliveries to the client use
:mod:`broker.driver.pushed` instead.

:class:`BufferedPull` writes ``_take`` for a backend whose receive call is a poll that may bring
many messages (SQS ``ReceiveMessage``, Redis ``XREADGROUP``): one read in flight at a time, a
buffer of what it brought, and a close that waits for the read instead of cutting it off.
"""

from __future__ import annotations

import abc
import asyncio
from collections import deque
from typing import Any

from broker.driver.clock import clock
from broker.driver.resources import AsyncResource, BatchedMessageIteration, MessageIteration
from broker.errors import ClosedError, Timeout
from broker.message import Message

__all__ = ["BufferedPull", "PulledBatchedMessageIteration", "PulledMessageIteration", "PulledMessages"]


class PulledMessages(AsyncResource):
    """What a pull-style consumer supplies: ``_take``."""

    @abc.abstractmethod
    async def _take(self, limit: int, timeout: float | None) -> list[Message]:
        """Between 1 and ``limit`` messages, as soon as any are there; ``Timeout`` after ``timeout``
        seconds (None: wait as long as it takes)."""


class PulledMessageIteration(PulledMessages, MessageIteration):
    """A MessageIterator over ``_take``: each ``next_message()`` takes one message."""

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message; ``Timeout`` when none arrives within ``timeout`` seconds."""
        return (await self._take(1, timeout))[0]


class PulledBatchedMessageIteration(PulledMessages, BatchedMessageIteration):
    """A BatchedMessageIterator over ``_take``: batches of up to ``batch_size``, ``[]`` after the timeout.

    The subclass sets ``batch_size`` and ``batch_timeout`` (validated the way its broker needs).
    """

    #: The most messages one ``next_batch()`` hands out.
    batch_size: int
    #: How long ``next_batch()`` waits for the first message when no timeout is given (seconds).
    batch_timeout: float

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """Up to ``batch_size`` messages as soon as any are there; ``[]`` after ``timeout`` seconds
        (default ``batch_timeout``)."""
        try:
            return await self._take(self.batch_size, self.batch_timeout if timeout is None else timeout)
        except Timeout:
            return []


async def _first_of(read: asyncio.Future[Any], closing: asyncio.Future[None], timeout: float | None) -> None:
    """Wait until ``read`` or ``closing`` is done, or ``timeout`` seconds passed; cancel neither.

    ``asyncio.wait(..., return_when=FIRST_COMPLETED)`` with less around it (no sets, no scan of
    the futures): it runs once per poll of the broker.
    """
    waiter = asyncio.get_running_loop().create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    read.add_done_callback(wake)
    closing.add_done_callback(wake)
    timer = None if timeout is None else asyncio.get_running_loop().call_later(timeout, wake)
    try:
        await waiter
    finally:
        read.remove_done_callback(wake)
        closing.remove_done_callback(wake)
        if timer is not None:
            timer.cancel()


class BufferedPull(PulledMessages):
    """``_take`` over ``_fetch``: one read in flight at a time, what it brings buffered.

    A backend supplies ``_fetch(limit)`` (one poll of the broker: up to ``limit`` messages, maybe
    none) and, optionally, ``_read_size(limit)``; it calls :meth:`_init_pull` in its constructor and
    :meth:`_stop_reading` first thing in its ``close()``. A read is shared by every taker: a take
    that times out leaves it running for the next one, so nothing a read brought is dropped.
    """

    topic: str

    def _init_pull(self) -> None:
        self._buffer: deque[Message] = deque()
        self._read: asyncio.Task[list[Message]] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    @abc.abstractmethod
    async def _fetch(self, limit: int) -> list[Message]:
        """One poll of the broker: up to ``limit`` messages (``[]`` when none came in its wait)."""

    def _read_size(self, limit: int) -> int:
        """How many messages a read asks for when a take wants ``limit``."""
        return limit

    async def _take(self, limit: int, timeout: float | None) -> list[Message]:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        if self._buffer:
            return self._hand_out(limit)
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_future()
        due = None if timeout is None else clock.monotonic() + timeout
        while True:
            if self._read is None:
                self._read = asyncio.ensure_future(self._fetch(self._read_size(limit)))
            read = self._read
            if not read.done():
                left = None if due is None else max(0.0, due - clock.monotonic())
                await _first_of(read, self._closing, left)
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            if not read.done():
                raise Timeout(f"no message on {self.topic!r} within {timeout}s")
            self._read = None
            self._buffer.extend(read.result())  # raises what the read raised
            if self._buffer:
                return self._hand_out(limit)
            if due is not None and clock.monotonic() >= due:
                raise Timeout(f"no message on {self.topic!r} within {timeout}s")

    def _hand_out(self, limit: int) -> list[Message]:
        buffer = self._buffer
        if limit >= len(buffer):  # a batch takes the whole read (the usual case): no call per message
            out = list(buffer)
            buffer.clear()
            return out
        return [buffer.popleft() for _ in range(limit)]

    async def _stop_reading(self, timeout: float) -> list[Message]:
        """Close for taking: wake every take (``ClosedError``), wait up to ``timeout`` seconds for the
        read in flight, and return every message nobody took (the read's included), to release.

        The read is waited for, not cancelled at once: cancelling drops only the client's side of a
        poll, and the broker may still hand what arrives meanwhile to the abandoned call, where it
        stays hidden for a whole ack deadline. Cut short by its own caller, this still leaves the
        read to end by itself (its messages then come back after their deadline).
        """
        self._closed = True
        if self._closing is not None and not self._closing.done():
            self._closing.set_result(None)
        read, self._read = self._read, None
        if read is not None:
            await asyncio.wait((read,), timeout=timeout)
            if read.done():
                if not read.cancelled() and read.exception() is None:
                    self._buffer.extend(read.result())
            else:
                read.cancel()
                read.add_done_callback(_outcome_consumed)
        left = list(self._buffer)
        self._buffer.clear()
        return left


def _outcome_consumed(task: asyncio.Task[list[Message]]) -> None:
    """A read abandoned by close: its end is nobody's to report (never "exception never retrieved")."""
    if not task.cancelled():
        task.exception()
