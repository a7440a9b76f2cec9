"""Lease keeping: a message's deadline is extended (``Message.in_progress()``) while its handler runs.

A handler slower than the ack deadline would otherwise see its message redelivered to another
consumer while it still works on it (and its ack refused as late). On backends whose
``capabilities.in_progress`` is set, the app renews the deadline at half of it (every
:data:`DEFAULT_INTERVAL` seconds when the backend does not say what it is), as Pub/Sub's and
Service Bus's own clients do, for at most ``max_lease`` seconds from the delivery: a handler
stuck longer than that lets the broker redeliver its message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from broker.message import Message

__all__ = ["DEFAULT_INTERVAL", "DEFAULT_MAX_LEASE", "Lease"]

log = logging.getLogger("broker.app")

#: Seconds a lease is kept at most by default (from the delivery).
DEFAULT_MAX_LEASE: Final = 600.0
#: Seconds between renewals when the message does not carry its ack deadline.
DEFAULT_INTERVAL: Final = 10.0
#: The shortest renewal interval (a very short deadline does not make a busy loop).
_SHORTEST: Final = 0.05


class Lease:
    """The deadline of one message, renewed until :meth:`stop` (or ``until``, a loop time)."""

    __slots__ = ("_handle", "_interval", "_loop", "_message", "_stopped", "_task", "_until")

    def __init__(self, message: Message, maximum: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = message._ack_deadline
        self._interval = max(_SHORTEST, deadline / 2) if deadline > 0 else DEFAULT_INTERVAL
        self._loop = loop
        self._message = message
        self._until = loop.time() + maximum
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self._handle: asyncio.TimerHandle | None = loop.call_later(self._interval, self._fire)

    def _fire(self) -> None:
        self._handle = None
        if self._stopped or self._message.settled or self._loop.time() >= self._until:
            return
        self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        message = self._message
        try:
            await message.in_progress()
        except Exception as exc:  # settled meanwhile, or the broker refused: the broker's deadline rules
            if not message.settled:
                log.warning("could not extend the deadline of message %s: %r", message.id, exc)
            return
        if not self._stopped:
            self._handle = self._loop.call_later(self._interval, self._fire)

    def stop(self) -> None:
        """Stop renewing (the handler returned or raised)."""
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
