"""The metrics of :mod:`broker.telemetry`: their names, labels, and where they are recorded.

Every metric is listed once in :data:`METRICS` (``docs/metrics.md`` is the same list). Labels are
only ``system``, ``destination``, ``subscription`` and ``outcome``: values that come from the
application's configuration (topic and subscription names) or a fixed set, never from a message
(no ids, keys or payloads), so the number of series stays bounded.

A metric is recorded through the OpenTelemetry metrics API (a ``MeterProvider``, the global one by
default) and, when one is given, a :class:`~broker.telemetry.prometheus.PrometheusMetrics`; the
same figures go to both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

__all__ = [
    "METER_NAME",
    "METRICS",
    "ConsumerSeries",
    "Meters",
    "MetricSink",
    "MetricSpec",
    "OtelSink",
    "PublishSeries",
]

#: The instrumentation scope name of the meter and the tracer.
METER_NAME: Final = "polybroker"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its OpenTelemetry name and Prometheus name, kind, unit, labels and meaning."""

    key: str
    otel_name: str
    prometheus_name: str
    kind: str  # "counter", "histogram", "updowncounter" or "gauge"
    unit: str
    labels: tuple[str, ...]
    description: str


_CONSUMER: Final = ("system", "destination", "subscription")

#: Every metric :mod:`broker.telemetry` records.
METRICS: Final[tuple[MetricSpec, ...]] = (
    MetricSpec(
        "published",
        "polybroker.messages.published",
        "polybroker_messages_published_total",
        "counter",
        "{message}",
        ("system", "destination", "outcome"),
        "Messages handed to publish or batch_publish; outcome is ok (the broker has them) or error.",
    ),
    MetricSpec(
        "received",
        "polybroker.messages.received",
        "polybroker_messages_received_total",
        "counter",
        "{message}",
        _CONSUMER,
        "Messages and records handed to the application (by an iterator or to a handler).",
    ),
    MetricSpec(
        "acked",
        "polybroker.messages.acked",
        "polybroker_messages_acked_total",
        "counter",
        "{message}",
        _CONSUMER,
        "Messages acked (for records: ack() calls, each committing its offset and the lower ones).",
    ),
    MetricSpec(
        "nacked",
        "polybroker.messages.nacked",
        "polybroker_messages_nacked_total",
        "counter",
        "{message}",
        _CONSUMER,
        "Messages nacked (handed back for redelivery), by the application or by a receiver after "
        "a failed handler.",
    ),
    MetricSpec(
        "dead_lettered",
        "polybroker.messages.dead_lettered",
        "polybroker_messages_dead_lettered_total",
        "counter",
        "{message}",
        _CONSUMER,
        "Messages dead-lettered through Message.dead_letter() (by the application or a RetryPolicy).",
    ),
    MetricSpec(
        "redelivered",
        "polybroker.messages.redelivered",
        "polybroker_messages_redelivered_total",
        "counter",
        "{message}",
        _CONSUMER,
        "Messages received with delivery_attempt > 1 (on backends that count deliveries).",
    ),
    MetricSpec(
        "handler_duration",
        "polybroker.handler.duration",
        "polybroker_handler_duration_seconds",
        "histogram",
        "s",
        (*_CONSUMER, "outcome"),
        "Time a receiver's handler took per message (per batch for batch handlers); outcome is ok "
        "or error (the handler raised).",
    ),
    MetricSpec(
        "in_flight",
        "polybroker.messages.in_flight",
        "polybroker_messages_in_flight",
        "updowncounter",
        "{message}",
        _CONSUMER,
        "Messages handed to the application and not settled yet (records are not counted).",
    ),
    MetricSpec(
        "backlog",
        "polybroker.consumer.backlog",
        "polybroker_consumer_backlog",
        "gauge",
        "{message}",
        _CONSUMER,
        "Messages of the subscription (for records: the consumer group) not consumed yet, as the "
        "broker reports it, polled while a consumer of it is open; no series where the broker "
        "does not say.",
    ),
)


class PublishSeries(Protocol):
    """The publish metrics of one (system, destination)."""

    def published(self, count: int, ok: bool) -> None:
        """Count ``count`` messages published, successfully or not."""


class ConsumerSeries(Protocol):
    """The consumer metrics of one (system, destination, subscription)."""

    def add(self, key: str, count: int) -> None:
        """Add ``count`` to the counter (or up-down counter) named by ``key`` in :data:`METRICS`."""

    def handled(self, seconds: float, ok: bool) -> None:
        """Record one handler call of ``seconds``."""

    def backlog(self, value: int | None) -> None:
        """Set the backlog gauge to ``value`` (None: unknown, the series is withdrawn)."""


class MetricSink(Protocol):
    """Somewhere metrics go: the OpenTelemetry API or a Prometheus registry."""

    def publish_series(self, system: str, destination: str) -> PublishSeries:
        """The series of publishes to ``destination``."""

    def consumer_series(self, system: str, destination: str, subscription: str) -> ConsumerSeries:
        """The series of one consumer."""


class _OtelPublish:
    __slots__ = ("_counter", "_error", "_ok")

    def __init__(self, counter: Any, labels: dict[str, str]) -> None:
        self._counter = counter
        self._ok = {**labels, "outcome": "ok"}
        self._error = {**labels, "outcome": "error"}

    def published(self, count: int, ok: bool) -> None:
        self._counter.add(count, self._ok if ok else self._error)


