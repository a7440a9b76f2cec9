"""Delegating wrappers: an instrumented Backend and its consumers, thin uses of the tracing stage.

The consumers an :class:`InstrumentedBackend` hands out are two classes for every style:
:class:`TracedIterator` (messages, records and their batches) and :class:`TracedReceiver`
(receivers and batched receivers). Each does what the object it wraps does and runs what it hands
out through the one tracing and metrics stage, :class:`~broker.telemetry.core.ConsumerTelemetry`
(the stage :class:`broker.App` runs in its subscriber pipeline); it has the pulls or receives of
what it wraps and no others, and any attribute it does not define (``backend.log()``,
``receiver.stop()``, an SDK escape hatch) is the wrapped object's. Publishers
are not wrapped: the backend's own :class:`~broker.driver.publishing.DriverPublisher` gets the publish
middleware (:meth:`~broker.driver.publishing.DriverPublisher.wrap_send`) and is returned as it is.

While a consumer is open (an iterator from its first pull until closed, a receiver while it
receives), a :class:`BacklogWatch` of its (destination, subscription) asks the backend for the
backlog (:class:`broker.backend.Backlog`) every ``backlog_interval`` seconds: one poll per
subscription whatever the number of its consumers, in a task of its own (message flow never
waits for it), cancelled when the last consumer of the subscription closes. The figure goes to
the ``polybroker.consumer.backlog`` gauge and to each consumer's health (``backlog``,
``lagging`` above ``lag_threshold``); a failed poll is logged and counted in the health, never
raised. Polling stops for good when the backend answers None (its broker does not say).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Self

from broker.backend import DEFAULT_PING_TIMEOUT, Backend, Provision
from broker.capabilities import Capabilities
from broker.driver.base import topics_tuple
from broker.driver.forwarding import Forwarded
from broker.driver.publishing import DriverPublisher
from broker.driver.resources import AsyncResource, stop_task
from broker.errors import BrokerError, ClosedError, Timeout
from broker.interfaces import BatchHandler, Handler, MiddlewarePublisher, TransactionalPublisher
from broker.message import Message, Record
from broker.telemetry.core import ConsumerTelemetry, Telemetry
from broker.telemetry.health import ConsumerHealth, HealthReport

__all__ = [
    "DEFAULT_BACKLOG_INTERVAL",
    "BacklogWatch",
    "InstrumentedBackend",
    "TracedIterator",
    "TracedReceiver",
]


log = logging.getLogger("broker.telemetry")

#: Seconds between two backlog polls of one subscription, by default.
DEFAULT_BACKLOG_INTERVAL = 15.0
#: The first poll of a subscription comes this many seconds after its first consumer starts
#: (or after ``backlog_interval`` when that is shorter).
_FIRST_POLL = 1.0


async def backlog_of(backend: Any, topic: str, subscription: str) -> int | None:
    """``backend.backlog(topic, subscription)``, or None for a backend without the extra."""
    backlog = getattr(backend, "backlog", None)
    if backlog is None:
        return None
    value: int | None = await backlog(topic, subscription)
    return value


@dataclasses.dataclass(eq=False, repr=False)
class BacklogWatch:
    """Polls the backlog of one (destination, subscription) while consumers of it are open.

    ``destination`` may name several topics, comma-separated (``records()`` of many topics):
    their backlogs are summed (None when any is None). Consumers :meth:`join` when they start
    and :meth:`leave` when they stop; the polling task runs between the first join and the last
    leave. Each poll is bounded by ``interval`` (at least 1 s; a poll that takes longer fails with
    ``Timeout``).
    """

    backend: Any
    destination: str
    subscription: str
    series: Any
    interval: float
    threshold: int | None
    #: The health entries of the consumers being watched.
    consumers: list[ConsumerHealth] = dataclasses.field(default_factory=list, init=False)
    #: False once the backend answered None: the broker does not report a backlog.
    reported: bool = dataclasses.field(default=True, init=False)
    _task: asyncio.Task[None] | None = dataclasses.field(default=None, init=False)
    _failing: bool = dataclasses.field(default=False, init=False)

    def __repr__(self) -> str:
        return f"<BacklogWatch {self.destination}/{self.subscription} consumers={len(self.consumers)}>"

    def join(self, health: ConsumerHealth) -> None:
        """A consumer of the subscription started: poll while it runs (call from the event loop)."""
        if any(h is health for h in self.consumers):
            return
        self.consumers.append(health)
        if self._task is None and self.reported:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"backlog {self.destination}/{self.subscription}"
            )

    async def leave(self, health: ConsumerHealth) -> None:
        """A consumer stopped; the last one to leave stops the polling and withdraws the gauge."""
        self.consumers = [h for h in self.consumers if h is not health]
        if not self.consumers:
            await self.stop()

    async def stop(self) -> None:
        """Stop polling (idempotent) and withdraw the gauge's series."""
        task, self._task = self._task, None
        await stop_task(task)
        self.series.backlog(None)

    async def poll(self) -> int | None:
        """Ask the backend once; the summed backlog of the destination's topics."""
        total = 0
        for topic in self.destination.split(","):
            value = await backlog_of(self.backend, topic, self.subscription)
            if value is None:
                return None
            total += value
        return total

    async def _run(self) -> None:
        await asyncio.sleep(min(self.interval, _FIRST_POLL))
        while True:
            try:
                async with asyncio.timeout(max(self.interval, 1.0)):
                    value = await self.poll()
            except ClosedError:
                return  # the backend is closing
            except Exception as exc:
                self._failed(exc)
            else:
                self._failing = False
                self.series.backlog(value)
                for health in self.consumers:
                    health.observe_backlog(value, self.threshold)
                if value is None:
                    self.reported = False
                    self._task = None
                    return
            await asyncio.sleep(self.interval)

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, TimeoutError) and not isinstance(exc, BrokerError):
            exc = Timeout(f"the backlog poll took longer than {max(self.interval, 1.0)} s")
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        log.log(
            level,
            "polling the backlog of %s/%s failed: %s",
            self.destination,
            self.subscription,
            exc,
        )
        for health in self.consumers:
            health.backlog_failure(exc)


