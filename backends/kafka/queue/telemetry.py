"""The marker queue's :class:`QueueMetrics` counts as OpenTelemetry metrics (opt-in, the ``otel`` extra).

The queue's consumers and trackers count what they do in a :class:`QueueMetrics`, whose hook sees
every count. :class:`OtelQueueMetrics` is such a hook: it records each count on an OpenTelemetry
counter (the ``in_flight`` gauge on an up-down counter), so redeliveries, dead letters and the
markers the queue writes reach the same meter provider as :mod:`broker.telemetry`'s metrics:

    from broker.backends.kafka.queue import QueueMetrics, QueueService
    from broker.backends.kafka.queue.telemetry import OtelQueueMetrics

    metrics = QueueMetrics(OtelQueueMetrics(meter_provider, queue="emails"))
    service = QueueService(log, settings, metrics)

Every metric is named ``polybroker.queue.<count>`` (:data:`QUEUE_METRICS`) and labelled with
``messaging.system`` (``kafka``) and, when given, the ``queue`` and ``destination`` (the message
topic): values from the configuration, never from a message. OpenTelemetry is imported when an
:class:`OtelQueueMetrics` is made, not before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from broker.driver.otel import otel as _otel

__all__ = ["QUEUE_METRICS", "OtelQueueMetrics"]

#: QueueMetrics count -> (OpenTelemetry metric name, description). ``in_flight`` is an up-down
#: counter (the hook gets the gauge's new value; the difference is recorded), the rest counters.
QUEUE_METRICS: Final[Mapping[str, tuple[str, str]]] = {
    "received": ("polybroker.queue.received", "Messages a marker-queue consumer took from the queue."),
    "acked": ("polybroker.queue.acked", "Marker-queue messages acked (an END marker written)."),
    "nacked": ("polybroker.queue.nacked", "Marker-queue messages nacked (a nack marker written)."),
    "keepalives": (
        "polybroker.queue.keepalives",
        "Keep-alive markers written (in_progress(), received messages kept alive).",
    ),
    "redelivered": (
        "polybroker.queue.redelivered",
        "Messages the tracker sent again after their deadline passed or a nack.",
    ),
    "released": (
        "polybroker.queue.released",
        "Messages the tracker wrote back unseen by any application (no attempt counted).",
    ),
    "dead_lettered": (
        "polybroker.queue.dead_lettered",
        "Messages dead-lettered by a consumer or by the tracker at max_deliveries (or dropped).",
    ),
    "unrecoverable": (
        "polybroker.queue.unrecoverable",
        "Messages the tracker had to redeliver but could no longer read back.",
    ),
    "abandoned": (
        "polybroker.queue.abandoned",
        "Messages whose redelivery the tracker gave up on after max_elapsed (no dead-letter topic).",
    ),
    "fleet_mismatch": (
        "polybroker.queue.fleet_mismatch",
        "Markers showing a Go-fleet mix that misbehaves (see docs/kafka-queue.md, Go interoperability).",
    ),
    "marker_errors": ("polybroker.queue.marker_errors", "Marker writes that failed."),
    "tracker_failures": ("polybroker.queue.tracker_failures", "Failures of a redelivery tracker's loop."),
    "in_flight": ("polybroker.queue.in_flight", "Messages marker-queue consumers hold unsettled."),
}


class OtelQueueMetrics:
    """A :class:`~broker.backends.kafka.queue.QueueMetrics` hook recording the counts on OpenTelemetry
    instruments.

    ``meter_provider``: an OpenTelemetry ``MeterProvider`` (default: the global one). ``queue`` and
    ``destination`` (the message topic) label every point when given; ``attributes`` adds more
    (configuration values only). ``then``: another hook called after this one (to keep one of
    your own). Counts not in :data:`QUEUE_METRICS` get a counter ``polybroker.queue.<name>``.
    One instance per :class:`QueueMetrics`: ``in_flight`` is kept as the difference to the last
    value it saw.
    """

    def __init__(
        self,
        meter_provider: Any = None,
        *,
        queue: str | None = None,
        destination: str | None = None,
        attributes: Mapping[str, str] | None = None,
        then: Callable[[str, int], None] | None = None,
    ) -> None:
        from broker import __version__
        from broker.driver.otel import METER_NAME, SCHEMA_URL

        otel = _otel()
        self._meter = otel.metrics.get_meter(
            METER_NAME, __version__, meter_provider=meter_provider, schema_url=SCHEMA_URL
        )
        labels: dict[str, str] = {"messaging.system": "kafka"}
        if destination is not None:
            labels["messaging.destination.name"] = destination
        if queue is not None:
            labels["polybroker.queue.id"] = queue
        if attributes:
            labels.update(attributes)
        #: The attributes of every point.
        self.attributes: Mapping[str, str] = labels
        self._then = then
        self._instruments: dict[str, Any] = {}
        self._in_flight = 0

    def _instrument(self, name: str) -> Any:
        instrument = self._instruments.get(name)
        if instrument is None:
            otel_name, description = QUEUE_METRICS.get(
                name, (f"polybroker.queue.{name}", f"The marker queue's {name!r} count.")
            )
            if name == "in_flight":
                instrument = self._meter.create_up_down_counter(
                    otel_name, unit="{message}", description=description
                )
            else:
                instrument = self._meter.create_counter(otel_name, unit="{message}", description=description)
            self._instruments[name] = instrument
        return instrument

    def __call__(self, name: str, amount: int) -> None:
        """Record one count (``in_flight``: its new value) and pass it on to ``then``."""
        if name == "in_flight":
            delta = amount - self._in_flight
            self._in_flight = amount
            if delta:
                self._instrument(name).add(delta, self.attributes)
        elif amount > 0:
            self._instrument(name).add(amount, self.attributes)
        if self._then is not None:
            self._then(name, amount)