class _OtelConsumer:
    __slots__ = ("_backlog", "_error", "_in_flight", "_instruments", "_labels", "_ok")

    def __init__(
        self,
        instruments: dict[str, Any],
        labels: dict[str, str],
        in_flight: list[int],
        backlog: list[int | None],
    ) -> None:
        self._instruments = instruments
        self._labels = labels
        self._ok = {**labels, "outcome": "ok"}
        self._error = {**labels, "outcome": "error"}
        self._in_flight = in_flight
        self._backlog = backlog

    def add(self, key: str, count: int) -> None:
        if key == "in_flight":  # a plain integer, observed when the metrics are collected
            self._in_flight[0] += count
        else:
            self._instruments[key].add(count, self._labels)

    def handled(self, seconds: float, ok: bool) -> None:
        self._instruments["handler_duration"].record(seconds, self._ok if ok else self._error)

    def backlog(self, value: int | None) -> None:
        self._backlog[0] = value  # observed when the metrics are collected


class OtelSink:
    """Records :data:`METRICS` through an OpenTelemetry ``Meter``."""

    def __init__(self, meter: Any) -> None:
        from opentelemetry.metrics import Observation

        self._observation = Observation
        self.instruments: dict[str, Any] = {}
        #: labels -> a one-item list holding the series' in-flight count (read by a callback).
        self._in_flight: dict[tuple[str, str, str], list[int]] = {}
        #: labels -> a one-item list holding the series' last backlog (None: not observed).
        self._backlog: dict[tuple[str, str, str], list[int | None]] = {}
        for spec in METRICS:
            if spec.key == "in_flight":
                self.instruments[spec.key] = meter.create_observable_up_down_counter(
                    spec.otel_name, callbacks=[self._observe], unit=spec.unit, description=spec.description
                )
                continue
            if spec.kind == "gauge":
                self.instruments[spec.key] = meter.create_observable_gauge(
                    spec.otel_name,
                    callbacks=[self._observe_backlog],
                    unit=spec.unit,
                    description=spec.description,
                )
                continue
            create = {
                "counter": meter.create_counter,
                "histogram": meter.create_histogram,
                "updowncounter": meter.create_up_down_counter,
            }[spec.kind]
            self.instruments[spec.key] = create(spec.otel_name, unit=spec.unit, description=spec.description)

    def publish_series(self, system: str, destination: str) -> PublishSeries:
        """The series of publishes to ``destination``."""
        return _OtelPublish(self.instruments["published"], {"system": system, "destination": destination})

    def consumer_series(self, system: str, destination: str, subscription: str) -> ConsumerSeries:
        """The series of one consumer."""
        labels = {"system": system, "destination": destination, "subscription": subscription}
        key = (system, destination, subscription)
        cell = self._in_flight.setdefault(key, [0])
        backlog = self._backlog.setdefault(key, [None])
        return _OtelConsumer(self.instruments, labels, cell, backlog)

    def _observe(self, options: Any) -> list[Any]:
        observation = self._observation
        return [
            observation(cell[0], {"system": s, "destination": d, "subscription": u})
            for (s, d, u), cell in list(self._in_flight.items())
        ]

    def _observe_backlog(self, options: Any) -> list[Any]:
        observation = self._observation
        return [
            observation(cell[0], {"system": s, "destination": d, "subscription": u})
            for (s, d, u), cell in list(self._backlog.items())
            if cell[0] is not None
        ]


S = TypeVar("S")


class _Fan(Generic[S]):
    """One series that forwards every observation to the same series of several sinks."""

    __slots__ = ("_series",)

    def __init__(self, series: list[S]) -> None:
        self._series = series


class _FanPublish(_Fan[PublishSeries]):
    __slots__ = ()

    def published(self, count: int, ok: bool) -> None:
        for series in self._series:
            series.published(count, ok)


class _FanConsumer(_Fan[ConsumerSeries]):
    __slots__ = ()

    def add(self, key: str, count: int) -> None:
        for series in self._series:
            series.add(key, count)

    def handled(self, seconds: float, ok: bool) -> None:
        for series in self._series:
            series.handled(seconds, ok)

    def backlog(self, value: int | None) -> None:
        for series in self._series:
            series.backlog(value)


class Meters:
    """Every sink of one instrumented backend, with the series cached per label set."""

    def __init__(self, system: str, sinks: list[MetricSink], publish_system: str | None = None) -> None:
        self.system = system
        #: The ``system`` label of publish series (the service publishes go to).
        self.publish_system = publish_system or system
        self.sinks = sinks
        self._publish: dict[str, PublishSeries] = {}
        self._consumers: dict[tuple[str, str], ConsumerSeries] = {}

    def publish(self, destination: str) -> PublishSeries:
        """The publish series of ``destination`` (cached)."""
        series = self._publish.get(destination)
        if series is None:
            parts = [sink.publish_series(self.publish_system, destination) for sink in self.sinks]
            series = self._publish[destination] = parts[0] if len(parts) == 1 else _FanPublish(parts)
        return series

    def consumer(self, destination: str, subscription: str) -> ConsumerSeries:
        """The consumer series of ``destination`` through ``subscription`` (cached)."""
        key = (destination, subscription)
        series = self._consumers.get(key)
        if series is None:
            parts = [sink.consumer_series(self.system, destination, subscription) for sink in self.sinks]
            series = self._consumers[key] = parts[0] if len(parts) == 1 else _FanConsumer(parts)
        return series
