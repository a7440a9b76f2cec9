"""Delegating wrappers: an instrumented Backend and its iterators and receivers.

Each wrapper does what the object it wraps does and adds the instrumentation of
:class:`~broker.telemetry.core.ConsumerTelemetry` around it; any attribute it does not define
(``backend.log()``, ``receiver.stop()``, an SDK escape hatch) is the wrapped object's. Publishers
are not wrapped: the backend's own :class:`~broker.publishing.DriverPublisher` gets the publish
middleware (:meth:`~broker.publishing.DriverPublisher.wrap_send`) and is returned as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, Self

from broker.backend import Backend, topics_tuple
from broker.capabilities import Capabilities
from broker.errors import BrokerError, ClosedError, Timeout
from broker.interfaces import BatchHandler, Handler, Publisher, TransactionalPublisher
from broker.message import Message, Record
from broker.publishing import DriverPublisher
from broker.telemetry.core import ConsumerTelemetry, Telemetry
from broker.telemetry.health import HealthReport

__all__ = [
    "InstrumentedBackend",
    "TracedBatchIterator",
    "TracedIterator",
    "TracedReceiver",
]


def _given(options: dict[str, Any], **maybe: Any) -> dict[str, Any]:
    """``options`` plus the ``maybe`` arguments the caller gave (the wrapped backend's defaults rule)."""
    return {**options, **{k: v for k, v in maybe.items() if v is not None}}


class _Delegate:
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

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


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


class _TracedPull(_Delegate):
    def __init__(self, wrapped: Any, consumer: ConsumerTelemetry) -> None:
        self.wrapped = wrapped
        self.consumer = consumer
        self._current = _Current(consumer)
        self._iterator: AsyncIterator[Any] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.wrapped!r}>"

    async def _pull(self, pull: Any, *args: Any) -> Any:
        self._current.leave()
        health = self.consumer.health
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
        raise NotImplementedError

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        if self._iterator is None:
            self._iterator = self.wrapped.__aiter__()
        return self._handed(await self._pull(self._iterator.__anext__))

    async def close(self) -> None:
        """End the last process span, then close the wrapped iterator."""
        self._current.leave()
        self.consumer.health.consuming = False
        self.consumer.health.closed = True
        await self.wrapped.close()


class TracedIterator(_TracedPull):
    """A ``MessageIterator`` or ``RecordIterator`` with a process span per message or record."""

    def _handed(self, unit: Any) -> Any:
        self.consumer.health.message()
        if isinstance(unit, Record):
            span = self.consumer.begin_record(unit)
        else:
            span = self.consumer.begin(unit)
        if span is not None:
            self._current.enter(span)
        return unit

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message (see ``MessageIterator``)."""
        message: Message = self._handed(await self._pull(self.wrapped.next_message, timeout))
        return message

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record (see ``RecordIterator``)."""
        record: Record = self._handed(await self._pull(self.wrapped.next_record, timeout))
        return record


class TracedBatchIterator(_TracedPull):
    """A ``BatchedMessageIterator`` or ``BatchedIterator`` with a process span per batch."""

    def _handed(self, unit: Any) -> Any:
        if unit:
            self.consumer.health.message(len(unit))
            span = self.consumer.begin_batch(unit)
            if span is not None:
                self._current.enter(span)
        else:
            self.consumer.health.success()
        return unit

    async def next_batch(self, timeout: float | None = None) -> list[Any]:
        """The next batch (see ``BatchedMessageIterator``)."""
        batch: list[Any] = self._handed(await self._pull(self.wrapped.next_batch, timeout))
        return batch


class TracedReceiver(_Delegate):
    """A ``Receiver`` (and ``BatchedReceiver`` when the wrapped one is) whose handlers are traced."""

    def __init__(self, wrapped: Any, consumer: ConsumerTelemetry) -> None:
        self.wrapped = wrapped
        self.consumer = consumer

    def __repr__(self) -> str:
        return f"<TracedReceiver of {self.wrapped!r}>"

    async def _run(self, coro: Any) -> None:
        health = self.consumer.health
        health.consuming = True
        try:
            await coro
        except BrokerError as exc:
            health.failure(exc)
            raise
        finally:
            health.consuming = False

    async def receive(self, handler: Handler) -> None:
        """Run the wrapped receiver with ``handler`` traced (see ``Receiver.receive``)."""
        await self._run(self.wrapped.receive(self.consumer.wrap_handler(handler)))

    async def receive_batch(self, handler: BatchHandler) -> None:
        """Run the wrapped batched receiver with ``handler`` traced."""
        await self._run(self.wrapped.receive_batch(self.consumer.wrap_batch_handler(handler)))

    async def close(self) -> None:
        """Close the wrapped receiver, where it can be closed."""
        self.consumer.health.closed = True
        close = getattr(self.wrapped, "close", None)
        if close is not None:
            await close()


