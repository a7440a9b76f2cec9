"""Conformance test of the portable telemetry layer (:mod:`broker.telemetry`), mixed into the suite.

One fast test per backend: through ``instrument(backend)``, a receiver's handler fails a message
once, the message comes back and is acked; each message's process spans continue its publish
span's trace, and the counters say what happened. Skipped where the OpenTelemetry SDK is absent.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

from broker.backoff import Backoff
from broker.driver.testing.harness import Harness, need
from broker.message import Message, OutboundMessage

__all__ = ["TelemetrySuite"]


def _metric_values(reader: Any, destination: str) -> Counter[str]:
    """Metric name -> summed value over the points of ``destination``."""
    values: Counter[str] = Counter()
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if (point.attributes or {}).get("destination") == destination:
                        values[metric.name] += point.value if hasattr(point, "value") else point.count
    return values


class TelemetrySuite:
    """``broker.telemetry.instrument`` on every backend: traces continue, settlements are counted."""

    async def test_instrumented_backend_traces_and_counts(self, harness: Harness) -> None:
        """A failed-once message comes back and is acked; spans continue the trace; counts add up."""
        need(harness, "messages", "nack_redelivers")
        sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
        sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from broker.telemetry import instrument

        exporter = InMemorySpanExporter()
        tracer_provider = sdk_trace.TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        reader = InMemoryMetricReader()
        meter_provider = sdk_metrics.MeterProvider(metric_readers=[reader])
        # Not closed here: the instrumented backend is a view of the harness's, which the harness closes.
        backend = instrument(harness.backend, tracer_provider=tracer_provider, meter_provider=meter_provider)

        topic, sub = harness.name("otel"), harness.name("sub")
        await harness.prepare(topic, [sub])
        async with backend.messages(topic, sub):
            pass  # the subscription exists from here on
        acked: set[bytes] = set()
        failed: list[bytes] = []
        done = asyncio.Event()

        async def handler(message: Message) -> None:
            if message.data == b"1" and not failed:
                failed.append(message.data)
                raise RuntimeError("fails once")
            await message.ack()
            acked.add(message.data)
            if acked == {b"0", b"1"}:
                done.set()

        receiver = backend.receiver(topic, sub, nack_delay=Backoff(0.05, 1.0, 0.05))
        task = asyncio.ensure_future(receiver.receive(handler))
        try:
            await backend.publisher().topic(topic).batch_publish(OutboundMessage(b"0"), OutboundMessage(b"1"))
            async with asyncio.timeout(harness.patience + harness.short_ack_deadline * 3):
                await done.wait()
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        spans = exporter.get_finished_spans()
        publishes = [s for s in spans if s.name == f"publish {topic}"]
        processes = [s for s in spans if s.name == f"process {topic}"]
        assert publishes, f"no publish span among {[s.name for s in spans]}"
        assert len(processes) >= 3, "each delivery (two, plus the redelivery) has a process span"
        traces = {s.context.trace_id for s in publishes}
        assert {s.context.trace_id for s in processes} <= traces, "a process span left the publish trace"
        assert all(s.parent is not None for s in processes), "a process span has no parent"

        values = _metric_values(reader, topic)
        assert values["polybroker.messages.published"] == 2, values
        assert values["polybroker.messages.acked"] == 2, values
        assert values["polybroker.messages.nacked"] >= 1, values
        assert values["polybroker.messages.received"] >= 3, values
