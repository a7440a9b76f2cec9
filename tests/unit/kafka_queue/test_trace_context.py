"""Trace context through the marker queue's redeliveries, and its counts as OpenTelemetry metrics."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import QueueMetrics, QueueService, QueueSettings
from broker.backends.kafka.queue.telemetry import OtelQueueMetrics
from broker.log import TopicPartition
from broker.telemetry.propagation import extract, inject
from broker.testing import wait_until


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://queue-trace-{uuid.uuid4().hex}?partitions=3")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


@pytest.fixture
def tracer() -> Iterator[Any]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    yield provider.get_tracer("test")
    provider.shutdown()


@pytest.fixture(params=["batched", "per-message"])
def marker_format(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def settings(marker_format: str, **overrides: Any) -> QueueSettings:
    values: dict[str, Any] = {
        "marker_format": marker_format,
        "message_topic": "q",
        "marker_topic": "q-markers",
        "redelivery_timeout": 0.3,
        "next_message_timeout": 0.05,
        "use_now_if_no_marker_seen": 0.05,
        "tracker_poll_interval": 0.02,
    }
    values.update(overrides)
    return QueueSettings(**values)


def traced_attributes(tracer: Any) -> tuple[dict[str, str], Any]:
    with tracer.start_as_current_span("publish q") as span:
        attributes = inject({"tenant": "acme"})
    assert "traceparent" in attributes
    return attributes, span.get_span_context()


async def test_a_nacked_message_comes_back_with_its_trace_context(
    log: InmemLog, tracer: Any, marker_format: str
) -> None:
    service = QueueService(log, settings(marker_format))
    await service.create_topics(partitions=3)
    attributes, original = traced_attributes(tracer)
    async with service.tracker(), service.consumer("orders") as consumer:
        await service.producer("orders").send(b"order", key="a", attributes=attributes)
        first = await consumer.receive(timeout=3)
        await first.nack()
        second = await consumer.receive(timeout=5)
        await second.ack()
    assert second.id == first.id and second.delivery_attempt == 2
    for name in ("traceparent", "tenant"):
        assert second.attributes[name] == first.attributes[name] == attributes[name]
    carried = trace.get_current_span(extract(second.attributes)).get_span_context()
    assert carried.trace_id == original.trace_id and carried.span_id == original.span_id


async def test_a_timed_out_message_and_its_dead_letter_keep_the_trace_context(
    log: InmemLog, tracer: Any, marker_format: str
) -> None:
    service = QueueService(log, settings(marker_format, max_deliveries=2, dead_letter_topic="q-dead"))
    await service.create_topics(partitions=3)
    attributes, _ = traced_attributes(tracer)
    async with service.tracker(), service.consumer("orders") as consumer:
        await service.producer("orders").send(b"order", key="a", attributes=attributes)
        first = await consumer.receive(timeout=3)
        consumer.interrupt(first)  # the worker died: the tracker redelivers after the timeout
        second = await consumer.receive(timeout=5)
        assert second.delivery_attempt == 2
        assert second.attributes["traceparent"] == attributes["traceparent"]
        await second.nack()  # the last allowed delivery: the tracker dead-letters it
        await wait_until(lambda: "q-dead" in log.broker.topics, timeout=5)  # made by the dead letter
        reader = log.reader()
        dead: list[broker.Record] = []
        reader.assign({TopicPartition("q-dead", p): 0 for p in range(await log.partitions("q-dead"))})
        for _ in range(50):
            dead += await reader.poll(10, timeout=0.1)
            if dead:
                break
        await reader.close()
    assert dead and dead[0].attributes["traceparent"] == attributes["traceparent"]


async def test_queue_counts_reach_opentelemetry(log: InmemLog) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    mine: list[tuple[str, int]] = []
    hook = OtelQueueMetrics(provider, queue="orders", destination="q", then=lambda n, a: mine.append((n, a)))
    metrics = QueueMetrics(hook)
    service = QueueService(log, settings("batched"), metrics)
    await service.create_topics(partitions=3)
    async with service.tracker(), service.consumer("orders") as consumer:
        await service.producer("orders").send(b"order", key="a")
        first = await consumer.receive(timeout=3)
        await first.nack()
        second = await consumer.receive(timeout=5)
        await second.ack()
    points: dict[str, Any] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    assert point.attributes == {
                        "messaging.system": "kafka",
                        "messaging.destination.name": "q",
                        "polybroker.queue.id": "orders",
                    }
                    points[metric.name] = point.value
    provider.shutdown()
    assert points["polybroker.queue.received"] == metrics.counts["received"] == 2
    assert points["polybroker.queue.redelivered"] == metrics.counts["redelivered"] == 1
    assert points["polybroker.queue.nacked"] == 1 and points["polybroker.queue.acked"] == 1
    assert points["polybroker.queue.in_flight"] == 0
    assert ("redelivered", 1) in mine  # the hook it was given still gets every count


def test_in_flight_is_recorded_as_differences() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    hook = OtelQueueMetrics(provider)
    for value in (3, 5, 2):
        hook("in_flight", value)
    hook("dead_lettered", 2)
    hook("custom", 1)
    data = reader.get_metrics_data()
    assert data is not None
    values = {
        m.name: p.value
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        for p in m.data.data_points
    }
    provider.shutdown()
    assert values == {
        "polybroker.queue.in_flight": 2,
        "polybroker.queue.dead_lettered": 2,
        "polybroker.queue.custom": 1,
    }
