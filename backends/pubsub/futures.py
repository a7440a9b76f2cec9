"""Bridges from the SDK's threads and ``concurrent.futures`` to asyncio, without blocking the loop.

The SDK completes its futures on its own threads. Nothing here waits on them: done-callbacks
hand results to the event loop with ``call_soon_threadsafe``, once per future for single
operations and once per *group* for batches (one wake-up of the loop for many messages).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CompletionGroup", "post"]


def post(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """Run ``callback(*args)`` on ``loop`` from any thread; a no-op once the loop is closed."""
    with contextlib.suppress(RuntimeError):  # the loop was closed: nobody is waiting any more
        loop.call_soon_threadsafe(callback, *args)


class CompletionGroup:
    """One asyncio future for many SDK futures: done when all are, failed on the first failure.

    Futures are added with :meth:`add` (on the loop thread); :meth:`seal` says no more will
    come. SDK threads count completions under a lock and wake the loop only for the first
    failure and for the last completion. ``on_settled`` runs on the loop once every added
    future is done (e.g. to release flow-control capacity).
    """

    __slots__ = ("_error", "_lock", "_loop", "_on_settled", "_pending", "_sealed", "future", "size")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_settled: Callable[[], None] | None = None) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending = 0
        self._sealed = False
        self._error: BaseException | None = None
        self._on_settled = on_settled
        self.size = 0
        #: Done when every future added succeeded; failed with the first failure.
        self.future: asyncio.Future[None] = loop.create_future()

    @property
    def failed(self) -> bool:
        """True once some future of the group failed."""
        return self._error is not None

    def add(self, future: concurrent.futures.Future[Any]) -> None:
        """Count ``future`` in the group."""
        with self._lock:
            self._pending += 1
        self.size += 1
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        error = future.exception() if not future.cancelled() else concurrent.futures.CancelledError()
        with self._lock:
            self._pending -= 1
            first_error = error is not None and self._error is None
            if first_error:
                self._error = error
            finished = self._sealed and self._pending == 0
        if first_error or finished:
            post(self._loop, self._settle, finished)

    def seal(self) -> None:
        """No more futures will be added; settle at once if all are already done."""
        with self._lock:
            self._sealed = True
            finished = self._pending == 0
        if finished:
            self._settle(True)

    def _settle(self, finished: bool) -> None:
        future = self.future
        if not future.done():
            if self._error is not None:
                future.set_exception(self._error)
            elif finished:
                future.set_result(None)
        if finished and self._on_settled is not None:
            callback, self._on_settled = self._on_settled, None
            callback()
