"""Observability: OpenTelemetry traces and metrics, a Prometheus endpoint and consumer health.

Runs on the in-memory broker by default (needs the ``otel`` and ``prometheus`` extras and the
OpenTelemetry SDK, ``pip install opentelemetry-sdk``); pass another URL to trace another broker:

    python examples/observability.py                       # inmem://observability
    python examples/observability.py nats://127.0.0.1:4222  # after `broker dev nats`

An order goes to "orders"; a handler bills it and publishes an invoice to "invoices"; a second
handler fails once on it (nacked, redelivered) and then acks it. One trace covers it all. The
script prints the spans as a tree, the metrics, a Prometheus scrape of them over HTTP, and the
health report.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import urllib.request

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import broker
from broker import Message, OutboundMessage
from broker.telemetry import PrometheusMetrics, instrument


def print_tree(spans: list[ReadableSpan]) -> None:
    """Print spans indented under their parents, in start order."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            attrs = span.attributes or {}
            print(f"{'  ' * depth}{span.name} [{span.kind.name}] system={attrs.get('messaging.system')}")
            show(span.context.span_id, depth + 1)

    show(None, 0)


def fetch(url: str) -> str:
    """GET ``url`` (what Prometheus does on a scrape)."""
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body.decode()


async def main(url: str) -> None:
    """Run the two handlers on an instrumented backend, then print what telemetry saw."""
    logging.getLogger("broker.adapt").setLevel(logging.CRITICAL)  # the planned failure logs a traceback
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    prometheus = PrometheusMetrics()
    port = prometheus.serve()  # 127.0.0.1, a free port

    backend = instrument(
        broker.connect(url),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        prometheus=prometheus,
    )
    async with backend:
        publisher = backend.publisher()
        mailed = asyncio.Event()

        async def bill(message: Message) -> None:
            await publisher.topic("invoices").publish(OutboundMessage(b"invoice for " + message.data))
            await message.ack()

        async def mail(message: Message) -> None:
            if message.delivery_attempt == 1:
                raise RuntimeError("mail server busy")  # the receiver nacks; the message comes back
            await message.ack()
            mailed.set()

        tasks = [
            asyncio.create_task(backend.receiver("orders", "billing").receive(bill)),
            asyncio.create_task(backend.receiver("invoices", "mailing", nack_delay=0.05).receive(mail)),
        ]
        await publisher.topic("orders").publish(OutboundMessage(b"order 1"))
        await asyncio.wait_for(mailed.wait(), 10)
        health = backend.health()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    print("spans (one trace):")
    finished = list(spans.get_finished_spans())
    print_tree(finished)
    assert len({s.context.trace_id for s in finished}) == 1

    print("metrics:")
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = point.value if hasattr(point, "value") else f"count={point.count}"
                    labels = ",".join(k + "=" + str(v) for k, v in sorted((point.attributes or {}).items()))
                    print(f"  {metric.name}{{{labels}}} {value}")

    scrape = await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/metrics")
    prometheus.close()
    print(f"prometheus scrape of 127.0.0.1:{port}/metrics (totals):")
    for line in scrape.splitlines():
        if line.startswith("polybroker_messages_") and "_created" not in line:
            print("  " + line)

    print(f"health: live={health.live} ready={health.ready}")
    for consumer in health.consumers:
        print(
            f"  {consumer.destination}/{consumer.subscription}: connected={consumer.connected} "
            f"consuming={consumer.consuming} received={consumer.received}"
        )
    tracer_provider.shutdown()
    meter_provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "inmem://observability"))