class InstrumentedBackend:
    """A :class:`~broker.Backend` that traces, counts and keeps the health of what it hands out.

    Made by :func:`broker.telemetry.instrument`; ``wrapped`` is the backend underneath, and any
    attribute not defined here (``log()``, ``admin``, settings) is that backend's.
    """

    def __init__(self, wrapped: Backend, telemetry: Telemetry) -> None:
        self.wrapped = wrapped
        #: The instrumentation (tracer, meters, health) of this backend.
        self.telemetry = telemetry
        self._middleware = telemetry.publish_middleware()

    def __repr__(self) -> str:
        return f"<InstrumentedBackend of {self.wrapped!r}>"

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    @property
    def name(self) -> str:
        """The wrapped backend's name (URL scheme)."""
        return self.wrapped.name

    @property
    def capabilities(self) -> Capabilities:
        """The wrapped backend's capabilities."""
        return self.wrapped.capabilities

    def health(self) -> HealthReport:
        """Liveness, readiness and every open consumer's state (see :mod:`broker.telemetry.health`)."""
        return self.telemetry.health.report()

    def _instrumented(self, publisher: Any) -> Any:
        if isinstance(publisher, DriverPublisher):
            if self._middleware not in publisher.middleware:
                publisher.wrap_send(self._middleware)
            return publisher
        raise TypeError(
            f"{type(publisher).__name__} does not publish through broker.publishing.DriverPublisher; "
            "broker.telemetry cannot instrument it"
        )

    def publisher(self) -> Publisher:
        """The wrapped backend's publisher, with publish spans, context injection and counts."""
        publisher: Publisher = self._instrumented(self.wrapped.publisher())
        return publisher

    def transactional_publisher(self, **options: Any) -> TransactionalPublisher:
        """The wrapped backend's transactional publisher, instrumented like :meth:`publisher`."""
        publisher: TransactionalPublisher = self._instrumented(
            self.wrapped.transactional_publisher(**options)
        )
        return publisher

    def messages(self, topic: str, subscription: str, **options: Any) -> TracedIterator:
        """The wrapped backend's ``messages(...)`` with a process span per message."""
        consumer = self.telemetry.consumer(topic, subscription, "messages")
        return TracedIterator(self.wrapped.messages(topic, subscription, **options), consumer)

    def batched_messages(
        self,
        topic: str,
        subscription: str,
        *,
        batch_size: int | None = None,
        batch_timeout: float | None = None,
        **options: Any,
    ) -> TracedBatchIterator:
        """The wrapped backend's ``batched_messages(...)`` with a process span per batch.

        ``batch_size`` and ``batch_timeout`` default to the wrapped backend's defaults.
        """
        consumer = self.telemetry.consumer(topic, subscription, "batched_messages")
        iterator = self.wrapped.batched_messages(
            topic, subscription, **_given(options, batch_size=batch_size, batch_timeout=batch_timeout)
        )
        return TracedBatchIterator(iterator, consumer)

    def receiver(
        self, topic: str, subscription: str, *, concurrency: int = 1, **options: Any
    ) -> TracedReceiver:
        """The wrapped backend's ``receiver(...)`` with each handler call traced, timed and counted."""
        consumer = self.telemetry.consumer(topic, subscription, "receiver")
        return TracedReceiver(
            self.wrapped.receiver(topic, subscription, concurrency=concurrency, **options), consumer
        )

    def batched_receiver(self, topic: str, subscription: str, **options: Any) -> TracedReceiver:
        """The wrapped backend's ``batched_receiver(...)`` (where it has one), traced per batch."""
        make = getattr(self.wrapped, "batched_receiver", None)
        if make is None:
            raise AttributeError(f"the {self.name} backend has no batched_receiver")
        consumer = self.telemetry.consumer(topic, subscription, "batched_receiver")
        return TracedReceiver(make(topic, subscription, **options), consumer)

    def records(self, topics: str | Sequence[str], group: str, **options: Any) -> TracedIterator:
        """The wrapped backend's ``records(...)`` with a process span per record."""
        consumer = self.telemetry.consumer(",".join(topics_tuple(topics)), group, "records")
        return TracedIterator(self.wrapped.records(topics, group, **options), consumer)

    def batched_records(
        self,
        topics: str | Sequence[str],
        group: str,
        *,
        batch_size: int | None = None,
        batch_timeout: float | None = None,
        **options: Any,
    ) -> TracedBatchIterator:
        """The wrapped backend's ``batched_records(...)`` with a process span per batch."""
        consumer = self.telemetry.consumer(",".join(topics_tuple(topics)), group, "batched_records")
        iterator = self.wrapped.batched_records(
            topics, group, **_given(options, batch_size=batch_size, batch_timeout=batch_timeout)
        )
        return TracedBatchIterator(iterator, consumer)

    async def close(self) -> None:
        """Close the wrapped backend (and everything it handed out)."""
        self.telemetry.health.closed = True
        await self.wrapped.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
