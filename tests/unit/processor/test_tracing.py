"""Opt-in tracing of the stream processor: process spans per callback, trace context in emits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from broker.backends.kafka.processor import (
    Context,
    Emitter,
    Processor,
    ProcessorError,
    ProcessorOptions,
    Tester,
    define_group,
    input,
    loop,
    output,
    persist,
)
from broker.log import TopicPartition
from broker.message import Record
from broker.telemetry.propagation import extract, inject
from tests.unit.processor.support import inmem_backend


class Spans:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all() if s.name == name]

    def upstream(self) -> tuple[dict[str, str], Any]:
        """Headers carrying the context of a finished ``upstream`` producer span, and its context."""
        with self.tracer.start_as_current_span("upstream", kind=SpanKind.PRODUCER) as span:
            headers = inject({"tenant": "acme"})
        return headers, span.get_span_context()


@pytest.fixture
def spans() -> Iterator[Spans]:
    made = Spans()
    yield made
    made.provider.shutdown()


def trace_of(headers: Any) -> Any:
    return trace.get_current_span(extract(headers)).get_span_context()


def graph_with_emit_and_loop() -> Any:
    def order(ctx: Context, value: Any) -> None:
        ctx.set_value((ctx.value() or 0) + 1)
        ctx.emit("invoices", ctx.key, f"invoice for {value}")
        ctx.loopback(f"audit-{ctx.key}", value)

    def audit(ctx: Context, value: Any) -> None:
        ctx.emit("audits", ctx.key, value, headers={"kind": "audit"})

    return define_group(
        "billing",
        input("orders", "str", order),
        output("invoices", "str"),
        output("audits", "str"),
        loop("str", audit),
        persist("int64"),
    )


async def test_the_tester_with_tracing_carries_the_inputs_trace_through_emits_and_loopbacks(
    spans: Spans,
) -> None:
    async with Tester(partitions=2) as tester:
        await tester.processor(graph_with_emit_and_loop(), tracer_provider=spans.provider)
        invoices = await tester.tracker("invoices")
        audits = await tester.tracker("audits")
        headers, upstream = spans.upstream()
        await tester.consume("orders", "alice", "book", headers=headers)

        invoice = await invoices.next_record()
        audit = await audits.next_record()
        assert invoice is not None and audit is not None
        assert tester.table_value("billing-table", "alice") == 1

    [first, second] = sorted(
        spans.named("process orders") + spans.named("process billing-loop"), key=lambda s: s.start_time or 0
    )
    assert first.name == "process orders" and first.kind is SpanKind.CONSUMER
    assert first.parent is not None and first.parent.span_id == upstream.span_id
    assert first.context.trace_id == upstream.trace_id
    attributes = first.attributes or {}
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == "orders"
    assert attributes["messaging.consumer.group.name"] == "billing"
    assert attributes["messaging.system"] == "inmem"
    assert attributes["messaging.message.body.size"] == len(b"book")

    # the emit carries the process span's context: the invoice joins the order's trace
    carried = trace_of(invoice.attributes)
    assert carried.trace_id == upstream.trace_id and carried.span_id == first.context.span_id
    # the loopback did too, so the loop callback's span is the order's span's child ...
    assert second.name == "process billing-loop"
    assert second.parent is not None and second.parent.span_id == first.context.span_id
    # ... and what the loop callback emits continues the same trace; the call's headers stay
    assert trace_of(audit.attributes).span_id == second.context.span_id
    assert audit.attributes["kind"] == "audit"
    assert "tenant" not in invoice.attributes  # input headers are not copied, only the trace


async def test_a_real_processor_continues_the_trace_of_each_input(spans: Spans) -> None:
    backend = inmem_backend()
    async with backend:
        log = backend.log()
        await log.create_topic("orders", 2)

        async def order(ctx: Context, value: Any) -> None:  # async: partitions run concurrently
            await asyncio.sleep(0)
            ctx.emit("invoices", ctx.key, value)

        graph = define_group("billing", input("orders", "str", order), output("invoices", "str"))
        traces = {}
        async with Processor(log, graph, tracer_provider=spans.provider, poll_timeout=0.02):
            for n in range(6):
                headers, upstream = spans.upstream()
                traces[f"order {n}"] = upstream.trace_id
                await log.produce(
                    "orders", f"order {n}".encode(), key=f"k{n}", partition=n % 2, attributes=headers
                )
            reader = log.reader()
            reader.assign({TopicPartition("invoices", p): 0 for p in range(2)})
            got: list[Record] = []
            async with asyncio.timeout(5):
                while len(got) < 6:
                    got += await reader.poll(10, timeout=0.1)
            await reader.close()
    for record in got:
        assert record.value is not None
        assert trace_of(record.attributes).trace_id == traces[record.value.decode()]
    processed = spans.named("process orders")
    assert len(processed) == 6
    assert {s.context.trace_id for s in processed} == set(traces.values())


async def test_without_a_tracer_provider_nothing_changes(spans: Spans) -> None:
    seen: list[Any] = []

    def order(ctx: Context, value: Any) -> None:
        seen.append(ctx._trace)
        ctx.emit("invoices", ctx.key, value)

    graph = define_group("billing", input("orders", "str", order), output("invoices", "str"))
    async with Tester() as tester:
        proc = await tester.processor(graph)
        assert proc._tracing is None
        invoices = await tester.tracker("invoices")
        headers, _ = spans.upstream()
        await tester.consume("orders", "alice", "book", headers=headers)
        invoice = await invoices.next_record()
    assert invoice is not None and not invoice.attributes
    assert seen == [None]
    assert spans.named("process orders") == []


async def test_a_failing_callback_ends_its_span_as_an_error(spans: Spans) -> None:
    def order(ctx: Context, value: Any) -> None:
        raise ValueError("no stock")

    graph = define_group("billing", input("orders", "str", order))
    async with Tester() as tester:
        await tester.processor(graph, tracer_provider=spans.provider)
        with pytest.raises(ProcessorError):
            await tester.consume("orders", "alice", "book")
    [span] = spans.named("process orders")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "ValueError"
    assert span.parent is None  # no trace context in the input: a new trace


async def test_a_caught_misuse_still_marks_the_span(spans: Spans) -> None:
    def order(ctx: Context, value: Any) -> None:
        try:
            ctx.emit("nowhere", ctx.key, value)
        except Exception:
            pass

    graph = define_group("billing", input("orders", "str", order))
    async with Tester() as tester:
        await tester.processor(graph, tracer_provider=spans.provider)
        with pytest.raises(ProcessorError):
            await tester.consume("orders", "alice", "book")
    [span] = spans.named("process orders")
    assert span.status.status_code is StatusCode.ERROR


async def test_the_callbacks_span_is_current_and_an_explicit_propagator_is_used(spans: Spans) -> None:
    current: list[Any] = []

    def order(ctx: Context, value: Any) -> None:
        current.append(trace.get_current_span().get_span_context())
        ctx.emit("invoices", ctx.key, value)

    graph = define_group("billing", input("orders", "str", order), output("invoices", "str"))
    options = ProcessorOptions(tracer_provider=spans.provider, propagator=TraceContextTextMapPropagator())
    async with Tester() as tester:
        await tester.processor(graph, options)
        invoices = await tester.tracker("invoices")
        headers, _ = spans.upstream()
        await tester.consume("orders", "alice", "book", headers=headers)
        invoice = await invoices.next_record()
    [span] = spans.named("process orders")
    assert current == [span.context]
    assert invoice is not None and set(invoice.attributes) == {"traceparent"}
    assert trace.get_current_span().get_span_context().is_valid is False  # detached afterwards


async def test_an_emitter_with_a_tracer_provider_makes_publish_spans(spans: Spans) -> None:
    async with Tester() as tester:
        tracker = await tester.tracker("clicks")
        emitter = Emitter(tester.log, "clicks", "str", tracer_provider=spans.provider, headers={"app": "web"})
        async with emitter:
            with spans.tracer.start_as_current_span("request") as request:
                await emitter.emit_sync("alice", "click")
            await emitter.emit_sync(
                "bob", "click", headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
            )
        alice = await tracker.next_record()
        bob = await tracker.next_record()
    [first, second] = spans.named("publish clicks")
    assert first.kind is SpanKind.PRODUCER and first.end_time is not None
    assert first.parent is not None and first.parent.span_id == request.get_span_context().span_id
    assert alice is not None and alice.attributes["app"] == "web"
    assert trace_of(alice.attributes).span_id == first.context.span_id
    assert bob is not None and trace_of(bob.attributes).trace_id == int("1" * 32, 16)  # the call's wins
    assert second.parent is None


async def test_a_plain_emitter_adds_no_headers(spans: Spans) -> None:
    async with Tester() as tester:
        tracker = await tester.tracker("clicks")
        async with Emitter(tester.log, "clicks", "str") as emitter:
            with spans.tracer.start_as_current_span("request"):
                await emitter.emit_sync("alice", "click")
        record = await tracker.next_record()
    assert record is not None and not record.attributes
