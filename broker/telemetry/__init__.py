"""OpenTelemetry tracing and metrics, a Prometheus exposition and consumer health, on every backend.

>>> from broker.telemetry import instrument
>>> backend = instrument(broker.connect("kafka://localhost:9092"))   # doctest: +SKIP

:func:`instrument` wraps a :class:`~broker.Backend` once, above the drivers, so the same spans
and metrics come from every backend:

* publish: a ``publish <topic>`` span (kind PRODUCER) around the send, its W3C trace context
  injected into each message's attributes (``traceparent``, ``tracestate``), and the
  ``polybroker.messages.published`` counter;
* receive: the context extracted from ``Message.attributes`` / ``Record.attributes``, a
  ``process <topic>`` span (kind CONSUMER) whose parent is that context (batches: one span with
  a link per message), counters for received, redelivered and in-flight messages, and the
  handler's duration when a receiver calls it;
* settle: ``ack``/``nack``/``dead_letter <topic>`` spans (kind CLIENT) under the process span,
  and their counters.

The spans follow the OpenTelemetry semantic conventions for messaging, version
:data:`SEMCONV_VERSION`; the metrics are listed in :data:`~broker.telemetry.metrics.METRICS`
(and ``docs/metrics.md``). Nothing here is imported, and nothing costs anything, until
:func:`instrument` is called: ``import broker`` needs neither OpenTelemetry (extra ``otel``) nor
prometheus_client (extra ``prometheus``).
"""

from __future__ import annotations

from typing import Any

from broker.backend import Backend
from broker.telemetry._deps import otel as _otel
from broker.telemetry.core import SCHEMA_URL, SEMCONV_VERSION, SYSTEMS, Telemetry
from broker.telemetry.health import ConsumerHealth, HealthReport, HealthState
from broker.telemetry.metrics import METER_NAME, METRICS, Meters, MetricSink, MetricSpec, OtelSink
from broker.telemetry.prometheus import PrometheusMetrics
from broker.telemetry.propagation import TRACE_HEADERS, extract, inject
from broker.telemetry.wrappers import DEFAULT_BACKLOG_INTERVAL, InstrumentedBackend

__all__ = [
    "METRICS",
    "SEMCONV_VERSION",
    "SYSTEMS",
    "TRACE_HEADERS",
    "ConsumerHealth",
    "HealthReport",
    "InstrumentedBackend",
    "MetricSpec",
    "PrometheusMetrics",
    "extract",
    "inject",
    "instrument",
]


def instrument(
    backend: Backend,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    prometheus: PrometheusMetrics | None = None,
    propagator: Any = None,
    tracing: bool = True,
    metrics: bool = True,
    opentelemetry: bool = True,
    settle_spans: bool = True,
    lag_threshold: int | None = None,
    backlog_interval: float | None = DEFAULT_BACKLOG_INTERVAL,
) -> InstrumentedBackend:
    """``backend`` with tracing, metrics and health, as a delegating :class:`InstrumentedBackend`.

    ``tracer_provider`` / ``meter_provider``: OpenTelemetry providers (default: the global ones,
    which do nothing until an SDK is configured). ``propagator``: a ``TextMapPropagator`` (default:
    the global one, W3C trace context and baggage). ``prometheus``: a :class:`PrometheusMetrics`
    that gets the same metrics. ``tracing=False`` / ``metrics=False`` leave out spans or
    OpenTelemetry metrics; ``opentelemetry=False`` uses no OpenTelemetry at all (Prometheus and
    health only), so the ``otel`` extra is not needed. ``settle_spans=False`` leaves out the
    ack/nack/dead_letter spans (settlements are still counted), a third of the spans.
    ``backlog_interval``: how often each consumed subscription's backlog is read from the broker
    (``Backend.backlog``; 0 or None: never), for the ``polybroker.consumer.backlog`` gauge and
    health; ``lag_threshold``: a backlog above it marks the consumer ``lagging``.

    Raises :class:`~broker.errors.MissingDependency` naming the ``otel`` extra when OpenTelemetry
    is wanted and not installed.
    """
    from broker import __version__

    sinks: list[MetricSink] = []
    otel = None
    tracer = None
    if opentelemetry and (tracing or metrics):
        otel = _otel()
        if tracing:
            tracer = otel.trace.get_tracer(
                METER_NAME, __version__, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
            )
        if metrics:
            meter = otel.metrics.get_meter(
                METER_NAME, __version__, meter_provider=meter_provider, schema_url=SCHEMA_URL
            )
            sinks.append(OtelSink(meter))
    if prometheus is not None:
        sinks.append(prometheus)
    publish_system = getattr(backend, "messaging_publish_system", None)
    if not isinstance(publish_system, str):
        publish_system = None
    meters = Meters(SYSTEMS.get(backend.name, backend.name), sinks, publish_system)
    telemetry = Telemetry(
        backend.name, otel, tracer, propagator, meters, HealthState(), settle_spans, publish_system
    )
    return InstrumentedBackend(
        backend, telemetry, lag_threshold=lag_threshold, backlog_interval=backlog_interval
    )