def _given(options: dict[str, Any], **maybe: Any) -> dict[str, Any]:
    """``options`` plus the ``maybe`` arguments the caller gave (the wrapped backend's defaults rule)."""
    return {**options, **{k: v for k, v in maybe.items() if v is not None}}


class _Delegate(AsyncResource):
    """Attribute delegation and the async context manager, shared by the wrappers."""

    wrapped: Any

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    async def close(self) -> None:
        """Close the wrapped object."""
        await self.wrapped.close()

    async def __aenter__(self) -> Self:
        # Entering is what makes a subscription exist on several backends: enter the wrapped one.
        enter = getattr(self.wrapped, "__aenter__", None)
        if enter is not None:
            await enter()
        return self


class _Current:
    """The process span an iterator handed out last: current in the pulling task until the next pull."""

    __slots__ = ("_consumer", "_span", "_task", "_token")

    def __init__(self, consumer: ConsumerTelemetry) -> None:
        self._consumer = consumer
        self._span: Any = None
        self._token: Any = None
        self._task: asyncio.Task[Any] | None = None

    def enter(self, span: Any) -> None:
        self._span = span
        otel = self._consumer.otel
        if otel is not None and span.get_span_context().is_valid:
            self._token = otel.context.attach(otel.trace.set_span_in_context(span))
            self._task = asyncio.current_task()

    def leave(self) -> None:
        span, self._span = self._span, None
        token, self._token = self._token, None
        if token is not None and asyncio.current_task() is self._task:
            otel = self._consumer.otel
            assert otel is not None
            otel.context.detach(token)
        self._task = None
        if span is not None:
            span.end()


#: The pulls of the consumption styles (:class:`TracedIterator` has those of what it wraps).
_PULLS: Final = frozenset({"next_message", "next_record", "next_batch"})


