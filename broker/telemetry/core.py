"""The instrumentation itself: spans, context propagation and metrics around publish, receive and settle.

:class:`Telemetry` holds what one instrumented backend needs (tracer, propagator, meters, health);
:class:`ConsumerTelemetry` is the tracing and metrics stage of one consumer, the one place that does
the per-delivery work: extract the trace context from the attributes of a message, a record or each
message of a batch, start the process span, count, put a :class:`TracedAcker` (or
:class:`TracedCommitter` for records) in front of the backend's acker so that settling ends in a
settle span and a count, time the processing and end the span with its settle outcome
(:meth:`ConsumerTelemetry.run`, :meth:`ConsumerTelemetry.stage`). The subscribers of a
:class:`broker.App` run through it as a stage of their pipeline; the consumers of an instrumented
backend (:mod:`broker.telemetry.wrappers`) are thin uses of it. Spans follow the OpenTelemetry
semantic conventions for messaging, version :data:`SEMCONV_VERSION` (status "Development"; see
``docs/observability.md``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from broker.driver.publishing import Send, SendMiddleware
from broker.errors import NotSupported
from broker.interfaces import BatchHandler, Handler
from broker.message import Message, OutboundMessage, Record, acks_in_bulk, can_dead_letter
from broker.telemetry._deps import Otel
from broker.telemetry.health import ConsumerHealth, HealthState
from broker.telemetry.metrics import ConsumerSeries, Meters

__all__ = [
    "SEMCONV_VERSION",
    "SYSTEMS",
    "ConsumerTelemetry",
    "Telemetry",
    "TracedAcker",
    "TracedCommitter",
]

#: The version of the OpenTelemetry semantic conventions for messaging the spans follow.
SEMCONV_VERSION: Final = "1.37.0"
#: The schema URL of :data:`SEMCONV_VERSION`, set on the tracer and the meter.
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

#: Backend name (URL scheme) -> ``messaging.system`` (the semantic conventions' value where it
#: names one, else the scheme). A backend whose publishes go to another service than its consumers
#: read from names that service's value in its ``messaging_publish_system`` attribute (SQS in SNS
#: mode: ``aws.sns``); publish spans and series carry it.
SYSTEMS: Final[Mapping[str, str]] = {
    "kafka": "kafka",
    "nats": "nats",
    "pubsub": "gcp_pubsub",
    "pulsar": "pulsar",
    "servicebus": "servicebus",
    "rabbitmq": "rabbitmq",
    "sqs": "aws_sqs",
    "inmem": "inmem",
}

#: Settle operation -> the counter it increments.
_SETTLE_COUNTER: Final = {"ack": "acked", "nack": "nacked", "dead_letter": "dead_lettered"}
#: Process spans kept for the settle spans that follow them (oldest dropped beyond this).
_PENDING_LIMIT: Final = 10_000
#: ``Message.state`` -> the ``polybroker.settle.outcome`` of its process span (the settle operation).
_OUTCOMES: Final = {"acked": "ack", "nacked": "nack", "dead-lettered": "dead_letter"}

D = TypeVar("D")
R = TypeVar("R")


def _fail(otel: Otel, span: Any, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR, str(exc) or type(exc).__name__))


class Telemetry:
    """Tracing, metrics and health of one instrumented backend."""

    def __init__(
        self,
        backend_name: str,
        otel: Otel | None,
        tracer: Any,
        propagator: Any,
        meters: Meters,
        health: HealthState,
        settle_spans: bool = True,
        publish_system: str | None = None,
    ) -> None:
        #: Whether ack, nack and dead_letter get spans of their own (they are counted either way).
        self.settle_spans = settle_spans
        self.system = SYSTEMS.get(backend_name, backend_name)
        #: The ``messaging.system`` of publish spans (the service publishes go to).
        self.publish_system = publish_system or self.system
        self.otel = otel
        #: None when tracing is off.
        self.tracer = tracer
        self.meters = meters
        self.health = health
        if otel is not None:
            self.inject: Callable[..., None] = propagator.inject if propagator else otel.propagate.inject
            self.extract: Callable[..., Any] = propagator.extract if propagator else otel.propagate.extract

    # -- publishing ----------------------------------------------------------------------
    def publish_middleware(self) -> SendMiddleware:
        """The send middleware that opens the publish span, injects its context and counts."""
        tracer, otel, meters, system = self.tracer, self.otel, self.meters, self.publish_system

        async def traced_send(topic: str, messages: Sequence[OutboundMessage], send: Send) -> None:
            series = meters.publish(topic)
            count = len(messages)
            if tracer is None or otel is None:
                try:
                    await send(messages)
                except BaseException:
                    series.published(count, False)
                    raise
                series.published(count, True)
                return
            attributes: dict[str, Any] = {
                "messaging.system": system,
                "messaging.destination.name": topic,
                "messaging.operation.type": "send",
                "messaging.operation.name": "publish",
            }
            if count > 1:
                attributes["messaging.batch.message_count"] = count
            elif messages[0].data is not None:
                attributes["messaging.message.body.size"] = len(messages[0].data)
            span = tracer.start_span(
                f"publish {topic}", kind=otel.trace.SpanKind.PRODUCER, attributes=attributes
            )
            try:
                carrier: dict[str, str] = {}
                if span.get_span_context().is_valid:  # the no-op API's span has nothing to pass on
                    self.inject(carrier, context=otel.trace.set_span_in_context(span))
                if carrier:
                    messages = [
                        OutboundMessage(
                            m.data, m.key, {**m.attributes, **carrier} if m.attributes else carrier
                        )
                        for m in messages
                    ]
                await send(messages)
            except BaseException as exc:
                series.published(count, False)
                _fail(otel, span, exc)
                raise
            finally:
                span.end()
            series.published(count, True)

        return traced_send

    def consumer(self, destination: str, subscription: str, kind: str) -> ConsumerTelemetry:
        """The instrumentation of one consumer of ``destination`` through ``subscription``."""
        return ConsumerTelemetry(self, destination, subscription, kind)


class TracedAcker:
    """Stands in front of a backend's :class:`~broker.driver.Acker`: settling also ends in a span and a count.

    Every attribute it does not define is the wrapped acker's (``wrapped``). ``dead_letter``
    raises :class:`~broker.errors.NotSupported` where the wrapped acker cannot dead-letter; an
    acker with a bulk path is wrapped in :class:`TracedBulkAcker` (see :meth:`wrapping`).
    """

    __slots__ = ("_consumer", "wrapped")

    def __init__(self, wrapped: Any, consumer: ConsumerTelemetry) -> None:
        self.wrapped = wrapped
        self._consumer = consumer

    @staticmethod
    def wrapping(wrapped: Any, consumer: ConsumerTelemetry) -> TracedAcker:
        """The traced acker for ``wrapped``: a :class:`TracedBulkAcker` when it acks in bulk."""
        if acks_in_bulk(wrapped):
            return TracedBulkAcker(wrapped, consumer)
        return TracedAcker(wrapped, consumer)

    async def ack(self, message: Message) -> None:
        """Ack through the wrapped acker."""
        await self._consumer.settle("ack", message, self.wrapped.ack)

    async def nack(self, message: Message, delay: float | None) -> None:
        """Nack through the wrapped acker."""
        await self._consumer.settle("nack", message, self.wrapped.nack, delay)

    async def in_progress(self, message: Message) -> None:
        """Extend the deadline through the wrapped acker."""
        await self.wrapped.in_progress(message)

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Dead-letter through the wrapped acker (``NotSupported`` where it cannot)."""
        wrapped = self.wrapped
        if not can_dead_letter(wrapped):
            raise NotSupported(f"{type(wrapped).__name__} cannot dead-letter messages")
        await self._consumer.settle("dead_letter", message, wrapped.dead_letter, reason)

    def __getattr__(self, name: str) -> Any:
        # ack_many is TracedBulkAcker's alone: whether a class acks in bulk is a fact of the class
        if name in TracedAcker.__slots__ or name == "ack_many":
            raise AttributeError(name)
        return getattr(self.wrapped, name)


