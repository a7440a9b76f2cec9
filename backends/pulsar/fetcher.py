"""A thread that moves messages from the client's blocking receive into the event loop, in chunks.

The Pulsar client's receive calls block (they release the GIL while they wait). One thread per
consumer or reader waits in them, takes whatever else is ready with one more call, and hands the
chunk to the loop with a single ``call_soon_threadsafe``. At most ``limit`` messages that were not
handed out yet wait on the loop: the thread takes another chunk (of up to ``chunk_max`` messages)
only while it fits. With ``on_demand`` it receives only while a
caller waits, so nothing is taken from the client ahead of time (the client starts a message's
ack-timeout clock when it is taken). Closing the client consumer (or reader) wakes the thread,
which then ends; nothing here ever blocks the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import _pulsar  # type: ignore[import-not-found]

from broker.backends.pulsar.errors import is_closed, is_timeout, translate
from broker.errors import ClosedError, ReceiveError, Timeout

__all__ = ["Fetcher"]

#: Milliseconds a receive call waits before the thread checks whether it should stop.
POLL_MS: Final = 500

_EMPTY: Final[list[Any]] = []


class Fetcher:
    """Receives on a thread, buffers chunks on the loop, hands out one message or a batch at a time."""

    def __init__(
        self,
        receive: Callable[[int], Any],
        receive_more: Callable[[], list[Any]] | None,
        limit: int,
        name: str,
        *,
        on_demand: bool = False,
        chunk_max: int = 1,
    ) -> None:
        self._receive = receive
        self._receive_more = receive_more
        self._limit = max(1, limit)
        self._chunk_max = max(1, chunk_max)
        self._name = name
        self._on_demand = on_demand
        self._demand = 0  # callers waiting (guarded by _room)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._room = threading.Condition()
        self._buffered = 0  # messages in _chunks and _current, not handed out yet (guarded by _room)
        self._stopping = False
        self._chunks: deque[list[Any]] = deque()
        self._current: list[Any] = _EMPTY
        self._position = 0
        self._waiters: set[asyncio.Future[None]] = set()
        self._error: BaseException | None = None
        self._closed = False

    # -- the receiving thread -------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start receiving for ``loop`` (idempotent)."""
        if self._thread is not None or self._closed:
            return
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name=f"pulsar-receive {self._name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        receive, receive_more, room = self._receive, self._receive_more, self._room
        # Take another chunk only while a full one fits (or nothing waits at all).
        room_left = self._limit - self._chunk_max
        on_demand = self._on_demand
        while True:
            with room:
                while not self._stopping and (
                    (self._buffered > room_left and self._buffered > 0) or (on_demand and self._demand == 0)
                ):
                    room.wait()
                if self._stopping:
                    return
            try:
                chunk = [receive(POLL_MS)]
                if receive_more is not None:
                    try:
                        chunk.extend(receive_more())
                    except _pulsar.PulsarException as exc:
                        if not is_timeout(exc) and not is_closed(exc):
                            raise
                        # keep the message already taken from the client: hand it out below
            except _pulsar.PulsarException as exc:
                if is_timeout(exc):
                    continue
                if not is_closed(exc):
                    self._post(self._fail, exc)
                return
            except BaseException as exc:  # never let the thread die silently
                self._post(self._fail, exc)
                return
            with room:
                self._buffered += len(chunk)
            if not self._post(self._deliver, chunk):
                return

    def _post(self, callback: Callable[[Any], None], argument: Any) -> bool:
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(callback, argument)
        except RuntimeError:  # the loop is closed
            self._stopping = True
            return False
        return True

    # -- the loop side --------------------------------------------------------------------
    def _deliver(self, chunk: list[Any]) -> None:
        if self._closed:  # received before close, arrived after: never handed out (the broker keeps them)
            return
        self._chunks.append(chunk)
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._waiters.clear()

    def _handed_out(self, count: int) -> None:
        """``count`` buffered messages (a whole chunk) were handed out: make room for the thread."""
        with self._room:
            self._buffered -= count
            self._room.notify()

    def _want(self, change: int) -> None:
        with self._room:
            self._demand += change
            self._room.notify()

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"the Pulsar consumer of {self._name} is closed")
        error = self._error
        if error is not None:
            raise translate(error, f"receiving from {self._name}", ReceiveError)

    async def _wait(self, timeout: float | None) -> bool:
        """Wait until something arrives (True) or ``timeout`` passes (False)."""
        loop = self._loop
        assert loop is not None
        if timeout is not None and timeout <= 0:
            return False
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.add(waiter)
        handle = None if timeout is None else loop.call_later(timeout, _time_up, waiter)
        if self._on_demand:
            self._want(1)
        try:
            await waiter
        finally:
            if self._on_demand:
                self._want(-1)
            self._waiters.discard(waiter)
            if handle is not None:
                handle.cancel()
        return bool(self._chunks) or self._closed or self._error is not None

    def ready(self) -> Any:
        """The next client message if one is buffered, else None (never waits)."""
        current = self._current
        position = self._position
        if position + 1 < len(current):
            self._position = position + 1
            return current[position]
        return None

    async def take(self, timeout: float | None) -> Any:
        """The next client message; ``Timeout`` when none arrives within ``timeout`` seconds."""
        while True:
            current = self._current
            position = self._position
            if position < len(current):
                self._position = position + 1
                if position + 1 == len(current):
                    self._handed_out(len(current))
                return current[position]
            if self._chunks:
                self._current = self._chunks.popleft()
                self._position = 0
                continue
            self._check()
            if not await self._wait(timeout):
                self._check()
                raise Timeout(f"no message from {self._name} within {timeout}s")

    async def take_many(self, count: int, timeout: float | None) -> list[Any]:
        """Up to ``count`` client messages that are ready, waiting up to ``timeout`` for the first."""
        while self._position >= len(self._current) and not self._chunks:
            self._check()
            if not await self._wait(timeout):
                self._check()
                return []
        out: list[Any] = []
        while len(out) < count:
            current = self._current
            position = self._position
            if position >= len(current):
                if not self._chunks:
                    break
                current = self._current = self._chunks.popleft()
                position = self._position = 0
                if not out and len(current) <= count:  # the common case: hand out the chunk as is
                    self._position = len(current)
                    self._handed_out(len(current))
                    return current
            end = min(len(current), position + count - len(out))
            out.extend(current[position:end])
            self._position = end
            if end == len(current):
                self._handed_out(len(current))
        return out

    def close(self) -> None:
        """Stop: waiting calls raise ClosedError; the thread ends once the client receive returns."""
        self._closed = True
        self._stopping = True
        with self._room:
            self._room.notify_all()
        self._wake()
        self._chunks.clear()
        self._current = _EMPTY
        self._position = 0


def _time_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
