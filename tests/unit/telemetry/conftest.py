"""Fixtures of the telemetry tests: OpenTelemetry SDK providers with in-memory exporters."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import broker
from broker.telemetry import InstrumentedBackend, instrument


@dataclass
class Otel:
    exporter: InMemorySpanExporter
    tracer_provider: TracerProvider
    reader: InMemoryMetricReader
    meter_provider: MeterProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def points(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], Any]:
        """(metric name, labels) -> value (a sum, or the histogram's count)."""
        out: dict[tuple[str, frozenset[tuple[str, Any]]], Any] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        labels = frozenset((point.attributes or {}).items())
                        out[(metric.name, labels)] = point.value if hasattr(point, "value") else point.count
        return out

    def value(self, name: str, **labels: str) -> Any:
        """The value of ``name`` summed over the points whose labels include ``labels``."""
        found = [v for (n, ls), v in self.points().items() if n == name and set(labels.items()) <= set(ls)]
        return sum(found) if found else None


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, tracer_provider, reader, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
async def backend(otel: Otel) -> AsyncIterator[InstrumentedBackend]:
    plain = broker.connect(f"inmem://telemetry-{uuid.uuid4().hex}")
    async with instrument(
        plain, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
    ) as instrumented:
        yield instrumented
