"""Portable iterator shells for brokers the client pulls from.

Where the client asks the broker for messages (a Pull RPC, an SDK receive call, a walk over an
in-memory subscription), every backend's consumer comes down to one method: take up to
``limit`` messages, as soon as any are there, raising :class:`~broker.errors.Timeout` when none
came within ``timeout`` seconds. A backend writes that method, ``_take(limit, timeout)``, and
these mixins turn it into the portable iterators once: ``next_message()`` takes one, and
``next_batch()`` takes up to ``batch_size`` (waiting ``batch_timeout`` by default) and answers
``[]`` instead of raising when nothing came. Brokers that push deliveries to the client use
:mod:`broker.driver.pushed` instead.
"""

from __future__ import annotations

import abc

from broker.driver.resources import AsyncResource, BatchedMessageIteration, MessageIteration
from broker.errors import Timeout
from broker.message import Message

__all__ = ["PulledBatchedMessageIteration", "PulledMessageIteration", "PulledMessages"]


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
