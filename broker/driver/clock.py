"""The one clock of the portable layer and of ``inmem://``.

Every time-based behaviour of :mod:`broker` and of the in-memory backend (ack deadlines, delayed
nacks, retry backoff and error thresholds, batch windows, drain timeouts, health idle times,
publish times) reads :data:`clock`, never :func:`time.monotonic` or :func:`time.time` directly (a
ruff rule, TID251, forbids them outside this module). Waiting stays ``asyncio.sleep`` and loop
timers, which follow the running loop's own clock.

In production :data:`clock` is the system clock. In a test, :func:`follow_loop` points it at an
event loop whose time is virtual (:mod:`broker.testing.virtual_time`), so deadlines, backoff and
publish times move with the loop's time and a 30 s ack deadline passes in no wall time at all.

Reading the clock costs one attribute lookup more than calling :mod:`time` (``clock.monotonic()``
instead of ``time.monotonic()``): the attributes are the system functions themselves, swapped
whole, never wrapped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Clock", "clock", "follow_loop", "monotonic", "wall"]


class Clock:
    """Where the library reads time: ``monotonic()`` for durations, ``time()`` for POSIX wall time.

    Both attributes are plain callables, replaced as a pair by :func:`follow_loop`; read them at
    each call (``clock.monotonic()``), never keep them, so a test's virtual time applies.
    """

    __slots__ = ("monotonic", "time", "virtual")

    def __init__(self) -> None:
        #: Seconds on a monotonic clock: differences are durations, the origin means nothing.
        self.monotonic: Callable[[], float] = time.monotonic
        #: POSIX seconds (wall time): publish and failure times.
        self.time: Callable[[], float] = time.time
        #: True while the clock follows a loop with virtual time (see :func:`follow_loop`).
        self.virtual = False

    def __repr__(self) -> str:
        return f"<Clock {'virtual' if self.virtual else 'system'}>"


#: The process's clock (one, like the system clock it stands for).
clock = Clock()


def monotonic() -> float:
    """``clock.monotonic()``, for a callable to keep (a default argument, a callback)."""
    return clock.monotonic()


def wall() -> float:
    """``clock.time()``, for a callable to keep (a default argument, a callback)."""
    return clock.time()


@contextmanager
def follow_loop(loop: asyncio.AbstractEventLoop) -> Iterator[Clock]:
    """Make :data:`clock` read ``loop``'s time while the block runs (then the system clock again).

    ``clock.monotonic()`` is ``loop.time()``; ``clock.time()`` is the wall time at entry plus the
    loop time elapsed since, so publish times advance with a virtual loop too. Not reentrant: the
    clock follows one loop at a time.
    """
    if clock.virtual:
        raise RuntimeError("the clock already follows an event loop")
    origin_loop, origin_wall = loop.time(), time.time()
    loop_time = loop.time

    def wall_time() -> float:
        return origin_wall + (loop_time() - origin_loop)

    clock.monotonic, clock.time, clock.virtual = loop_time, wall_time, True
    try:
        yield clock
    finally:
        clock.monotonic, clock.time, clock.virtual = time.monotonic, time.time, False
