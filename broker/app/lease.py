"""Lease keeping: a message's deadline is extended (``Message.in_progress()``) while its handler runs.

A handler slower than the ack deadline would otherwise see its message redelivered to another
consumer while it still works on it (and its ack refused as late). On backends whose
``capabilities.in_progress`` is set, the app renews the deadline of a message whose handler has
run for a quarter of it (for :data:`DEFAULT_INTERVAL` seconds when the backend does not say what it
is), and again each time that much has passed since the last renewal, as Pub/Sub's and Service
Bus's own clients do, for at most ``max_lease`` seconds from the start of the handler: a handler
stuck longer than that lets the broker redeliver its message.

One :class:`LeaseKeeper` serves a subscriber: holding a message costs a dictionary entry, and one
timer, running only while messages are held, checks them every quarter deadline (the renewal comes
between a quarter and a half of the deadline after the last one).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from broker.message import Message

__all__ = ["DEFAULT_INTERVAL", "DEFAULT_MAX_LEASE", "LeaseKeeper"]

log = logging.getLogger("broker.app")

#: Seconds a lease is kept at most by default (from the start of the handler).
DEFAULT_MAX_LEASE: Final = 600.0
#: Seconds between renewals when the message does not carry its ack deadline.
DEFAULT_INTERVAL: Final = 10.0
#: The shortest check period (a very short deadline does not make a busy loop).
_SHORTEST: Final = 0.05


def _period(message: Message) -> float:
    deadline = message._ack_deadline
    return max(_SHORTEST, deadline / 4) if deadline > 0 else DEFAULT_INTERVAL


class LeaseKeeper:
    """Renews the deadlines of the messages it holds, until each is released or ``maximum`` passed."""

    __slots__ = ("_deadline", "_handle", "_held", "_loop", "_maximum", "_period", "_tasks")

    def __init__(self, maximum: float) -> None:
        self._maximum = maximum
        #: id(message) -> [message, start, last renewal] (loop times).
        self._held: dict[int, list[object]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._period = 0.0
        #: The ack deadline ``_period`` was computed from (a shorter one reschedules the check).
        self._deadline = 0.0
        self._tasks: set[asyncio.Task[None]] = set()

    def hold(self, message: Message) -> None:
        """Keep ``message``'s deadline from now until :meth:`release`."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = loop.time()
        self._held[id(message)] = [message, now, now]
        handle = self._handle
        if handle is None or message._ack_deadline < self._deadline:
            period = _period(message)
            if handle is None or period < self._period:
                if handle is not None:
                    handle.cancel()
                self._period = period
                self._deadline = message._ack_deadline
                self._handle = loop.call_at(now + period, self._tick)

    def release(self, message: Message) -> None:
        """Stop keeping ``message`` (its handler returned or raised)."""
        self._held.pop(id(message), None)

    def _tick(self) -> None:
        self._handle = None
        loop = self._loop
        if loop is None or not self._held:
            return
        now = loop.time()
        for entry in list(self._held.values()):
            message, start, last = entry
            assert isinstance(message, Message) and isinstance(start, float) and isinstance(last, float)
            if message.settled or now - start >= self._maximum:
                continue
            if now - last >= _period(message) * 0.999:
                entry[2] = now
                task = loop.create_task(self._renew(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self._handle = loop.call_at(now + self._period, self._tick)

    async def _renew(self, message: Message) -> None:
        try:
            await message.in_progress()
        except Exception as exc:  # settled meanwhile, or the broker refused: the broker's deadline rules
            if not message.settled:
                log.warning("could not extend the deadline of message %s: %r", message.id, exc)