class TracedBulkAcker(TracedAcker):
    """A :class:`TracedAcker` of a :class:`~broker.message.BulkAcker`: ``ack_many`` is counted too."""

    __slots__ = ()

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Ack this acker's pending messages among ``messages`` in bulk; return the others."""
        mine = [m for m in messages if m.acker is self]
        if not mine:
            return list(messages)
        others = [m for m in messages if m.acker is not self]
        pending = [m for m in mine if not m.settled]
        wrapped = self.wrapped
        for message in mine:  # the backend's bulk path recognises its messages by their acker
            message.acker = wrapped
        try:
            rest = await self._consumer.settle_bulk(len(pending), wrapped.ack_many, mine)
        finally:
            for message in mine:
                message.acker = self
        left = {id(m) for m in rest}
        self._consumer.settled_many([m for m in pending if id(m) not in left and m.state == "acked"])
        return others + [m for m in mine if id(m) in left]


class TracedCommitter:
    """Stands in front of a backend's :class:`~broker.driver.Committer`: a commit is also a span and a
    count."""

    __slots__ = ("_consumer", "wrapped")

    def __init__(self, wrapped: Any, consumer: ConsumerTelemetry) -> None:
        self.wrapped = wrapped
        self._consumer = consumer

    async def commit(self, record: Record) -> None:
        """Commit through the wrapped committer."""
        await self._consumer.settle_record(record, self.wrapped.commit)

    def __getattr__(self, name: str) -> Any:
        if name in TracedCommitter.__slots__:
            raise AttributeError(name)
        return getattr(self.wrapped, name)


