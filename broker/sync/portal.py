"""The portal: one background event-loop thread per process that runs the asyncio API for blocking code.

Every blocking call of :mod:`broker.sync` hands a coroutine of the ordinary async API to this
loop and waits for its result, bounded by the call's ``timeout``. The loop thread is a daemon
started on first use. A forked child cannot use its parent's loop thread (threads do not survive
``fork``): :func:`os.register_at_fork` drops the inherited portal in the child and bumps
:func:`generation`, so every blocking object re-opens its async resources on a fresh loop there,
abandoning the inherited SDK clients without closing them (closing a librdkafka, gRPC or Pulsar
handle in a forked child can hang).

A blocking call made from a thread whose event loop is running raises
:class:`~broker.errors.BlockingInEventLoop`: waiting there would stall that loop, or deadlock it
when it is the portal's own.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import ctypes
import gc
import importlib
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

from broker.driver.clock import clock
from broker.errors import BlockingInEventLoop, BrokerError, Timeout

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "Closing",
    "Portal",
    "abandon",
    "check_not_in_loop",
    "generation",
    "portal",
    "reopen_lock",
]

T = TypeVar("T")


class Closing:
    """``with`` support for a blocking resource: leaving the block calls its ``close()``."""

    def close(self) -> None:
        """Release the resource (subclasses implement it; idempotent)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

#: The timeout (seconds) of a blocking call that names none.
DEFAULT_TIMEOUT = 30.0
#: How long (seconds) closing, and flushing at interpreter exit, may take by default.
DEFAULT_CLOSE_TIMEOUT = 10.0
#: How much longer than its own timeout a caller waits for a call the loop has cancelled.
_GRACE = 1.0

log = logging.getLogger("broker.sync")

_get_running_loop = asyncio._get_running_loop  # the C fast path: no exception when there is none


class _Flushable(Protocol):
    close_timeout: float

    def _flush_at_exit(self, deadline: float) -> int: ...

    def _forked(self) -> None: ...


def check_not_in_loop(what: str = "a blocking call") -> None:
    """Raise :class:`~broker.errors.BlockingInEventLoop` when this thread runs an event loop."""
    if _get_running_loop() is not None:
        raise BlockingInEventLoop(
            f"{what} of broker.sync was made inside a running event loop; "
            "use the async API (broker.connect) in async code"
        )


class Portal:
    """One event loop running forever on a daemon thread, and the way to run coroutines on it."""

    def __init__(self) -> None:
        #: The loop every async resource of :mod:`broker.sync` lives on.
        self.loop = asyncio.new_event_loop()
        #: The process this portal belongs to (a forked child makes its own).
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="polybroker-sync-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def thread(self) -> threading.Thread:
        """The loop's thread."""
        return self._thread

    def call(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        timeout: float,
        what: str = "the call",
    ) -> T:
        """Run ``fn(*args)`` on the loop and return its result, waiting ``timeout`` seconds at most.

        Past ``timeout`` the coroutine is cancelled on the loop and
        :class:`~broker.errors.Timeout` is raised; the call's own errors are raised as they are.
        """
        check_not_in_loop(what)
        future = asyncio.run_coroutine_threadsafe(_bounded(fn, args, timeout, what), self.loop)
        try:
            return future.result(timeout + _GRACE)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise Timeout(f"{what} did not finish within {timeout} s") from None
        except BaseException:
            future.cancel()  # KeyboardInterrupt while waiting: stop the work on the loop as well
            raise

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Schedule ``fn(*args)`` on the loop thread (thread-safe; no waiting)."""
        self.loop.call_soon_threadsafe(fn, *args)


async def _bounded(fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], timeout: float, what: str) -> T:
    try:
        async with asyncio.timeout(timeout):
            return await fn(*args)
    except TimeoutError as exc:
        if isinstance(exc, BrokerError):
            raise
        raise Timeout(f"{what} did not finish within {timeout} s") from exc


_lock = threading.Lock()
_portal: Portal | None = None
_generation = 0
_at_exit: weakref.WeakSet[Any] = weakref.WeakSet()
_reopen_lock = threading.RLock()


def generation() -> int:
    """A number that changes in a forked child: objects made for another generation re-open."""
    return _generation


def reopen_lock() -> threading.RLock:
    """The lock under which blocking objects re-open their async resources in a forked child.

    Two threads making their first call in a child would otherwise both re-open one object, and
    what one of them hands over would land in state the other has replaced. Re-entrant: a
    publisher re-opening re-connects its backend under the same lock.
    """
    return _reopen_lock


def portal() -> Portal:
    """This process's portal, started on first use."""
    global _portal
    current = _portal
    if current is not None:
        return current
    with _lock:
        if _portal is None:
            _process_children.register()
            _portal = Portal()
        return _portal