class TracedIterator(_Delegate):
    """An iterator of any style, each message, record or batch it hands out going through the stage.

    It wraps a ``MessageIterator``, ``RecordIterator``, ``BatchedMessageIterator`` or
    ``BatchedIterator`` and has the pulls of what it wraps, no others (``next_message``,
    ``next_record``, ``next_batch``; ``hasattr`` tells them apart as it does for the wrapped one):
    each unit pulled is opened by :meth:`ConsumerTelemetry.open
    <broker.telemetry.core.ConsumerTelemetry.open>` (counted, its acker traced, its process span
    started) and its span is current in the pulling task until the next pull or :meth:`close`.
    """

    if TYPE_CHECKING:  # the pulls exist where the wrapped iterator has them (see __getattr__)

        async def next_message(self, timeout: float | None = None) -> Message:
            """The next message (see ``MessageIterator``)."""

        async def next_record(self, timeout: float | None = None) -> Record:
            """The next record (see ``RecordIterator``)."""

        async def next_batch(self, timeout: float | None = None) -> list[Any]:
            """The next batch (see ``BatchedMessageIterator``, ``BatchedIterator``)."""

    def __init__(self, wrapped: Any, consumer: ConsumerTelemetry, watch: BacklogWatch | None = None) -> None:
        self.wrapped = wrapped
        self.consumer = consumer
        if watch is not None:
            consumer.watch = watch
        self._watching = False
        self._current = _Current(consumer)
        self._iterator: AsyncIterator[Any] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.wrapped!r}>"

    @property
    def watch(self) -> BacklogWatch | None:
        """The backlog watch of this consumer's subscription (None: no backlog polling)."""
        watch: BacklogWatch | None = self.consumer.watch
        return watch

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if name not in _PULLS:
            return found

        async def pull(timeout: float | None = None) -> Any:
            return self._handed(await self._pull(found, timeout))

        pull.__name__ = pull.__qualname__ = name
        self.__dict__[name] = pull  # looked up once per iterator
        return pull

    async def _pull(self, pull: Any, *args: Any) -> Any:
        self._current.leave()
        consumer = self.consumer
        health = consumer.health
        if not self._watching:
            self._watching = True
            consumer.consuming()
        else:
            health.consuming = True
        try:
            return await pull(*args)
        except (Timeout, StopAsyncIteration, ClosedError):
            health.success()
            raise
        except BrokerError as exc:
            health.failure(exc)
            raise

    def _handed(self, unit: Any) -> Any:
        span = self.consumer.open(unit)
        if span is not None:
            self._current.enter(span)
        return unit

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        if self._iterator is None:
            self._iterator = self.wrapped.__aiter__()
        return self._handed(await self._pull(self._iterator.__anext__))

    async def close(self) -> None:
        """End the last process span, then close the wrapped iterator."""
        self._current.leave()
        if self._watching:
            self._watching = False
            await self.consumer.stopped(closed=True)
        else:
            self.consumer.health.consuming = False
            self.consumer.health.closed = True
        await self.wrapped.close()


class TracedReceiver(_Delegate):
    """A receiver whose handlers run through the stage (:meth:`ConsumerTelemetry.stage
    <broker.telemetry.core.ConsumerTelemetry.stage>`): each call in a process span, timed, counted.

    It has the ``receive`` and ``receive_batch`` of what it wraps, no others; with ``batched`` it
    has ``receive_batch`` only, also where the wrapped receiver takes per-message handlers too:
    ``broker.run`` and other callers that look for ``receive`` first then hand it batches.
    ``stop()``, ``stopped`` and the rest are the wrapped receiver's.
    """

    if TYPE_CHECKING:  # they exist where the wrapped receiver has them (see __getattr__)

        async def receive(self, handler: Handler) -> None:
            """Run the wrapped receiver with ``handler`` through the stage (see ``Receiver``)."""

        async def receive_batch(self, handler: BatchHandler) -> None:
            """Run the wrapped batched receiver with ``handler`` through the stage."""

    def __init__(
        self,
        wrapped: Any,
        consumer: ConsumerTelemetry,
        watch: BacklogWatch | None = None,
        *,
        batched: bool = False,
    ) -> None:
        self.wrapped = wrapped
        self.consumer = consumer
        if watch is not None:
            consumer.watch = watch
        #: Only ``receive_batch``: the wrapped receiver's ``receive`` is hidden.
        self.batched = batched

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.wrapped!r}>"

    @property
    def watch(self) -> BacklogWatch | None:
        """The backlog watch of this receiver's subscription (None: no backlog polling)."""
        watch: BacklogWatch | None = self.consumer.watch
        return watch

    def __getattr__(self, name: str) -> Any:
        if name == "receive" and self.batched:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute 'receive' (batched)")
        found = super().__getattr__(name)
        if name not in ("receive", "receive_batch"):
            return found

        async def receive(handler: Any) -> None:
            await self._run(found(self.consumer.stage(handler)))

        receive.__name__ = receive.__qualname__ = name
        return receive

    async def _run(self, coro: Any) -> None:
        consumer = self.consumer
        consumer.consuming()
        try:
            await coro
        except BrokerError as exc:
            consumer.health.failure(exc)
            raise
        finally:
            await consumer.stopped()

    async def close(self) -> None:
        """Close the wrapped receiver, where it can be closed."""
        await self.consumer.stopped(closed=True)
        close = getattr(self.wrapped, "close", None)
        if close is not None:
            await close()