class ConsumerTelemetry:
    """The per-message instrumentation of one consumer (iterator or receiver)."""

    def __init__(self, telemetry: Telemetry, destination: str, subscription: str, kind: str) -> None:
        self.telemetry = telemetry
        self.otel = telemetry.otel
        self.tracer = telemetry.tracer
        self.destination = destination
        self.subscription = subscription
        self.health: ConsumerHealth = telemetry.health.consumer(
            telemetry.system, destination, subscription, kind
        )
        self.series: ConsumerSeries = telemetry.meters.consumer(destination, subscription)
        self._series: dict[str, ConsumerSeries] = {destination: self.series}
        self._ackers: dict[int, TracedAcker] = {}
        self._committers: dict[int, TracedCommitter] = {}
        self._pending: dict[int, Any] = {}  # id(message or record) -> its recording process span
        self._base: dict[str, dict[str, Any]] = {}
        #: The backlog watch of the consumer's subscription
        #: (:class:`~broker.telemetry.wrappers.BacklogWatch`; None: no backlog polling).
        self.watch: Any = None

    # -- the consumer's lifetime ---------------------------------------------------------
    def consuming(self) -> None:
        """The consumer runs (a receiver receives, an iterator was pulled): mark its health consuming
        and poll its subscription's backlog (idempotent)."""
        self.health.consuming = True
        if self.watch is not None:
            self.watch.join(self.health)

    async def stopped(self, *, closed: bool = False) -> None:
        """The consumer stopped (``closed``: for good): its health says so; the backlog polling of its
        subscription stops when it was the last consumer of it."""
        self.health.consuming = False
        if closed:
            self.health.closed = True
        if self.watch is not None:
            await self.watch.leave(self.health)

    def series_of(self, destination: str) -> ConsumerSeries:
        """The metric series of ``destination`` (records of several topics)."""
        series = self._series.get(destination)
        if series is None:
            series = self._series[destination] = self.telemetry.meters.consumer(
                destination, self.subscription
            )
        return series

    def _attributes(self, destination: str, operation: str) -> dict[str, Any]:
        key = f"{operation}\0{destination}"
        base = self._base.get(key)
        if base is None:
            base = self._base[key] = {
                "messaging.system": self.telemetry.system,
                "messaging.destination.name": destination,
                "messaging.operation.type": "settle" if operation in _SETTLE_COUNTER else operation,
                "messaging.operation.name": operation,
                "messaging.consumer.group.name": self.subscription,
                "messaging.destination.subscription.name": self.subscription,
            }
        return base

    def _keep(self, key: int, span: Any) -> None:
        if not self.telemetry.settle_spans:
            return
        pending = self._pending
        pending[key] = span
        if len(pending) > _PENDING_LIMIT:
            del pending[next(iter(pending))]

    # -- receiving -----------------------------------------------------------------------
    def _adopt(self, message: Message) -> bool:
        """Count a newly received message and put our acker in front; False if already ours."""
        acker = message.acker
        if isinstance(acker, TracedAcker) and acker._consumer is self:
            return False
        traced = self._ackers.get(id(acker))
        if traced is None or traced.wrapped is not acker:
            traced = self._ackers[id(acker)] = TracedAcker.wrapping(acker, self)
        message.acker = traced
        series = self.series
        series.add("received", 1)
        series.add("in_flight", 1)
        attempt = message.delivery_attempt
        if attempt is not None and attempt > 1:
            series.add("redelivered", 1)
        return True

    def _process_span(self, topic: str, attributes: Mapping[str, str]) -> Any:
        """A CONSUMER span continuing the trace carried in ``attributes`` (None: no tracing)."""
        tracer = self.tracer
        if tracer is None:
            return None
        otel = self.otel
        assert otel is not None
        parent = self.telemetry.extract(attributes) if attributes else None
        return tracer.start_span(
            f"process {topic}",
            context=parent,
            kind=otel.trace.SpanKind.CONSUMER,
            attributes=self._attributes(topic, "process"),
        )

    def begin(self, message: Message) -> Any:
        """A message was received: count it, wrap its acker, start its process span (None: no tracing)."""
        self._adopt(message)
        return self._begin_span(message, self.destination, self._message_attributes)

    def begin_record(self, record: Record) -> Any:
        """A record was read: count it, wrap its committer, start its process span."""
        self._adopt_record(record)
        return self._begin_span(record, record.topic, self._record_attributes)

    def _begin_span(self, received: Any, topic: str, annotate: Callable[[Any, Any], None]) -> Any:
        """The process span of ``received`` (None: no tracing), ``annotate``-d and kept while recording."""
        span = self._process_span(topic, received.attributes)
        if span is not None and span.is_recording():
            annotate(span, received)
            self._keep(id(received), span)
        return span

    @staticmethod
    def _message_attributes(span: Any, message: Message) -> None:
        span.set_attribute("messaging.message.id", message.id)
        span.set_attribute("messaging.message.body.size", len(message.data))
        if message.delivery_attempt is not None:
            span.set_attribute("polybroker.message.delivery_attempt", message.delivery_attempt)

    def _adopt_record(self, record: Record) -> None:
        """Count a record once and route its acks through this consumer's traced committer."""
        committer = record.committer
        if not (isinstance(committer, TracedCommitter) and committer._consumer is self):
            traced = self._committers.get(id(committer))
            if traced is None or traced.wrapped is not committer:
                traced = self._committers[id(committer)] = TracedCommitter(committer, self)
            record.committer = traced
            self.series_of(record.topic).add("received", 1)

    def _record_attributes(self, span: Any, record: Record) -> None:
        span.set_attribute("messaging.destination.partition.id", str(record.partition))
        span.set_attribute("polybroker.record.offset", record.offset)
        if self.telemetry.system == "kafka":
            span.set_attribute("messaging.kafka.offset", record.offset)
        if record.value is not None:
            span.set_attribute("messaging.message.body.size", len(record.value))

    def begin_batch(self, items: Sequence[Message] | Sequence[Record]) -> Any:
        """A batch was received: count and wrap each, start one process span linked to their contexts."""
        links: list[Any] = []
        tracer = self.tracer
        otel = self.otel
        extract = self.telemetry.extract if tracer is not None else None
        destination = self.destination
        for item in items:
            if isinstance(item, Message):
                self._adopt(item)
            else:
                destination = item.topic
                self._adopt_record(item)
            if extract is not None and item.attributes:
                assert otel is not None
                context = otel.trace.get_current_span(extract(item.attributes)).get_span_context()
                if context.is_valid:
                    links.append(otel.trace.Link(context))
        if tracer is None:
            return None
        assert otel is not None
        attributes = dict(self._attributes(destination, "process"))
        attributes["messaging.batch.message_count"] = len(items)
        span = tracer.start_span(
            f"process {destination}", kind=otel.trace.SpanKind.CONSUMER, attributes=attributes, links=links
        )
        if span.is_recording():
            for item in items:
                self._keep(id(item), span)
        return span

    def end(self, span: Any, exc: BaseException | None = None) -> None:
        """End a process span (recording ``exc`` when the processing failed)."""
        if exc is not None and self.otel is not None:
            _fail(self.otel, span, exc)
        span.end()

    # -- settling ------------------------------------------------------------------------
    def _settle_span(self, operation: str, destination: str, parent: Any) -> Any:
        otel = self.otel
        assert otel is not None and self.tracer is not None
        return self.tracer.start_span(
            f"{operation} {destination}",
            context=otel.trace.set_span_in_context(parent),
            kind=otel.trace.SpanKind.CLIENT,
            attributes=self._attributes(destination, operation),
        )

    async def settle(
        self, operation: str, message: Message, call: Callable[..., Awaitable[None]], *args: Any
    ) -> None:
        """Run the backend's ``call`` for ``operation`` (ack, nack, dead_letter) in a span; count it."""
        parent = self._pending.get(id(message)) if self._pending else None
        if parent is None:
            await call(message, *args)
        else:
            span = self._settle_span(operation, self.destination, parent)
            try:
                await call(message, *args)
            except BaseException as exc:
                _fail(self.otel, span, exc)  # type: ignore[arg-type]
                raise
            finally:
                span.end()
            self._pending.pop(id(message), None)
        series = self.series
        series.add(_SETTLE_COUNTER[operation], 1)
        series.add("in_flight", -1)

    async def settle_bulk(
        self,
        count: int,
        bulk: Callable[[Sequence[Message]], Awaitable[list[Message]]],
        messages: list[Message],
    ) -> list[Message]:
        """Run a backend's bulk ack in one span (when any of ``messages`` has a recording span)."""
        pending = self._pending
        parent = next((pending[id(m)] for m in messages if id(m) in pending), None) if pending else None
        if parent is None:
            return await bulk(messages)
        span = self._settle_span("ack", self.destination, parent)
        span.set_attribute("messaging.batch.message_count", count)
        try:
            return await bulk(messages)
        except BaseException as exc:
            _fail(self.otel, span, exc)  # type: ignore[arg-type]
            raise
        finally:
            span.end()

    def settled_many(self, messages: list[Message]) -> None:
        """Count messages a bulk ack settled."""
        if messages:
            for message in messages:
                self._pending.pop(id(message), None)
            self.series.add("acked", len(messages))
            self.series.add("in_flight", -len(messages))

    async def settle_record(self, record: Record, call: Callable[[Record], Awaitable[None]]) -> None:
        """Commit ``record`` through the backend in an ``ack`` span; count it."""
        parent = self._pending.pop(id(record), None) if self._pending else None
        if parent is None:
            await call(record)
        else:
            span = self._settle_span("ack", record.topic, parent)
            span.set_attribute("messaging.destination.partition.id", str(record.partition))
            try:
                await call(record)
            except BaseException as exc:
                _fail(self.otel, span, exc)  # type: ignore[arg-type]
                raise
            finally:
                span.end()
        self.series_of(record.topic).add("acked", 1)

    # -- the stage ---------------------------------------------------------------------
    def open(self, delivery: Any) -> Any:
        """A delivery was handed out (a message, a record, or a batch of either): count it, put the
        traced acker or committer in front, start its process span (None: no tracing)."""
        if isinstance(delivery, Message):
            self.health.message()
            return self.begin(delivery)
        if isinstance(delivery, Record):
            self.health.message()
            return self.begin_record(delivery)
        if not delivery:
            self.health.success()
            return None
        self.health.message(len(delivery))
        return self.begin_batch(delivery)

    def close(self, span: Any, delivery: Any, exc: BaseException | None = None) -> None:
        """End the process span of ``delivery``: with its settle outcome when it is settled already
        (``polybroker.settle.outcome``: ``ack``, ``nack`` or ``dead_letter``; a batch's when all of it
        was settled alike), and ``exc`` recorded when the processing failed."""
        if span is None:
            return
        if span.is_recording():
            outcome = _outcome(delivery)
            if outcome is not None:
                span.set_attribute("polybroker.settle.outcome", outcome)
        self.end(span, exc)

    async def run(self, delivery: D, call: Callable[[D], Awaitable[R]]) -> R:
        """The stage: ``await call(delivery)`` inside the delivery's process span (current while it
        runs, so what ``call`` publishes continues the trace), timed and counted in the handler
        duration with its outcome (ok or error), the span ended with the settle outcome."""
        if isinstance(delivery, Message):  # the common case, without the dispatch of open()
            self.health.message()
            span = self.begin(delivery)
        else:
            span = self.open(delivery)
        token = None
        if span is not None and span.get_span_context().is_valid:
            otel = self.otel
            assert otel is not None
            token = otel.context.attach(otel.trace.set_span_in_context(span))
        start = time.perf_counter()
        try:
            result = await call(delivery)
        except BaseException as exc:
            self.series.handled(time.perf_counter() - start, False)
            if token is not None:
                self.otel.context.detach(token)  # type: ignore[union-attr]
            self.close(span, delivery, exc)
            raise
        self.series.handled(time.perf_counter() - start, True)
        if span is not None:
            if token is not None:  # a span with an invalid context (the no-op API's) never records
                self.otel.context.detach(token)  # type: ignore[union-attr]
                if span.is_recording():
                    outcome = _outcome(delivery)
                    if outcome is not None:
                        span.set_attribute("polybroker.settle.outcome", outcome)
            span.end()
        return result

    def stage(self, call: Callable[[D], Awaitable[R]]) -> Callable[[D], Awaitable[R]]:
        """``call`` (a handler, or the rest of a pipeline) run through :meth:`run` per delivery."""

        async def traced(delivery: D) -> R:
            return await self.run(delivery, call)

        return functools.update_wrapper(traced, call)  # logs name the user's handler

    def wrap_handler(self, handler: Handler) -> Handler:
        """``handler`` through the stage: inside a process span, timed, its outcome counted."""
        return self.stage(handler)

    def wrap_batch_handler(self, handler: BatchHandler) -> BatchHandler:
        """A batch ``handler`` through the stage: one process span linked to the messages' contexts."""
        return self.stage(handler)


def _outcome(delivery: Any) -> str | None:
    """The settle outcome of a message or a batch of messages (None: not settled, or not alike)."""
    if isinstance(delivery, Message):
        return _OUTCOMES.get(delivery.state)
    if isinstance(delivery, list) and delivery and isinstance(delivery[0], Message):
        states = {m.state for m in delivery}
        return _OUTCOMES.get(states.pop()) if len(states) == 1 else None
    return None