def flush_at_exit(resource: _Flushable) -> None:
    """Flush ``resource`` (a publisher's pending publishes, a consumer's queued settlements) when the
    interpreter exits, unless it was closed before."""
    _at_exit.add(resource)


def forget_at_exit(resource: _Flushable) -> None:
    """Undo :func:`flush_at_exit` for ``resource`` (it was closed)."""
    _at_exit.discard(resource)


#: What a forked child inherited and replaced: kept referenced for the life of the process, never
#: freed (see :func:`abandon`). Its own reference count is raised once more below, so even the
#: clearing of module globals at interpreter shutdown does not free it.
_ABANDONED: list[Any] = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_ABANDONED))


def abandon(*inherited: Any) -> None:
    """Keep ``inherited`` (a forked child's copies of the parent's clients) alive until the process ends.

    Freeing an SDK client in a forked child runs its native destructor, which can wait forever on a
    lock one of the parent's threads held at the fork (a Pulsar consumer's destructor does, with
    the GIL held: the whole child freezes). The child abandons them instead: they are never freed.
    """
    _ABANDONED.extend(inherited)


def _after_fork_in_child() -> None:
    global _portal, _generation, _lock, _at_exit, _reopen_lock
    # Everything inherited is moved out of reach of the cyclic garbage collector: a collection in
    # the child would otherwise free the parent's SDK objects (see abandon()).
    gc.freeze()
    for resource in list(_at_exit):
        resource._forked()  # e.g. a publisher shuts its lock-free path: its next call re-opens
    abandon(_portal)
    _portal = None  # its thread did not survive the fork; its loop and SDK clients are abandoned
    _generation += 1
    _lock = threading.Lock()  # a parent thread may have held it at the fork
    _reopen_lock = threading.RLock()
    _at_exit = weakref.WeakSet()  # the parent's pending messages are the parent's to send
    _process_children.packages.clear()  # registered again when the child starts its portal


class _ProcessChildren:
    """Registered with ``multiprocessing`` (and Celery's ``billiard``): their child processes end
    with ``os._exit``, skipping ``atexit``, so the exit flush runs from their exit finalizers
    instead (it does nothing the second time). The registration is made in the parent and runs in
    each child once the package has reset its own finalizers there."""

    def __init__(self) -> None:
        self.packages: set[str] = set()

    def register(self) -> None:
        """Register with every process package imported so far (``multiprocessing`` always): for
        children forked from now on, and for this process, should it be such a child."""
        import sys

        importlib.import_module("multiprocessing.util")
        for name in ("multiprocessing.util", "billiard.util"):
            util = sys.modules.get(name)
            if util is None or name in self.packages:
                continue
            try:
                util.register_after_fork(self, partial(_finalize_in_child, util))
                _finalize_in_child(util, self)
                self.packages.add(name)
            except Exception:  # an unexpected version: atexit still covers plain exits
                log.debug("cannot register the exit flush with %s", name, exc_info=True)


def _finalize_in_child(util: Any, _registered: object) -> None:
    util.Finalize(None, _at_interpreter_exit, exitpriority=100)


_process_children = _ProcessChildren()


def _at_interpreter_exit() -> None:
    """Flush every open publisher's non-waiting publishes and every open consumer's queued acks,
    all within one deadline (the largest ``close_timeout`` among them); log what is left."""
    if _portal is None or _portal.pid != os.getpid():
        return
    resources = list(_at_exit)
    _at_exit.clear()
    if not resources:
        return
    deadline = clock.monotonic() + max(resource.close_timeout for resource in resources)
    left = 0
    for resource in resources:
        try:
            left += resource._flush_at_exit(deadline)
        except Exception:  # never a traceback at exit: what is left is counted below
            log.debug("flush at exit failed", exc_info=True)
    if left:
        log.error(
            "broker.sync: %d published messages or settlements were still pending at interpreter "
            "exit after close_timeout and are lost (settlements: redelivered after the ack deadline)",
            left,
        )


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_interpreter_exit)
