"""A Prometheus exposition of :mod:`broker.telemetry`'s metrics, through ``prometheus_client``.

:class:`PrometheusMetrics` holds the metrics of :data:`~broker.telemetry.metrics.METRICS` in a
registry of its own (not prometheus_client's global one, unless you pass it), fed by every
backend instrumented with ``instrument(backend, prometheus=metrics)``. Serve it over HTTP with
:meth:`PrometheusMetrics.serve` (on 127.0.0.1 by default) or render it into your own endpoint
with :meth:`PrometheusMetrics.exposition`. Needs the ``prometheus`` extra.
"""

from __future__ import annotations

import threading
from typing import Any

from broker.telemetry._deps import prometheus_client
from broker.telemetry.metrics import METRICS, ConsumerSeries, PublishSeries

__all__ = ["PrometheusMetrics"]

#: The counters labelled by consumer alone (system, destination, subscription); gauges are set apart.
_CONSUMER_KEYS = tuple(
    s.key for s in METRICS if s.labels == ("system", "destination", "subscription") and s.kind != "gauge"
)

#: Handler durations in seconds: 1 ms to 1 min.
DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _PromPublish:
    __slots__ = ("_error", "_ok")

    def __init__(self, counter: Any, system: str, destination: str) -> None:
        self._ok = counter.labels(system, destination, "ok")
        self._error = counter.labels(system, destination, "error")

    def published(self, count: int, ok: bool) -> None:
        (self._ok if ok else self._error).inc(count)


class _PromConsumer:
    __slots__ = ("_backlog", "_children", "_error", "_labels", "_ok")

    def __init__(self, metrics: dict[str, Any], labels: tuple[str, str, str]) -> None:
        self._children = {key: metrics[key].labels(*labels) for key in _CONSUMER_KEYS}
        self._ok = metrics["handler_duration"].labels(*labels, "ok")
        self._error = metrics["handler_duration"].labels(*labels, "error")
        self._backlog = metrics["backlog"]  # a child only while the backlog is known
        self._labels = labels

    def add(self, key: str, count: int) -> None:
        self._children[key].inc(count)  # a Gauge's inc takes negative amounts too

    def handled(self, seconds: float, ok: bool) -> None:
        (self._ok if ok else self._error).observe(seconds)

    def backlog(self, value: int | None) -> None:
        if value is not None:
            self._backlog.labels(*self._labels).set(value)
            return
        try:
            self._backlog.remove(*self._labels)
        except KeyError:
            pass  # never set


class PrometheusMetrics:
    """The metrics of :mod:`broker.telemetry` as prometheus_client metrics in one registry.

    ``registry``: where to register them (default: a new ``CollectorRegistry`` of this object's
    own, so two instances never clash); ``buckets``: the handler-duration histogram's buckets.
    """

    def __init__(self, registry: Any = None, *, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        prom = prometheus_client()
        self._prom = prom
        self.registry: Any = registry if registry is not None else prom.CollectorRegistry(auto_describe=True)
        self.metrics: dict[str, Any] = {}
        for spec in METRICS:
            if spec.kind == "counter":
                name = spec.prometheus_name.removesuffix("_total")
                metric = prom.Counter(name, spec.description, spec.labels, registry=self.registry)
            elif spec.kind == "histogram":
                metric = prom.Histogram(
                    spec.prometheus_name,
                    spec.description,
                    spec.labels,
                    registry=self.registry,
                    buckets=buckets,
                )
            else:
                metric = prom.Gauge(
                    spec.prometheus_name, spec.description, spec.labels, registry=self.registry
                )
            self.metrics[spec.key] = metric
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def publish_series(self, system: str, destination: str) -> PublishSeries:
        """The series of publishes to ``destination``."""
        return _PromPublish(self.metrics["published"], system, destination)

    def consumer_series(self, system: str, destination: str, subscription: str) -> ConsumerSeries:
        """The series of one consumer."""
        return _PromConsumer(self.metrics, (system, destination, subscription))

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what a scrape returns)."""
        return bytes(self._prom.generate_latest(self.registry))

    @property
    def content_type(self) -> str:
        """The HTTP ``Content-Type`` of :meth:`exposition`."""
        return str(self._prom.CONTENT_TYPE_LATEST)

    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve the registry over HTTP on ``addr:port`` from a daemon thread; returns the port.

        ``port=0`` picks a free one. Listens on the loopback interface unless ``addr`` says
        otherwise (``"0.0.0.0"`` to be scraped from other hosts). Stop with :meth:`close`.
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError("the Prometheus endpoint is already served; close() it first")
            self._server, self._thread = self._prom.start_http_server(port, addr, registry=self.registry)
            return int(self._server.server_port)

    @property
    def port(self) -> int | None:
        """The port :meth:`serve` listens on, None when not serving."""
        return None if self._server is None else int(self._server.server_port)

    def close(self) -> None:
        """Stop the HTTP endpoint started by :meth:`serve` (idempotent)."""
        with self._lock:
            server, self._server = self._server, None
            thread, self._thread = self._thread, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(5)
