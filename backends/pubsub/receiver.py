"""Streaming-pull consumption: ``Receiver`` and ``BatchedReceiver`` on the SDK's subscriber.

The SDK keeps the stream, flow control (``receive_max_outstanding_*``), lease extension
(``receive_max_extension*``) and per-key ordering. Instead of its thread pool, a scheduler
hands the messages to the event loop, many per wake-up, where at most ``concurrency`` handler
tasks run. Settling is a non-blocking hand-off to the SDK's dispatcher thread.

A handler that raises has its unsettled message(s) nacked and the error logged. When
``receive()`` is cancelled (or the receiver closed), the stream stops handing out messages,
running handlers are cancelled, the SDK shuts the stream down, and then every message taken but
not settled is nacked with unary RPCs (nacking earlier would let the server push the messages
straight back onto the closing stream). So nothing is acked that was not handled and nothing
is lost. A stream failure is raised from ``receive()``.

Emulator quirk: after a streaming pull closes, the emulator keeps part of what it had pushed on
it leased until the stream's ack deadline, nacked or not (the SDK's own receiver shows the same).
That deadline is ``receive_max_extension_period`` (clamped to 10..600 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from google.cloud.pubsub_v1 import types as sdk_types  # type: ignore[import-untyped]
from google.cloud.pubsub_v1.subscriber.scheduler import Scheduler  # type: ignore[import-untyped]

from broker import Backoff, BatchHandler, FailureCounter, Handler, Message
from broker.backends.pubsub.admin import SubscriptionInfo
from broker.backends.pubsub.clients import Clients
from broker.backends.pubsub.consuming import SubscriptionConsumer, SubscriptionTarget
from broker.backends.pubsub.deadletter import forward_dead_letter
from broker.backends.pubsub.errors import translate
from broker.backends.pubsub.futures import post
from broker.backends.pubsub.mapping import from_streamed
from broker.backends.pubsub.pull import PullSettler, nack_seconds
from broker.backends.pubsub.settings import MAX_ACK_DEADLINE, MIN_ACK_DEADLINE
from broker.driver.batch_limits import check_batch_limits
from broker.driver.receiving import DEFAULT_BACKOFF, DEFAULT_DRAIN_TIMEOUT, NackDelay
from broker.driver.settling import UnsettledWarnings
from broker.errors import ReceiveError
from broker.retry import Retrier

__all__ = ["LoopScheduler", "PubsubReceiver", "StreamSettler"]

log = logging.getLogger("broker.backends.pubsub")


class LoopScheduler(Scheduler):  # type: ignore[misc]
    """An SDK ``Scheduler`` that hands messages to an asyncio loop instead of a thread pool.

    ``schedule()`` (called on SDK threads, one message each) appends to a list and wakes the
    loop once for everything appended until the loop runs ``deliver``. After :meth:`detach`,
    messages stay here and ``shutdown()`` returns them to the SDK, which nacks them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[list[Any]], None]) -> None:
        self._loop = loop
        self._deliver = deliver
        self._requests: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._pending: list[Any] = []
        self._posted = False
        self._attached = True

    @property
    def queue(self) -> queue.Queue[Any]:
        """The queue the SDK's dispatcher reads acks, nacks and lease changes from."""
        return self._requests

    def schedule(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue one message (the first argument) for the event loop."""
        with self._lock:
            self._pending.append(args[0])
            if self._posted or not self._attached:
                return
            self._posted = True
        post(self._loop, self._drain)

    def _drain(self) -> None:
        with self._lock:
            self._posted = False
            if not self._attached:
                return
            batch, self._pending = self._pending, []
        if batch:
            self._deliver(batch)

    def detach(self) -> None:
        """Deliver nothing more to the loop (what arrives stays for ``shutdown``)."""
        with self._lock:
            self._attached = False

    def shutdown(self, await_msg_callbacks: bool = False) -> list[Any]:
        """Called by the SDK's shutdown: nothing for it to nack (see :meth:`leftovers`)."""
        with self._lock:
            self._attached = False
        return []

    def leftovers(self) -> list[Any]:
        """The messages never handed to the loop (the receiver nacks them after the shutdown)."""
        with self._lock:
            self._attached = False
            dropped, self._pending = self._pending, []
        return dropped


class StreamSettler:
    """The :class:`~broker.message.Acker` of streamed messages: hand-offs to the SDK's dispatcher.

    ``Message.raw`` is the SDK's ``subscriber.message.Message``. A delayed nack sets the
    message's deadline to the delay and takes it out of lease management. Once the stream has
    shut down (its dispatcher is gone), settling goes through unary RPCs instead, so a message
    settled after ``receive()`` returned is not silently dropped.
    """

    def __init__(self, clients: Clients, info: SubscriptionInfo, rpc_timeout: float) -> None:
        self._clients = clients
        self._info = info
        self._rpc_timeout = rpc_timeout
        self._lease = min(MAX_ACK_DEADLINE, max(MIN_ACK_DEADLINE, info.ack_deadline))
        self._direct: PullSettler | None = None

    def detach(self) -> PullSettler:
        """Settle through unary RPCs from now on (the stream's dispatcher stopped); that settler."""
        if self._direct is None:
            info = self._info
            self._direct = PullSettler(self._clients, lambda: info, lambda: self._lease, self._rpc_timeout)
        return self._direct

    async def ack(self, message: Message) -> None:
        """Acknowledge (sent by the SDK's dispatcher thread, batched with others)."""
        if self._direct is not None:
            await self._direct.ack(message)
        else:
            message.raw.ack()

    async def nack(self, message: Message, delay: float | None) -> None:
        """Redeliver now, or after ``delay`` seconds (rounded up, at most 600)."""
        if self._direct is not None:
            await self._direct.nack(message, delay)
            return
        seconds = nack_seconds(delay)
        if seconds == 0:
            message.raw.nack()
        else:
            message.raw.modify_ack_deadline(seconds)
            message.raw.drop()  # else lease management would extend it again

    async def in_progress(self, message: Message) -> None:
        """Extend the deadline now (the SDK also keeps extending leases while a message is held)."""
        if self._direct is not None:
            await self._direct.in_progress(message)
        else:
            message.raw.modify_ack_deadline(self._lease)

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Forward to the dead-letter topic (if the subscription has one) and ack."""
        await forward_dead_letter(self._clients, self._info, message, reason, self._rpc_timeout)
        await self.ack(message)


class _Run:
    """One ``receive()``: the messages handed over by the scheduler and the handler tasks."""

    def __init__(
        self,
        handler: Callable[[Any], Awaitable[None]],
        settler: StreamSettler,
        concurrency: int,
        batch_size: int | None,
        batch_timeout: float,
        nack_delay: NackDelay = DEFAULT_BACKOFF,
        retrier: Retrier | None = None,
    ) -> None:
        self._handler = handler
        self._unsettled = UnsettledWarnings(handler)
        self._retrier = retrier
        self._settler = settler
        self._nack_delay = nack_delay
        self._failures = FailureCounter()
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._batch_timeout = batch_timeout
        self._loop = asyncio.get_running_loop()
        self._ready: deque[Any] = deque()
        self._workers: set[asyncio.Task[None]] = set()
        self._held: dict[asyncio.Task[None], list[Message]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._partial = False
        self._stopping = False

    def deliver(self, batch: list[Any]) -> None:
        """Take SDK messages from the scheduler (on the loop)."""
        self._ready.extend(batch)  # after halt(), release() nacks them
        if self._stopping:
            return
        self._spawn()

    def _can_take(self) -> bool:
        size = self._batch_size
        if size is None:
            return bool(self._ready)
        return len(self._ready) >= size or (self._partial and bool(self._ready))

    def _spawn(self) -> None:
        while len(self._workers) < self._concurrency and self._can_take():
            task = self._loop.create_task(self._work())
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)
        if (
            self._batch_size is not None
            and self._ready
            and self._timer is None
            and not self._partial
            and not self._can_take()
        ):
            self._timer = self._loop.call_later(self._batch_timeout, self._flush_partial)

    def _flush_partial(self) -> None:
        self._timer = None
        self._partial = True
        self._spawn()

    async def _checked(self, unit: Any) -> None:
        """The handler, then the warning about what it returned from unsettled."""
        await self._handler(unit)
        self._unsettled.check(unit)

    def _retry_delay(self, message: Message) -> float | None:
        """The nack delay for a message whose handler failed (a backoff by attempt by default)."""
        delay = self._nack_delay
        if isinstance(delay, Backoff):
            return delay.delay(self._failures.attempt(message))
        return delay

    def _next_unit(self) -> list[Message]:
        settler = self._settler
        ready = self._ready
        count = 1 if self._batch_size is None else min(self._batch_size, len(ready))
        self._partial = False
        return [from_streamed(ready.popleft(), settler) for _ in range(count)]

    async def _work(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        single = self._batch_size is None
        while not self._stopping and self._can_take():
            unit = self._next_unit()
            self._held[task] = unit
            retrier = self._retrier
            if retrier is not None:
                if single:
                    await retrier.handle(unit[0], self._checked)
                else:
                    await retrier.handle_batch(unit, self._checked)
                del self._held[task]
                await retrier.wait_if_paused()
                continue
            try:
                await self._handler(unit[0] if single else unit)
            except Exception:
                log.exception("message handler failed; nacking its unsettled messages")
                for message in unit:
                    if not message.settled:
                        with contextlib.suppress(Exception):
                            await message.nack(self._retry_delay(message))
            else:
                self._unsettled.check(unit)
            del self._held[task]
        if not self._stopping and self._ready:
            self._loop.call_soon(self._spawn)

    async def halt(self, drain: bool = False, drain_timeout: float | None = None) -> None:
        """Take no more messages; with ``drain``, running handlers get ``drain_timeout`` seconds
        (None: as long as they take) to finish; the rest are cancelled (their messages stay
        unsettled for :meth:`release`)."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        workers = list(self._workers)
        if workers and drain:
            await asyncio.wait(workers, timeout=drain_timeout)
        workers = [task for task in workers if not task.done()]
        for task in workers:
            task.cancel()
        if workers:
            await asyncio.wait(workers)

    async def release(self, undelivered: list[Any]) -> None:
        """Nack every message taken and not settled, with unary RPCs (the stream is closed by now)."""
        direct = self._settler.detach()
        leftovers = [m for unit in self._held.values() for m in unit if not m.settled]
        self._held.clear()
        ready, self._ready = [*self._ready, *undelivered], deque()
        results = await asyncio.gather(
            *(m.nack() for m in leftovers),
            *(direct.nack_id(sdk.ack_id) for sdk in ready),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            log.warning("could not nack %d messages on shutdown: %r", len(failures), failures[0])


class PubsubReceiver(SubscriptionConsumer):
    """A Receiver and BatchedReceiver on a Pub/Sub subscription (streaming pull)."""

    _kind = "receiver"

    def __init__(
        self,
        target: SubscriptionTarget,
        concurrency: int,
        *,
        batch_size: int = 100,
        batch_timeout: float = 1.0,
        nack_delay: NackDelay = DEFAULT_BACKOFF,
        retrier: Retrier | None = None,
        drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        check_batch_limits(batch_size)
        super().__init__(target)
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.nack_delay = nack_delay
        #: The bound retry policy (None: ``nack_delay`` rules).
        self.retrier = retrier
        #: How long :meth:`stop` lets running handlers finish before they are cancelled.
        self.drain_timeout = drain_timeout
        self._draining = False
        self._stop: asyncio.Event | None = None
        self._idle = asyncio.Event()
        self._running = 0

    async def open(self) -> SubscriptionInfo:
        """Look up (or create) the subscription; done on entering, or by ``receive()``."""
        self._check_open()
        return await self._ensure_subscription()

    def __repr__(self) -> str:
        return f"<PubsubReceiver {self.topic}/{self.subscription} concurrency={self.concurrency}>"

    def _flow_control(self) -> Any:
        settings = self._settings
        return sdk_types.FlowControl(
            max_bytes=settings.receive_max_outstanding_bytes,
            max_messages=settings.receive_max_outstanding_messages,
            max_lease_duration=settings.receive_max_extension,
            # the SDK sends it as the stream's (integer) ack deadline
            max_duration_per_lease_extension=math.ceil(settings.receive_max_extension_period),
        )

    def stop(self, drain_timeout: float | None = None) -> None:
        """Stop taking messages; running handlers get ``drain_timeout`` seconds (default: the
        receiver's), then ``receive()`` nacks what is left and returns (``broker.run`` calls this)."""
        if drain_timeout is not None:
            self.drain_timeout = drain_timeout
        self._draining = True
        if self._stop is None:
            self._stop = asyncio.Event()
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` or :meth:`close` was called."""
        return self._stop is not None and self._stop.is_set()

    async def receive(self, handler: Handler) -> None:
        """Call ``handler`` for every message, ``concurrency`` at a time, until cancelled or closed."""
        await self._run(handler, None)

    async def receive_batch(self, handler: BatchHandler) -> None:
        """Call ``handler`` with batches of up to ``batch_size`` (a partial one after ``batch_timeout``)."""
        await self._run(handler, self.batch_size)

    async def _run(self, handler: Callable[[Any], Awaitable[None]], batch_size: int | None) -> None:
        self._check_open()
        loop = asyncio.get_running_loop()
        if self._stop is None:
            self._stop = asyncio.Event()
        stop = self._stop
        info = await self.open()
        run = _Run(
            handler,
            StreamSettler(self._clients, info, self._settings.rpc_timeout),
            self.concurrency,
            batch_size,
            self.batch_timeout,
            self.nack_delay,
            self.retrier,
        )
        scheduler = LoopScheduler(loop, run.deliver)
        ended: asyncio.Future[BaseException | None] = loop.create_future()

        def finish(error: BaseException | None) -> None:
            if not ended.done():
                ended.set_result(error)

        def on_end(future: Any) -> None:  # on an SDK thread
            post(loop, finish, future.exception() if not future.cancelled() else None)

        try:
            streaming = self._clients.subscriber().subscribe(
                info.path,
                callback=_never_called,
                flow_control=self._flow_control(),
                scheduler=scheduler,
                await_callbacks_on_shutdown=False,
            )
        except Exception as exc:
            raise translate(exc, f"subscribing to {info.path}", ReceiveError) from exc
        streaming.add_done_callback(on_end)
        self._running += 1
        self._idle.clear()
        try:
            stopped = asyncio.ensure_future(stop.wait())
            waits: set[asyncio.Future[Any]] = {stopped, ended}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
            if ended.done() and ended.result() is not None:
                error = ended.result()
                assert error is not None
                raise translate(error, f"receiving from {info.path}", ReceiveError) from error
        finally:
            scheduler.detach()
            # The shutdown (drain, stream close, nacks of what was held) runs to its end even when
            # this receive() is cancelled meanwhile; the receiver counts as running until then, so
            # close() waits for those nacks before the backend closes the clients they go through.
            shutdown = asyncio.ensure_future(self._shutdown(run, scheduler, streaming, ended))
            shutdown.add_done_callback(self._shutdown_done)
            await asyncio.shield(shutdown)

    def _shutdown_done(self, shutdown: asyncio.Future[None]) -> None:
        if not shutdown.cancelled() and shutdown.exception() is not None:
            log.warning(
                "shutting the streaming pull of %s down failed: %r", self.subscription, shutdown.exception()
            )
        self._running -= 1
        if not self._running:
            self._idle.set()

    async def _shutdown(
        self,
        run: _Run,
        scheduler: LoopScheduler,
        streaming: Any,
        ended: asyncio.Future[BaseException | None],
    ) -> None:
        await run.halt(self._draining, self.drain_timeout)
        streaming.cancel()  # the SDK shuts down on a thread of its own (nacking what it still held)
        try:
            await asyncio.wait_for(asyncio.shield(ended), self._settings.close_timeout)
        except TimeoutError:
            log.warning(
                "the streaming pull of %s did not stop within %ss",
                self.subscription,
                self._settings.close_timeout,
            )
        await run.release(scheduler.leftovers())

    async def close(self) -> None:
        """Stop every running ``receive()`` (it returns after nacking what it held). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._stop is not None:
            self._stop.set()
        if self._running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), self._settings.close_timeout)


def _never_called(message: Any) -> None:  # pragma: no cover - LoopScheduler never calls callbacks
    raise AssertionError("the LoopScheduler hands messages to the event loop, not to this callback")
