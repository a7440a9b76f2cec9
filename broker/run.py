"""Run an application's receivers until SIGTERM or SIGINT, then shut down gracefully.

>>> async def main() -> int:
...     backend = broker.connect("kafka://127.0.0.1:9092")
...     orders = backend.receiver("orders", "billing", concurrency=8, retry=broker.RetryPolicy(...))
...     refunds = backend.receiver("refunds", "billing")
...     return await broker.run((orders, handle_order), (refunds, handle_refund), backends=[backend])
>>> sys.exit(asyncio.run(main()))

On the first signal every receiver is stopped (``receiver.stop(drain_timeout)``): it takes no
new messages, the handlers already running get ``drain_timeout`` seconds to finish, and what is
left is nacked for redelivery. Then the backends are closed, in the order given, and the exit
code is returned: 0 after a clean stop, 1 if a receiver failed or a backend did not close
cleanly. A second signal cuts the drain short (running handlers are cancelled and their messages
nacked). Receivers without ``stop()`` are cancelled, which also nacks what they hold.

Before any receiver starts, every backend in ``backends`` is pinged (:meth:`broker.Backend.ping`):
a wrong host or password raises its ``ConnectionFailed`` / ``AuthenticationFailed`` from ``run``
at start (the backends closed), instead of showing at the first message.

Inside a hosting server (uvicorn, hypercorn, gunicorn workers), which owns SIGTERM and SIGINT,
pass ``signals=()`` and a ``stop`` event the server's shutdown sets, then await the run::

    stop = asyncio.Event()
    task = asyncio.create_task(broker.run((orders, handle), backends=[backend], signals=(), stop=stop))
    ...  # on the server's shutdown (an ASGI lifespan "shutdown" event):
    stop.set()
    exit_code = await task  # receivers drained, backends closed
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from broker.backend import DEFAULT_PING_TIMEOUT, Backend
from broker.errors import ConfigError

__all__ = ["run"]

log = logging.getLogger("broker.run")

#: Seconds granted beyond ``drain_timeout`` for receivers to nack their leftovers and return.
_GRACE = 5.0


async def _consume(receiver: Any, handler: Callable[[Any], Awaitable[None]]) -> None:
    if hasattr(receiver, "receive"):
        await receiver.receive(handler)
    else:
        await receiver.receive_batch(handler)


async def run(
    *consumers: tuple[Any, Callable[[Any], Awaitable[None]]],
    backends: Sequence[Backend] = (),
    drain_timeout: float = 30.0,
    stop: asyncio.Event | None = None,
    signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
    close_timeout: float = 30.0,
    ping_timeout: float | None = DEFAULT_PING_TIMEOUT,
) -> int:
    """Run ``(receiver, handler)`` pairs until a signal (or ``stop`` is set); drain; close; exit code.

    ``backends`` are pinged first (``ping_timeout`` seconds each, all at once; None: no ping): a
    backend that does not answer makes ``run`` raise its error (``ConnectionFailed``,
    ``AuthenticationFailed``) before any receiver starts, after closing ``backends``. They are
    closed after every receiver has returned, in the order given. ``stop`` lets the application
    end the run itself (``stop.set()``). ``signals`` are handled with ``loop.add_signal_handler``
    for the duration of the call (where the platform allows it); ``signals=()`` leaves them to a
    hosting server, which then ends the run through ``stop``. The run also ends when every
    receiver has returned on its own; a receiver that raises stops the others and makes the exit
    code 1.
    """
    if drain_timeout < 0:
        raise ConfigError(f"drain_timeout must be >= 0, got {drain_timeout}")
    for pair in consumers:
        if not (isinstance(pair, tuple) and len(pair) == 2 and callable(pair[1])):
            raise ConfigError(f"broker.run takes (receiver, handler) pairs, got {pair!r}")
        receiver = pair[0]
        if not (hasattr(receiver, "receive") or hasattr(receiver, "receive_batch")):
            raise ConfigError(f"{receiver!r} is not a receiver")
    if ping_timeout is not None:
        await _ping_or_close(backends, ping_timeout, close_timeout)
    stop = stop if stop is not None else asyncio.Event()
    force = asyncio.Event()
    with handling_signals(signals, stop, force, drain_timeout):
        return await serve_consumers(
            consumers,
            backends=backends,
            drain_timeout=drain_timeout,
            stop=stop,
            force=force,
            close_timeout=close_timeout,
        )


@contextlib.contextmanager
def handling_signals(
    signals: Sequence[int], stop: asyncio.Event, force: asyncio.Event, drain_timeout: float
) -> Iterator[None]:
    """Handle ``signals`` on the running loop for the block: the first sets ``stop`` (drain), a
    second sets ``force`` (cut the drain short); each is also handed to the ``signal.signal``
    handler that was in place before (see :func:`_chain`), which is restored after the block.

    Where the platform refuses a handler (not the main thread, Windows) the signal is left alone.
    """
    loop = asyncio.get_running_loop()
    installed: list[int] = []
    #: The handlers (``signal.signal``) in place before the run: restored after it, and called on
    #: a signal, so a hosting server that installed one (uvicorn) still learns of its signal.
    previous: dict[int, Any] = {}

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second signal %s: stopping now, nacking what is still in flight", signum)
            force.set()
        else:
            log.info("signal %s: draining (up to %ss)", signum, drain_timeout)
            stop.set()
        _chain(previous.get(signum), signum)

    for signum in signals:
        try:
            prior = signal.getsignal(signum)
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
            continue
        installed.append(signum)
        previous[signum] = prior
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
            if previous.get(signum) is not None:
                signal.signal(signum, previous[signum])


async def serve_consumers(
    consumers: Sequence[tuple[Any, Callable[[Any], Awaitable[None]]]],
    *,
    backends: Sequence[Backend],
    drain_timeout: float,
    stop: asyncio.Event,
    force: asyncio.Event,
    close_timeout: float,
    on_failure: Callable[[int, BaseException], object] | None = None,
) -> int:
    """The body of :func:`run` once its arguments are checked: consume until ``stop`` is set (or
    every receiver returned, or one failed), drain for ``drain_timeout`` seconds unless ``force``
    is set, close ``backends``; the exit code. Handles no signal itself. ``on_failure(index,
    error)`` hears of each receiver that failed (its index in ``consumers``)."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(_consume(r, h)) for r, h in consumers]
    exit_code = 0
    waiters: list[asyncio.Task[Any]] = []
    try:
        stop_wait = loop.create_task(stop.wait())
        force_wait = loop.create_task(force.wait())
        waiters = [stop_wait, force_wait]
        pending: set[asyncio.Task[Any]] = set(tasks)
        while pending and not stop.is_set():
            done, pending = await asyncio.wait([*pending, stop_wait], return_when=asyncio.FIRST_COMPLETED)
            pending.discard(stop_wait)
            if any(_failed(t) for t in done if t is not stop_wait):
                break  # a receiver died: stop the others
        for (receiver, _), task in zip(consumers, tasks, strict=True):
            if task.done():
                continue
            stopper = getattr(receiver, "stop", None)
            if callable(stopper):
                stopper(drain_timeout)
            else:
                task.cancel()
        deadline = loop.time() + drain_timeout + _GRACE
        running: set[asyncio.Task[Any]] = {t for t in tasks if not t.done()}
        while running and not force.is_set() and (left := deadline - loop.time()) > 0:
            _, running = await asyncio.wait(
                [*running, force_wait], timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            running.discard(force_wait)
        for task in tasks:
            if not task.done():
                task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for index, result in enumerate(results):
            if isinstance(result, Exception):
                log.error("a receiver failed: %r", result, exc_info=result)
                exit_code = 1
                if on_failure is not None:
                    on_failure(index, result)
    finally:
        for task in [*tasks, *waiters]:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(asyncio.gather(*tasks, *waiters, return_exceptions=True))
        if not await _close(backends, close_timeout):
            exit_code = 1
    return exit_code


def _chain(handler: Any, signum: int) -> None:
    """Call ``handler``, a ``signal.signal`` handler that was in place before the run, with ``signum``.

    Python's own defaults (``SIG_DFL``, ``SIG_IGN``, the ``KeyboardInterrupt`` of SIGINT) and the
    SIGINT handler of ``asyncio.run`` (which cancels the main task) are not called: they would end
    the process, or the run's loop, instead of letting it drain.
    """
    if not callable(handler) or handler is signal.default_int_handler:
        return
    if isinstance(handler, functools.partial) and isinstance(
        getattr(handler.func, "__self__", None), asyncio.Runner
    ):
        return
    try:
        handler(signum, None)
    except KeyboardInterrupt:  # a handler that interrupts: the run is draining already
        log.debug("the signal handler in place before broker.run raised KeyboardInterrupt on %s", signum)
    except Exception:
        log.exception("the signal handler in place before broker.run failed on signal %s", signum)


async def _close(backends: Sequence[Backend], close_timeout: float) -> bool:
    """Close ``backends`` in order; False when one of them failed to (logged)."""
    clean = True
    for backend in backends:
        try:
            await asyncio.wait_for(backend.close(), close_timeout)
        except Exception as exc:
            log.error("closing the %s backend failed: %r", getattr(backend, "name", "?"), exc)
            clean = False
    return clean


async def _ping_or_close(backends: Sequence[Backend], timeout: float, close_timeout: float) -> None:
    """Ping every backend at once; on a failure close them all and raise the first error.

    A backend without ``ping`` (one not built on :class:`broker.driver.base.BackendBase`) is not asked.
    """
    pings = [backend.ping(timeout) for backend in backends if callable(getattr(backend, "ping", None))]
    results = await asyncio.gather(*pings, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in failures:
        log.error("a backend did not answer its ping: %s", failure)
    if failures:
        await _close(backends, close_timeout)
        raise failures[0]


def _failed(task: asyncio.Task[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None