class InstrumentedBackend(AsyncResource):
    """A :class:`~broker.Backend` that traces, counts and keeps the health of what it hands out.

    Made by :func:`broker.telemetry.instrument`; ``wrapped`` is the backend underneath, and any
    attribute not defined here (``log()``, ``admin``, settings) is that backend's.

    ``backlog_interval``: seconds between two backlog polls of a subscription with an open
    consumer (see :class:`BacklogWatch`; 0 or None: no polling, no backlog gauge).
    ``lag_threshold``: a consumer whose backlog is above it is ``lagging`` in :meth:`health`
    (None: never lagging). Both are read when a subscription's first consumer is handed out.
    """

    def __init__(
        self,
        wrapped: Backend,
        telemetry: Telemetry,
        *,
        lag_threshold: int | None = None,
        backlog_interval: float | None = DEFAULT_BACKLOG_INTERVAL,
    ) -> None:
        self.wrapped = wrapped
        #: The instrumentation (tracer, meters, health) of this backend.
        self.telemetry = telemetry
        #: A consumer whose backlog is above this is lagging (None: never).
        self.lag_threshold = lag_threshold
        #: Seconds between backlog polls of one subscription (0 or None: no polling).
        self.backlog_interval = backlog_interval
        self._middleware = telemetry.publish_middleware()
        self._watches: dict[tuple[str, str], BacklogWatch] = {}

    def __repr__(self) -> str:
        return f"<InstrumentedBackend of {self.wrapped!r}>"

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    name: Forwarded[str] = Forwarded("wrapped", "The wrapped backend's name (URL scheme).")
    capabilities: Forwarded[Capabilities] = Forwarded("wrapped", "The wrapped backend's capabilities.")
    provision_modes: Forwarded[tuple[Provision, ...]] = Forwarded(
        "wrapped", "The ``provision`` modes of the wrapped backend."
    )

    def health(self) -> HealthReport:
        """Liveness, readiness and every open consumer's state (see :mod:`broker.telemetry.health`)."""
        return self.telemetry.health.report()

    async def ping(self, timeout: float = DEFAULT_PING_TIMEOUT) -> None:
        """The wrapped backend's :meth:`~broker.Backend.ping`; its outcome is kept for :meth:`health`."""
        try:
            await self.wrapped.ping(timeout)
        except BrokerError as exc:
            self.telemetry.health.pinged(exc)
            raise
        self.telemetry.health.pinged()

    async def check_health(self, timeout: float = DEFAULT_PING_TIMEOUT) -> HealthReport:
        """Ping the broker (``timeout`` seconds at most), then report: what a readiness endpoint serves.

        A broker that does not answer, or refuses the credentials, makes the report not ``ready``
        (``reachable`` False, the error in ``ping_error``); nothing is raised for it. A closed
        backend reports ``live`` False without a ping.
        """
        if not self.telemetry.health.closed:
            with contextlib.suppress(BrokerError):
                await self.ping(timeout)
        return self.health()

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """The wrapped backend's backlog (see :class:`broker.backend.Backlog`; None without it)."""
        return await backlog_of(self.wrapped, topic, subscription)

    def _watch(self, destination: str, subscription: str) -> BacklogWatch | None:
        """The backlog watch of (destination, subscription), made on first use (None: polling off)."""
        if not self.backlog_interval or self.backlog_interval <= 0:
            return None
        key = (destination, subscription)
        watch = self._watches.get(key)
        if watch is None:
            series = self.telemetry.meters.consumer(destination, subscription)
            watch = BacklogWatch(
                self.wrapped, destination, subscription, series, self.backlog_interval, self.lag_threshold
            )
            self._watches[key] = watch
        return watch

    def _instrumented(self, publisher: Any) -> Any:
        if isinstance(publisher, DriverPublisher):
            if self._middleware not in publisher.middleware:
                publisher.wrap_send(self._middleware)
            return publisher
        raise TypeError(
            f"{type(publisher).__name__} does not publish through broker.driver.publishing.DriverPublisher; "
            "broker.telemetry cannot instrument it"
        )

    def publisher(self) -> MiddlewarePublisher:
        """The wrapped backend's publisher, with publish spans, context injection and counts."""
        publisher: MiddlewarePublisher = self._instrumented(self.wrapped.publisher())
        return publisher

    def transactional_publisher(self, **options: Any) -> TransactionalPublisher:
        """The wrapped backend's transactional publisher, instrumented like :meth:`publisher`."""
        publisher: TransactionalPublisher = self._instrumented(
            self.wrapped.transactional_publisher(**options)
        )
        return publisher

    def stage(self, destination: str, subscription: str, kind: str) -> ConsumerTelemetry:
        """The tracing and metrics stage of a consumer of ``destination`` (topics comma-joined) through
        ``subscription`` that the caller runs itself, as :class:`broker.App` does in its subscriber
        pipeline: consume from :attr:`wrapped` and pass each delivery through
        :meth:`~broker.telemetry.core.ConsumerTelemetry.run`; call
        :meth:`~broker.telemetry.core.ConsumerTelemetry.consuming` when it starts and
        :meth:`~broker.telemetry.core.ConsumerTelemetry.stopped` when it stops (health and backlog
        polling). ``kind`` names the consumer in the health report."""
        consumer = self.telemetry.consumer(destination, subscription, kind)
        consumer.watch = self._watch(destination, subscription) if subscription else None
        return consumer

    def messages(self, topic: str, subscription: str, **options: Any) -> TracedIterator:
        """The wrapped backend's ``messages(...)`` with a process span per message."""
        consumer = self.telemetry.consumer(topic, subscription, "messages")
        iterator = self.wrapped.messages(topic, subscription, **options)
        return TracedIterator(iterator, consumer, self._watch(topic, subscription))

    def batched_messages(
        self,
        topic: str,
        subscription: str,
        *,
        batch_size: int | None = None,
        batch_timeout: float | None = None,
        **options: Any,
    ) -> TracedIterator:
        """The wrapped backend's ``batched_messages(...)`` with a process span per batch.

        ``batch_size`` and ``batch_timeout`` default to the wrapped backend's defaults.
        """
        consumer = self.telemetry.consumer(topic, subscription, "batched_messages")
        iterator = self.wrapped.batched_messages(
            topic, subscription, **_given(options, batch_size=batch_size, batch_timeout=batch_timeout)
        )
        watch = self._watch(consumer.destination, consumer.subscription)
        return TracedIterator(iterator, consumer, watch)

    def receiver(
        self, topic: str, subscription: str, *, concurrency: int = 1, **options: Any
    ) -> TracedReceiver:
        """The wrapped backend's ``receiver(...)`` with each handler call traced, timed and counted."""
        consumer = self.telemetry.consumer(topic, subscription, "receiver")
        return TracedReceiver(
            self.wrapped.receiver(topic, subscription, concurrency=concurrency, **options),
            consumer,
            self._watch(topic, subscription),
        )

    def batched_receiver(self, topic: str, subscription: str, **options: Any) -> TracedReceiver:
        """The wrapped backend's ``batched_receiver(...)`` (where it has one), traced per batch."""
        make = getattr(self.wrapped, "batched_receiver", None)
        if make is None:
            raise AttributeError(f"the {self.name} backend has no batched_receiver")
        consumer = self.telemetry.consumer(topic, subscription, "batched_receiver")
        watch = self._watch(topic, subscription)
        return TracedReceiver(make(topic, subscription, **options), consumer, watch, batched=True)

    def records(
        self, topics: str | Sequence[str], group: str | None = None, **options: Any
    ) -> TracedIterator:
        """The wrapped backend's ``records(...)`` with a process span per record."""
        destination = ",".join(topics_tuple(topics))
        consumer = self.telemetry.consumer(destination, group or "", "records")
        iterator = self.wrapped.records(topics, group, **options)
        return TracedIterator(iterator, consumer, self._watch(destination, group) if group else None)

    def batched_records(
        self,
        topics: str | Sequence[str],
        group: str | None = None,
        *,
        batch_size: int | None = None,
        batch_timeout: float | None = None,
        **options: Any,
    ) -> TracedIterator:
        """The wrapped backend's ``batched_records(...)`` with a process span per batch."""
        consumer = self.telemetry.consumer(",".join(topics_tuple(topics)), group or "", "batched_records")
        iterator = self.wrapped.batched_records(
            topics, group, **_given(options, batch_size=batch_size, batch_timeout=batch_timeout)
        )
        watch = self._watch(consumer.destination, consumer.subscription)
        return TracedIterator(iterator, consumer, watch)

    async def close(self) -> None:
        """Stop the backlog polling, then close the wrapped backend (and everything it handed out)."""
        self.telemetry.health.closed = True
        watches = list(self._watches.values())
        self._watches.clear()
        for watch in watches:
            await watch.stop()
        await self.wrapped.close()
