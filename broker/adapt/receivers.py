"""Iterators and streams -> receivers with N workers; fan-in of receivers.

A receiver runs until its task is cancelled, :meth:`stop` is called, or the source raises a
broker error. One feeder pulls from the source into a small queue; ``concurrency`` workers take
from it and call the handler.

Failures. Without ``retry``, a handler that raises has its still-unsettled messages nacked and
the error logged; the receiver keeps going. The nack's delay comes from ``nack_delay``: by
default a bounded exponential :class:`~broker.backoff.Backoff` by delivery attempt (0.1 s
doubling up to 10 s), so a handler that always fails neither spins nor starves other messages;
a number is a fixed delay, and ``None`` redelivers at once. With ``retry=RetryPolicy(...)``
(:mod:`broker.retry`) the policy decides: nack with backoff or retry in place, dead-letter after
``max_attempts`` or a non-retryable error, pause on an error threshold. In ordered mode the
messages of one key are handled by one worker at a time, in the order they arrived.

Stopping. ``stop()`` drains: the receiver takes no new messages, lets the handlers already
running finish for up to ``drain_timeout`` seconds, then cancels the rest; ``receive()`` returns.
Cancelling ``receive()`` stops at once. Either way, messages that were taken but not handled
(queued, waiting behind their key, or in a handler that was interrupted) are nacked, so they are
redelivered rather than lost. A source error stops the workers and is raised from ``receive()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self

from broker.adapt._common import (
    SHUTDOWN_NACK_TIMEOUT,
    StopFeeding,
    enter_source,
    hand_over,
    leave_source,
    log,
    messages_in,
    nack_leftovers,
    run_until_first_error,
)
from broker.backoff import DEFAULT_BACKOFF, Backoff, FailureCounter
from broker.driver.options import check_receiver_options
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError, ConfigError
from broker.interfaces import (
    BatchedMessageIterator,
    BatchedReceiver,
    BatchHandler,
    DrainingReceiver,
    Handler,
    MessageIterator,
    Publisher,
    Receiver,
)
from broker.message import Message
from broker.retry import Retrier, RetryPolicy
from broker.settle import UnsettledWarnings

__all__ = [
    "DEFAULT_DRAIN_TIMEOUT",
    "NackDelay",
    "StoppableReceiver",
    "batched_receiver",
    "fan_in",
    "receiver",
    "receiver_from_batches",
    "register_failure_rule",
]

_STOP = object()

#: What ``nack_delay`` takes: a Backoff by attempt, a fixed delay in seconds, or None (at once).
NackDelay = Backoff | float | None

#: Seconds ``stop()`` lets running handlers finish before cancelling them.
DEFAULT_DRAIN_TIMEOUT = 30.0

#: Seconds after which the receiver's tasks still running after a cancel are cancelled again: longer
#: than their bounded nacking of leftovers (``SHUTDOWN_NACK_TIMEOUT``), which it must not cut short.
_RECANCEL_INTERVAL = SHUTDOWN_NACK_TIMEOUT + 1.0

#: Feed: ``feed(put, gate)`` pulls units and puts them; ``gate()`` is awaited before each pull.
_Feed = Callable[[Callable[[Any], Awaitable[None]], Callable[[], Awaitable[None]]], Awaitable[None]]


async def _nack_failed(unit: Any, nack_delay: NackDelay, failures: FailureCounter) -> None:
    """Nack the unsettled messages of a failed handler call, each with its backoff delay."""
    if not isinstance(nack_delay, Backoff):
        await nack_leftovers([unit], nack_delay, bounded=False)
        return
    leftovers = messages_in([unit])
    if not leftovers:
        return
    delays = {nack_delay.delay(failures.attempt(m)) for m in leftovers}
    if len(delays) == 1:
        await nack_leftovers(leftovers, delays.pop(), bounded=False)
    else:
        for message in leftovers:
            await nack_leftovers([message], nack_delay.delay(failures.attempt(message)), bounded=False)


#: handler -> its ``with_failure_rule`` (see :func:`register_failure_rule`); weak: a handler dropped
#: by its app leaves no entry. Keyed by the handler itself, so a wrapper around it (a telemetry
#: stage, a middleware) is not mistaken for it and keeps the receiver's own rule.
_OWN_FAILURE_RULES: weakref.WeakKeyDictionary[Any, Callable[[Any], Callable[[Any], Awaitable[None]]]] = (
    weakref.WeakKeyDictionary()
)


def register_failure_rule(
    handler: Callable[[Any], Awaitable[None]],
    with_failure_rule: Callable[[Callable[[Any], Awaitable[None]]], Callable[[Any], Awaitable[None]]],
) -> None:
    """Let ``handler`` apply a receiver's failure rule itself, saving a coroutine a message.

    For a handler that settles every message it is given before returning (an application's
    auto-acking pipeline). A receiver without a retry policy then calls
    ``with_failure_rule(failed)`` once and runs what it returns instead of ``handler``: the same
    per-message call, awaiting ``failed(message)`` inside its ``except Exception`` (``failed`` logs
    the error and nacks the unsettled message by the receiver's ``nack_delay``, as the receiver
    does around any other handler). Only ``handler`` itself is recognised, never a wrapper of it.
    """
    _OWN_FAILURE_RULES[handler] = with_failure_rule


def _own_failure_rule(
    handler: Callable[[Any], Awaitable[None]],
) -> Callable[[Callable[[Any], Awaitable[None]]], Callable[[Any], Awaitable[None]]] | None:
    """The rule :func:`register_failure_rule` registered for ``handler``; None for any other
    handler, an unhashable or not weakly referable one (a callable object with ``__slots__``) too."""
    try:
        return _OWN_FAILURE_RULES.get(handler)
    except TypeError:
        return None


def _caller(
    handler: Callable[[Any], Awaitable[None]], nack_delay: NackDelay, retrier: Retrier | None
) -> Callable[[Any], Awaitable[None]]:
    """``call(unit)``: the handler with the failure rules applied; never raises the handler's error.

    A handler that returns leaving a message unsettled is warned about (:class:`UnsettledWarnings`).

    A handler registered with :func:`register_failure_rule` applies the failure rule itself
    (without a retry policy only: a policy's rules stay here).
    """
    own_rule = _own_failure_rule(handler) if retrier is None else None
    if own_rule is not None:
        failed_calls = FailureCounter()

        async def failed(unit: Any) -> None:
            log.exception("message handler failed; nacking its unsettled messages")
            await _nack_failed(unit, nack_delay, failed_calls)

        return own_rule(failed)
    unsettled = UnsettledWarnings(handler)
    if retrier is not None:
        bound = retrier

        async def checked(unit: Any) -> None:
            await handler(unit)
            unsettled.check(unit)

        async def call_with_policy(unit: Any) -> None:
            if isinstance(unit, list):
                await bound.handle_batch(unit, checked)
            else:
                await bound.handle(unit, checked)

        return call_with_policy
    failures = FailureCounter()

    async def call(unit: Any) -> None:
        try:
            await handler(unit)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("message handler failed; nacking its unsettled messages")
            await _nack_failed(unit, nack_delay, failures)
        else:
            unsettled.check(unit)

    return call


async def _run(
    feed: _Feed,
    call: Callable[[Any], Awaitable[None]],
    concurrency: int,
    stop: asyncio.Event,
    drain_timeout: Callable[[], float | None],
    retrier: Retrier | None,
) -> None:
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
    if concurrency == 1:
        await _run_inline(feed, call, stop, drain_timeout, retrier)
        return
    ordered = retrier is not None and retrier.ordered
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
    held: dict[int, Any] = {}  # units inside a handler; left here if the handler is interrupted
    waiting: dict[str, deque[Any]] = {}  # ordered mode: key -> units behind the one being handled
    room = asyncio.Semaphore(max(64, 8 * concurrency))  # bounds the units waiting behind keys

    async def run_one(unit: Any) -> None:
        key = id(unit)
        held[key] = unit
        await call(unit)
        del held[key]
        _raise_if_cancelled()

    async def worker() -> None:
        while not stop.is_set():
            unit = await queue.get()
            if unit is _STOP:
                queue.put_nowait(_STOP)
                return
            key = unit.key if ordered and isinstance(unit, Message) else None
            if key is None:
                await run_one(unit)
                continue
            if key in waiting:  # another worker holds this key: queue up behind it
                parked = id(unit)
                held[parked] = unit  # nacked if we are cancelled while waiting for room
                await room.acquire()
                del held[parked]
                behind = waiting.get(key)  # looked up again: the key may have been freed meanwhile
                if behind is not None:
                    behind.append(unit)
                    continue
                room.release()
            behind = waiting[key] = deque()
            await run_one(unit)
            while behind and not stop.is_set():
                next_unit = behind.popleft()
                room.release()
                await run_one(next_unit)
            if not behind:
                del waiting[key]

    async def gate() -> None:
        if retrier is not None:
            await retrier.wait_if_paused()

    async def feeder() -> None:
        try:
            await feed(queue.put, gate)
        except ClosedError:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            await queue.put(_STOP)
            raise
        await queue.put(_STOP)

    loop = asyncio.get_running_loop()
    workers = [loop.create_task(worker()) for _ in range(concurrency)]
    feed_task = loop.create_task(feeder())
    stop_task = loop.create_task(stop.wait())
    error: BaseException | None = None
    try:
        await asyncio.wait([feed_task, stop_task], return_when=asyncio.FIRST_COMPLETED)
        if feed_task.done() and not stop.is_set():
            try:
                feed_task.result()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
            pending: set[asyncio.Task[Any]] = set(workers)  # they finish the queue, up to _STOP
            while pending and not stop.is_set():
                _, pending = await asyncio.wait([*pending, stop_task], return_when=asyncio.FIRST_COMPLETED)
                pending.discard(stop_task)
        if stop.is_set():
            # Drain: take nothing more; running handlers get drain_timeout; the rest is nacked.
            feed_task.cancel()
            await asyncio.gather(feed_task, return_exceptions=True)
            queued: list[Any] = []
            while not queue.empty():
                unit = queue.get_nowait()
                if unit is not _STOP:
                    queued.append(unit)
            queue.put_nowait(_STOP)  # wakes the idle workers
            if queued:
                await nack_leftovers(queued)
            running = [w for w in workers if not w.done()]
            if running:
                await asyncio.wait(running, timeout=drain_timeout())
        for worker_task in workers:
            if worker_task.done() and not worker_task.cancelled() and worker_task.exception() is not None:
                raise worker_task.exception()  # type: ignore[misc]
    finally:
        tasks = [feed_task, stop_task, *workers]
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(_cancel_and_wait(tasks))
        leftovers = list(held.values())
        for behind in waiting.values():
            leftovers.extend(behind)
        while not queue.empty():
            unit = queue.get_nowait()
            if unit is not _STOP:
                leftovers.append(unit)
        if messages_in(leftovers):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(nack_leftovers(leftovers))
    if error is not None:
        raise error


async def _run_inline(
    feed: _Feed,
    call: Callable[[Any], Awaitable[None]],
    stop: asyncio.Event,
    drain_timeout: Callable[[], float | None],
    retrier: Retrier | None,
) -> None:
    """:func:`_run` with one handler at a time: the feed calls the handler itself, so a message is
    taken from the consumer only once the handler is free (as with a hand-over queue of one), and
    no task switch separates two messages: a source with messages buffered hands them out in one
    pass of the event loop, and the settlements they make go out together.

    On stop, the running handler gets ``drain_timeout``; a message the feed offers after the stop
    is refused (:class:`~broker.adapt._common.StopFeeding`) and nacked with what came with it, and a
    feed waiting for messages is cancelled.
    """
    held: dict[int, Any] = {}  # the unit inside the handler; left here if the handler is interrupted
    idle = asyncio.Event()  # set while no handler runs
    idle.set()

    async def put(unit: Any) -> None:
        if stop.is_set():
            raise StopFeeding
        key = id(unit)
        held[key] = unit
        idle.clear()
        try:
            await call(unit)
        finally:
            idle.set()
        del held[key]
        _raise_if_cancelled()

    async def gate() -> None:  # before each pull: a stopped receiver takes nothing more
        if stop.is_set():
            raise StopFeeding
        if retrier is not None:
            await retrier.wait_if_paused()
        if stop.is_set():
            raise StopFeeding

    async def feeding() -> None:
        await feed(put, gate)

    loop = asyncio.get_running_loop()
    feed_task = loop.create_task(feeding())
    stop_task = loop.create_task(stop.wait())
    error: BaseException | None = None
    try:
        await asyncio.wait([feed_task, stop_task], return_when=asyncio.FIRST_COMPLETED)
        if not feed_task.done():  # stopped: let the running handler finish, then end the feed
            if not idle.is_set():
                idle_task = loop.create_task(idle.wait())
                try:
                    await asyncio.wait([feed_task, idle_task], timeout=drain_timeout())
                finally:
                    idle_task.cancel()
            feed_task.cancel()
        done = (await asyncio.gather(feed_task, return_exceptions=True))[0]
        if isinstance(done, Exception) and not isinstance(done, ClosedError | StopFeeding):
            error = done
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(_cancel_and_wait([feed_task, stop_task]))
        leftovers = list(held.values())
        if messages_in(leftovers):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(nack_leftovers(leftovers))
    if error is not None:
        raise error


def _raise_if_cancelled() -> None:
    """Raise ``CancelledError`` when this task was cancelled and the error got lost on the way.

    Python 3.11's ``asyncio.wait_for`` (which SDKs await their calls with) returns the awaited
    result and drops the cancellation when both arrive together; the task's ``cancelling()``
    count still shows it.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def _cancel_and_wait(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until all are done, cancelling again every
    ``_RECANCEL_INTERVAL`` seconds those still running (a cancellation lost inside an SDK call
    must not leave a task waiting forever)."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_RECANCEL_INTERVAL)
        if pending:
            log.warning("%d receiver task(s) still running after a cancel: cancelling again", len(pending))


@dataclasses.dataclass(eq=False, repr=False)
class StoppableReceiver:
    """What the adapters' receivers share: the failure rules and a graceful :meth:`stop`."""

    _feed: _Feed
    concurrency: int
    nack_delay: NackDelay
    #: The bound retry policy (None: ``nack_delay`` rules).
    retrier: Retrier | None
    drain_timeout: float | None
    _stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False)

    def stop(self, drain_timeout: float | None = None) -> None:
        """Stop taking messages; running handlers get ``drain_timeout`` seconds (default: the
        receiver's), then ``receive()`` nacks what is left and returns. A stopped receiver stays so."""
        if drain_timeout is not None:
            self.drain_timeout = drain_timeout
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    async def _receive(self, handler: Callable[[Any], Awaitable[None]]) -> None:
        call = _caller(handler, self.nack_delay, self.retrier)
        await _run(self._feed, call, self.concurrency, self._stop, lambda: self.drain_timeout, self.retrier)


class _IteratorReceiver(StoppableReceiver):
    """A Receiver over a message iterator (or a batched one, unpacked)."""

    async def receive(self, handler: Handler) -> None:
        """Call ``handler`` for every message until cancelled or stopped."""
        await self._receive(handler)


class _BatchReceiver(StoppableReceiver):
    """A BatchedReceiver over a batched iterator or batched stream."""

    async def receive_batch(self, handler: BatchHandler) -> None:
        """Call ``handler`` for every non-empty batch until cancelled or stopped."""
        await self._receive(handler)


def _bind(
    retry: RetryPolicy | None,
    nack_delay: NackDelay,
    publisher: Publisher | None,
    topic: str | None,
    subscription: str | None,
    *,
    concurrency: object,
    drain_timeout: object,
) -> Retrier | None:
    """Check the receiver's options where they are given, and bind ``retry`` to its source."""
    check_receiver_options(
        concurrency=concurrency, nack_delay=nack_delay, drain_timeout=drain_timeout, retry=retry
    )
    if retry is None:
        return None
    if not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be a broker.RetryPolicy, got {retry!r}")
    if nack_delay is not DEFAULT_BACKOFF:
        raise ConfigError("give either retry= or nack_delay=, not both (a RetryPolicy has its own backoff)")
    return retry.bind(publisher=publisher, topic=topic, subscription=subscription)


def _pulling_receiver(
    pull: Callable[[], Awaitable[Sequence[Message]]],
    concurrency: int,
    nack_delay: NackDelay,
    retry: RetryPolicy | None,
    drain_timeout: float | None,
    publisher: Publisher | None,
    topic: str | None,
    subscription: str | None,
) -> DrainingReceiver:
    """The receiver of :func:`receiver` and :func:`receiver_from_batches`: each ``pull()`` is handed over."""
    retrier = _bind(
        retry,
        nack_delay,
        publisher,
        topic,
        subscription,
        concurrency=concurrency,
        drain_timeout=drain_timeout,
    )

    async def feed(put: Callable[[Message], Awaitable[None]], gate: Callable[[], Awaitable[None]]) -> None:
        while True:
            await gate()
            await hand_over(await pull(), put)

    return _IteratorReceiver(feed, concurrency, nack_delay, retrier, drain_timeout)


def receiver(
    iterator: MessageIterator,
    concurrency: int = 1,
    nack_delay: NackDelay = DEFAULT_BACKOFF,
    *,
    retry: RetryPolicy | None = None,
    drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT,
    publisher: Publisher | None = None,
    topic: str | None = None,
    subscription: str | None = None,
) -> DrainingReceiver:
    """A receiver calling its handler for each message of ``iterator``, ``concurrency`` at a time.

    ``retry`` applies a :class:`~broker.retry.RetryPolicy` (``publisher`` serves its
    ``DeadLetterTopic``; ``topic``/``subscription`` name the source in dead-letter attributes).
    ``drain_timeout`` is how long ``stop()`` lets running handlers finish.
    """

    async def pull() -> Sequence[Message]:
        return (await iterator.next_message(),)

    return _pulling_receiver(
        pull, concurrency, nack_delay, retry, drain_timeout, publisher, topic, subscription
    )


def receiver_from_batches(
    iterator: BatchedMessageIterator,
    concurrency: int = 1,
    nack_delay: NackDelay = DEFAULT_BACKOFF,
    *,
    retry: RetryPolicy | None = None,
    drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT,
    publisher: Publisher | None = None,
    topic: str | None = None,
    subscription: str | None = None,
) -> Receiver:
    """A receiver calling its handler per message of the batches pulled from ``iterator``.

    ``retry``, ``drain_timeout`` and the rest as for :func:`receiver`.
    """
    return _pulling_receiver(
        iterator.next_batch, concurrency, nack_delay, retry, drain_timeout, publisher, topic, subscription
    )


def batched_receiver(
    source: BatchedMessageIterator | AsyncIterator[list[Message]],
    concurrency: int = 1,
    nack_delay: NackDelay = DEFAULT_BACKOFF,
    *,
    retry: RetryPolicy | None = None,
    drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT,
    publisher: Publisher | None = None,
    topic: str | None = None,
    subscription: str | None = None,
) -> BatchedReceiver:
    """A batched receiver: each worker takes whole batches from a batched iterator or stream.

    With ``retry``, a failed batch's unsettled messages are each nacked or dead-lettered by the
    policy (``mode="ordered"`` is refused: a batch is not retried in place).
    """
    retrier = _bind(
        retry,
        nack_delay,
        publisher,
        topic,
        subscription,
        concurrency=concurrency,
        drain_timeout=drain_timeout,
    )
    if retrier is not None and retrier.ordered:
        raise ConfigError("a batched receiver cannot retry in place: use mode='unordered'")

    async def feed(
        put: Callable[[list[Message]], Awaitable[None]], gate: Callable[[], Awaitable[None]]
    ) -> None:
        if hasattr(source, "next_batch"):
            while True:
                await gate()
                batch = await source.next_batch()
                if batch:
                    await hand_over((batch,), put)
        else:
            async for batch in source:
                if batch:
                    await hand_over((batch,), put)
                await gate()

    return _BatchReceiver(feed, concurrency, nack_delay, retrier, drain_timeout)


class _FanIn(AsyncResource):
    """One receiver running several (:func:`fan_in`), with their stopping and closing abilities.

    :meth:`stop` stops every receiver that has ``stop()`` gracefully and cancels the ones that have
    none (which nacks what they hold), so a fan-in can always be stopped; ``receive()`` returns
    once all of them did. ``async with`` enters and leaves each receiver that is a context manager;
    :meth:`close` closes each one that closes.
    """

    def __init__(self, receivers: tuple[Receiver, ...]) -> None:
        self.receivers = receivers
        self._running: list[tuple[Receiver, asyncio.Task[None]]] = []
        self._stopped = False

    def __repr__(self) -> str:
        return f"<fan_in of {len(self.receivers)} receivers{' stopped' if self._stopped else ''}>"

    async def receive(self, handler: Handler) -> None:
        """Run every receiver with ``handler``; the first error stops them all and is raised."""
        if self._stopped:
            return
        loop = asyncio.get_running_loop()
        self._running = [(r, loop.create_task(r.receive(handler))) for r in self.receivers]
        try:
            await run_until_first_error([task for _, task in self._running])
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self._stopped or (current is not None and current.cancelling()):
                raise
            # Only what stop() cancelled (receivers without stop()): a stop, not a cancellation.
        finally:
            self._running = []

    def stop(self, drain_timeout: float | None = None) -> None:
        """Stop every receiver: ``stop(drain_timeout)`` where it has one, else cancel it.

        ``receive()`` returns once all have returned. A stopped fan-in stays so."""
        self._stopped = True
        for receiver, task in self._running:
            stop = getattr(receiver, "stop", None)
            if callable(stop):
                stop(drain_timeout)
            else:
                task.cancel()
        if not self._running:
            for receiver in self.receivers:
                stop = getattr(receiver, "stop", None)
                if callable(stop):
                    stop(drain_timeout)

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopped

    async def __aenter__(self) -> Self:
        for receiver in self.receivers:
            await enter_source(receiver)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for receiver in self.receivers:
            await leave_source(receiver, exc_type, exc, tb)

    async def close(self) -> None:
        """Close every receiver that can be closed."""
        for receiver in self.receivers:
            close = getattr(receiver, "close", None)
            if close is not None:
                await close()


def fan_in(*receivers: Receiver) -> Receiver:
    """One receiver running several; the first error cancels the others and is raised.

    The fan-in has ``stop(drain_timeout)`` (``broker.run`` drains it): receivers with ``stop()``
    are stopped gracefully, the others cancelled."""
    if not receivers:
        raise ValueError("fan_in needs at least one receiver")
    return _FanIn(receivers)
