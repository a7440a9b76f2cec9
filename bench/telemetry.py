"""What telemetry costs per message: in-memory publish + consume + ack, off against on, side by side.

Three variants of one loop, in one process, on the in-memory backend (so the broker costs almost
nothing and the instrumentation's share shows):

off
    the plain backend, ``broker.connect("inmem://...")``: no telemetry installed (zero cost).
api
    ``broker.telemetry.instrument(backend)`` with OpenTelemetry's global providers left unset:
    the API's no-op tracer and meter (what a library user pays before configuring an SDK).
sdk
    ``instrument(backend, tracer_provider=..., meter_provider=...)`` with the OpenTelemetry SDK:
    every span sampled and processed by a ``BatchSpanProcessor`` into an exporter that drops
    them, metrics aggregated by an ``InMemoryMetricReader`` (what recording costs, without I/O).

The loop: a producer task ``publish``-es ``--messages`` messages of 100 bytes one by one, a
consumer ``async for``-s over ``backend.messages(...)`` and ``ack()``-s each. Each variant runs
``--rounds`` times (3), alternating; the best and the median rate are printed, then per-message
overhead in microseconds and the ratio of each variant's median to ``off``. Takes ~20-40 s.

Usage: python bench/telemetry.py [--messages N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import broker
from broker import OutboundMessage
from broker.telemetry import instrument


def sdk_providers() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=1 << 16))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


async def run(count: int, wrap: Callable[[broker.Backend], broker.Backend]) -> float:
    backend = wrap(broker.connect(f"inmem://bench-{uuid.uuid4().hex}"))
    async with backend:
        topic = backend.publisher().topic("bench")
        consumer = backend.messages("bench", "sub")
        messages = [OutboundMessage(b"x" * 100) for _ in range(count)]
        received = 0

        async def produce() -> None:
            for i, message in enumerate(messages):
                await topic.publish(message)
                if i % 256 == 0:
                    await asyncio.sleep(0)

        async def consume() -> None:
            nonlocal received
            async for message in consumer:
                await message.ack()
                received += 1
                if received == count:
                    return

        start = time.perf_counter()
        await asyncio.gather(produce(), consume())
        elapsed = time.perf_counter() - start
        assert received == count
        return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each variant")
    args = parser.parse_args()
    tracer_provider, meter_provider = sdk_providers()
    variants: dict[str, Callable[[broker.Backend], broker.Backend]] = {
        "off": lambda backend: backend,
        "api": lambda backend: instrument(backend),
        "sdk": lambda backend: instrument(
            backend, tracer_provider=tracer_provider, meter_provider=meter_provider
        ),
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
        for name in order:
            rates[name].append(asyncio.run(run(args.messages, variants[name])))
        print(f"round {round_ + 1}: " + "  ".join(f"{n} {rates[n][-1]:,.0f}" for n in variants), flush=True)
    tracer_provider.shutdown()
    meter_provider.shutdown()
    off = statistics.median(rates["off"])
    labels = {
        "off": "off (plain backend, no telemetry):",
        "api": "api (instrument(), no SDK: no-op API):",
        "sdk": "sdk (instrument(), SDK tracer + meter):",
    }
    for name in variants:
        median = statistics.median(rates[name])
        overhead = (1 / median - 1 / off) * 1e6
        print(
            f"{labels[name]:<42} best {max(rates[name]):>9,.0f}  median {median:>9,.0f} msgs/s"
            f"  overhead {overhead:6.1f} us/msg  ratio {median / off:.2f} of off"
        )


if __name__ == "__main__":
    main()
