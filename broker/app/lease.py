"""Lease keeping: a message's deadline is extended (``Message.in_progress()``) while its handler runs.

A handler slower than the ack deadline would otherwise see its message redelivered to another
consumer while it still works on it (and its ack refused as late). On backends whose
``capabilities.in_progress`` is set, the app renews the deadline of a message whose handler has
run for between a quarter and a half of it (every :data:`DEFAULT_INTERVAL` seconds when the backend
does not say what it is), and again each quarter deadline after that, as Pub/Sub's and Service
Bus's own clients do, for at most about ``max_lease`` seconds of handling: a handler stuck longer
than that lets the broker redeliver its message.

One :class:`LeaseKeeper` serves a subscriber: holding a message costs a slot (a dictionary entry
for each further handler running at once), and one shared timer, running only while messages are
held, checks them every quarter deadline; no timer is armed or cancelled per message.
"""

from __future__ import annotations

import asyncio
import logging
import math
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
    """Renews the deadlines of the messages it holds, until each is released or ``maximum`` passed.

    Holding and releasing are a slot or a dictionary entry each (a handler that returns before the next check
    costs nothing more); the check notes the messages it sees for the first time and renews those
    it saw at the check before, so a renewal comes between one and two check periods (a quarter
    and a half of the deadline) into the handler. ``maximum`` counts from the first check that saw
    the handler running, less one period (it ends at most one period early).
    """

    __slots__ = ("_handle", "_loop", "_maximum", "_period", "_tasks", "armed_for", "current", "held", "seen")

    def __init__(self, maximum: float) -> None:
        self._maximum = maximum
        #: One message whose handler runs, held without a dictionary entry (a subscriber handling
        #: one message at a time holds each message here), or None.
        self.current: Message | None = None
        #: id(message) -> message, while its handler runs (the messages beyond ``current``).
        self.held: dict[int, Message] = {}
        #: id(message) -> [first check that saw it, last renewal] (loop times).
        self.seen: dict[int, list[float]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._period = 0.0
        #: The ack deadline the running check serves (infinite while none runs): a message with a
        #: shorter one must be :meth:`arm`\ ed for, any other needs nothing more than its entry.
        self.armed_for = math.inf
        self._tasks: set[asyncio.Task[None]] = set()

    def hold(self, message: Message) -> None:
        """Keep ``message``'s deadline from now until :meth:`release`.

        The per-message path of a subscriber does the same inline, saving the method calls: the
        message in :attr:`current` when that is free, else an entry in :attr:`held`; then
        :meth:`arm` when ``message._ack_deadline < armed_for``.
        """
        self.held[id(message)] = message
        if message._ack_deadline < self.armed_for:
            self.arm(message)

    def release(self, message: Message) -> None:
        """Stop keeping ``message`` (its handler returned or raised)."""
        key = id(message)
        self.held.pop(key, None)
        if self.seen:
            self.seen.pop(key, None)

    def arm(self, message: Message) -> None:
        """Make the check run, often enough for ``message``'s deadline (it is held or about to be)."""
        self._schedule(message)

    def _schedule(self, message: Message) -> None:
        period = _period(message)
        handle = self._handle
        if handle is not None and period >= self._period:
            return
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if handle is not None:
            handle.cancel()
        self._period = period
        self.armed_for = message._ack_deadline
        self._handle = loop.call_at(loop.time() + period, self._tick)

    def _tick(self) -> None:
        self._handle = None
        loop = self._loop
        seen = self.seen
        current = self.current
        if loop is None or (current is None and not self.held):
            seen.clear()
            self.armed_for = math.inf
            return
        now = loop.time()
        period = self._period
        running = list(self.held.items())
        if current is not None:
            running.append((id(current), current))
        for key, message in running:
            entry = seen.get(key)
            if entry is None:  # running for up to one period: renewed at the next check
                seen[key] = [now, now]
                continue
            first, last = entry
            if message.settled or now - first + period >= self._maximum:
                continue
            if now - last >= _period(message) * 0.999:
                entry[1] = now
                task = loop.create_task(self._renew(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self._handle = loop.call_at(now + period, self._tick)

    async def _renew(self, message: Message) -> None:
        try:
            await message.in_progress()
        except Exception as exc:  # settled meanwhile, or the broker refused: the broker's deadline rules
            if not message.settled:
                log.warning("could not extend the deadline of message %s: %r", message.id, exc)
