"""OpenTelemetry tracing of processor callbacks and emitters (opt-in: ``tracer_provider=``).

Given a ``TracerProvider`` (the processor option ``tracer_provider``, or the emitter's), each
callback runs in a ``process <topic>`` span (kind CONSUMER) whose parent is the trace context
extracted from the input record's headers, and that span is the current one while the callback
runs (so what it publishes through an instrumented backend is its child). The span's context is
injected into the headers of every emit and loopback the callback makes, so a trace continues
through the processor, its loop topic and the processors downstream. An :class:`Emitter` with a
provider makes a ``publish <topic>`` span (kind PRODUCER) per emit, a child of the current
context, and injects that.

Spans follow the OpenTelemetry semantic conventions for messaging that :mod:`broker.telemetry`
follows (version :data:`broker.telemetry.SEMCONV_VERSION`). Without a provider none of this is
imported and the processor does exactly what it did before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.driver.otel import Otel
from broker.driver.otel import otel as _otel

if TYPE_CHECKING:
    from broker.backends.kafka.processor.context import Context

__all__ = ["CallbackTracing", "EmitTracing", "system_of"]


def system_of(log_port: Any) -> str:
    """The ``messaging.system`` of a log: ``kafka`` for the Kafka log, else its backend's name."""
    seen = 0
    while hasattr(log_port, "inner") and seen < 8:  # with_client_id and similar wrappers
        log_port = log_port.inner
        seen += 1
    module = type(log_port).__module__
    parts = module.split(".")
    if "backends" in parts[:-1]:
        return parts[parts.index("backends") + 1]
    return "kafka"


def _tracer(otel: Otel, tracer_provider: Any) -> Any:
    from broker import __version__
    from broker.driver.otel import METER_NAME, SCHEMA_URL

    return otel.trace.get_tracer(
        METER_NAME, __version__, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
    )


def _fail(otel: Otel, span: Any, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR, str(exc) or type(exc).__name__))


class CallbackTracing:
    """The tracing of one processor's callbacks: a span per callback, its context in the emits."""

    __slots__ = ("_base", "extract", "group", "inject", "otel", "system", "tracer")

    def __init__(self, tracer_provider: Any, propagator: Any, group: str, system: str) -> None:
        otel = self.otel = _otel()
        self.tracer = _tracer(otel, tracer_provider)
        self.inject: Any = propagator.inject if propagator is not None else otel.propagate.inject
        self.extract: Any = propagator.extract if propagator is not None else otel.propagate.extract
        self.group = group
        self.system = system
        self._base: dict[str, dict[str, Any]] = {}

    def _attributes(self, topic: str) -> dict[str, Any]:
        base = self._base.get(topic)
        if base is None:
            base = self._base[topic] = {
                "messaging.system": self.system,
                "messaging.destination.name": topic,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.consumer.group.name": self.group,
            }
        return base

    async def call(self, callback: Any, is_async: bool, ctx: Context, message: Any) -> None:
        """Run ``callback(ctx, message)`` in a process span continuing the record's trace."""
        otel = self.otel
        record = ctx.record
        attributes = record.attributes
        parent = self.extract(attributes) if attributes else None
        span = self.tracer.start_span(
            f"process {record.topic}",
            context=parent,
            kind=otel.trace.SpanKind.CONSUMER,
            attributes=self._attributes(record.topic),
        )
        if span.is_recording():
            span.set_attribute("messaging.destination.partition.id", str(record.partition))
            span.set_attribute("polybroker.record.offset", record.offset)
            if self.system == "kafka":
                span.set_attribute("messaging.kafka.offset", record.offset)
            if record.value is not None:
                span.set_attribute("messaging.message.body.size", len(record.value))
        token = None
        if span.get_span_context().is_valid:  # the no-op API's span has nothing to pass on
            context = otel.trace.set_span_in_context(span)
            carrier: dict[str, str] = {}
            self.inject(carrier, context=context)
            ctx._trace = carrier or None
            token = otel.context.attach(context)
        try:
            if is_async:
                await callback(ctx, message)
            else:
                callback(ctx, message)
        except BaseException as exc:
            _fail(otel, span, exc)
            raise
        else:
            if ctx._error is not None:  # misuse caught by the callback still stops the processor
                _fail(otel, span, ctx._error)
        finally:
            if token is not None:
                otel.context.detach(token)
            span.end()


class EmitTracing:
    """An emitter's tracing: a ``publish <topic>`` span per emit, its context in the headers."""

    __slots__ = ("_attributes", "inject", "otel", "tracer")

    def __init__(self, tracer_provider: Any, propagator: Any, topic: str, system: str) -> None:
        otel = self.otel = _otel()
        self.tracer = _tracer(otel, tracer_provider)
        self.inject: Any = propagator.inject if propagator is not None else otel.propagate.inject
        self._attributes = {
            "messaging.system": system,
            "messaging.destination.name": topic,
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
        }

    def start(
        self, topic: str, data: bytes | None, attributes: Mapping[str, str] | None
    ) -> tuple[Any, Mapping[str, str] | None]:
        """Start the publish span of one emit; returns it and the headers carrying its context.

        The emit's own headers win over the injected ones (an explicit ``traceparent`` stays).
        """
        otel = self.otel
        span = self.tracer.start_span(
            f"publish {topic}", kind=otel.trace.SpanKind.PRODUCER, attributes=self._attributes
        )
        if data is not None and span.is_recording():
            span.set_attribute("messaging.message.body.size", len(data))
        if not span.get_span_context().is_valid:
            return span, attributes
        carrier: dict[str, str] = {}
        self.inject(carrier, context=otel.trace.set_span_in_context(span))
        if not carrier:
            return span, attributes
        if attributes:
            carrier.update(attributes)
        return span, carrier

    def finish(self, span: Any, future: Any) -> None:
        """End ``span`` when the emit's ``future`` completed (as an error if the delivery failed)."""
        if future.cancelled():
            span.set_status(self.otel.trace.Status(self.otel.trace.StatusCode.ERROR, "cancelled"))
        else:
            exc = future.exception()
            if exc is not None:
                _fail(self.otel, span, exc)
        span.end()
