"""One daemon thread per SDK object: blocking calls leave the event loop, in submission order.

confluent-kafka's ``Consumer`` lets one thread in at a time (a call from a second thread waits
until the first returns), and its rebalance callbacks run inside ``consume()``. So every call on
a consumer goes through one :class:`SdkThread`; while a callback waits for the event loop (to run
an async rebalance listener), :meth:`SdkThread.serve_until` keeps executing the calls the
listener submits (commits, seeks) on the same thread, which the SDK allows from inside its
callbacks. A call submitted ``outside_callbacks`` (the SDK object's close) is never served there:
it waits until the call running the callback has returned. Closed inside its own callback, a
librdkafka consumer is destroyed under the ``consume()`` still running, which then crashes the
process (SIGSEGV) once the callback returns.

The thread is a daemon and is never joined: a call stuck in the SDK cannot hang interpreter exit,
and ``close()`` of the resources above gives up waiting after its timeout.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, Literal, TypeVar

from broker.backends.kafka import sdk
from broker.backends.kafka.errors import translate

__all__ = ["SdkThread", "reject", "resolve", "sdk_client"]

T = TypeVar("T")

log = logging.getLogger("broker.backends.kafka")

_STOP: Final = object()
_WAKE: Final = object()


def resolve(future: asyncio.Future[Any], value: Any) -> None:
    """Give ``future`` its result unless it is already done (cancelled by its waiter, say).

    Runs on the future's loop: handed to ``call_soon_threadsafe`` from another thread, or called
    directly there.
    """
    if not future.done():
        future.set_result(value)


def reject(future: asyncio.Future[Any], exc: BaseException) -> None:
    """Fail ``future`` with ``exc`` unless it is already done (on the future's loop, as :func:`resolve`)."""
    if not future.done():
        future.set_exception(exc)


def sdk_client(kind: Literal["Consumer", "Producer"], config: dict[str, Any]) -> Any:
    """A new confluent-kafka ``Consumer`` or ``Producer`` of ``config`` (its refusal translated)."""
    ck = sdk.confluent()
    try:
        return getattr(ck, kind)(config)
    except ck.KafkaException as exc:
        raise translate(exc, f"cannot create a Kafka {kind.lower()}") from exc


class SdkThread:
    """A worker thread running callables one at a time; results come back as asyncio futures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._lock = threading.Lock()
        #: Calls set aside by :meth:`serve_until` (``outside_callbacks``), run by the worker's own
        #: loop before anything else once the callback has returned. Touched by the worker only.
        self._deferred: collections.deque[Any] = collections.deque()

    def __repr__(self) -> str:
        return f"<SdkThread {self.name}>"

    @property
    def ident(self) -> int | None:
        """The worker thread's id (None before the first call)."""
        return self._thread.ident if self._thread is not None else None

    def in_thread(self) -> bool:
        """True when called from the worker thread itself."""
        return self._thread is not None and threading.get_ident() == self._thread.ident

    def _start(self) -> None:
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def submit(self, fn: Callable[..., T], *args: Any, outside_callbacks: bool = False) -> asyncio.Future[T]:
        """Run ``fn(*args)`` on the worker; the returned future (of the running loop) gets its result.

        Cancelling the future does not stop the call: the SDK call runs to its end.
        ``outside_callbacks``: never run it inside a callback the worker is serving (see
        :meth:`serve_until`), but after the call running that callback has returned; for the SDK
        object's close.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"{self.name} is stopped")
            if self._thread is None:
                self._start_locked()
            self._queue.put((fn, args, future, loop, outside_callbacks))
        return future

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the worker without waiting; a failure is logged."""
        if self._stopped:
            return
        if self._thread is None:
            self._start()
        self._queue.put((fn, args, None, None, False))

    def serve_until(self, done: concurrent.futures.Future[Any]) -> None:
        """From the worker thread, inside an SDK callback: execute submitted calls until ``done``
        completes.

        Calls submitted ``outside_callbacks`` are set aside, in order, for the worker's own loop.
        Once the worker is stopped nothing more is served; this still waits for ``done``: the
        callback must not return into the SDK before its listener has finished.
        """
        done.add_done_callback(lambda _: self._queue.put(_WAKE))
        while not done.done():
            item = self._queue.get()
            if item is _WAKE:
                continue
            if item is _STOP:
                self._deferred.append(_STOP)  # the outer loop ends after the calls set aside
                concurrent.futures.wait([done])
                return
            if item[4]:
                self._deferred.append(item)
                continue
            self._execute(item)

    def stop(self) -> None:
        """Let the worker finish what was submitted, then end (never blocks)."""
        if not self._stopped:
            self._stopped = True
            if self._thread is not None:
                self._queue.put(_STOP)

    def abandon(self, error: BaseException, last: Callable[[], Any] | None = None) -> None:
        """Stop, and fail every call still queued with ``error`` (never blocks).

        For a worker stuck in an SDK call that will not return: the calls queued behind it would
        never run, and whoever awaits them would wait forever.

        ``last`` runs on the worker once the stuck call returns, if ever (its failure is logged):
        the place for the SDK object's own close. Stuck in a callback (:meth:`serve_until`), the
        worker runs it only after the call running that callback has returned. Until then the
        worker holds ``last``, so the SDK object is never freed elsewhere: freeing an
        unclosed librdkafka consumer closes it, which can block whichever thread drops the last
        reference (the event loop's, where no timeout can interrupt it) while the broker is gone.
        """
        with self._lock:
            self._stopped = True
            dropped = []
            while True:
                try:
                    dropped.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if self._thread is not None:
                if last is not None:
                    self._queue.put((last, (), None, None, True))
                self._queue.put(_STOP)
        for item in dropped:
            if item is _STOP or item is _WAKE:
                continue
            _, _, future, loop, _ = item
            if future is not None:
                try:
                    loop.call_soon_threadsafe(reject, future, error)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    pass

    def _run(self) -> None:
        deferred = self._deferred
        while True:
            item = deferred.popleft() if deferred else self._queue.get()
            if item is _STOP:
                return
            if item is _WAKE:
                continue
            self._execute(item)

    @staticmethod
    def _execute(item: tuple[Callable[..., Any], tuple[Any, ...], Any, Any, bool]) -> None:
        fn, args, future, loop, _ = item
        try:
            result = fn(*args)
        except BaseException as exc:  # delivered to the awaiting coroutine
            if future is None:
                log.warning("background SDK call %s failed: %r", getattr(fn, "__name__", fn), exc)
                return
            try:
                loop.call_soon_threadsafe(reject, future, exc)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
            return
        if future is not None:
            try:
                loop.call_soon_threadsafe(resolve, future, result)
            except RuntimeError:
                pass
