"""One trace across three brokers: inmem -> handler -> Kafka -> handler -> JetStream.

The W3C trace context written into the message attributes by ``broker.telemetry`` survives each
backend's mapping (inmem attributes, Kafka headers, NATS headers), so the spans of every hop
join one trace. Uses the servers of the Kafka and JetStream suites (Tansu, nats-server).
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import broker
from broker import Message, OutboundMessage
from broker.driver.devserver import ProcessServer
from broker.telemetry import instrument
from tests.integration.jetstream.server import running_nats_server
from tests.integration.kafka.support import TEST_QUERY, tansu, unique


@pytest.fixture(scope="module")
def kafka_server() -> Iterator[ProcessServer]:
    with tansu() as server:
        yield server


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


async def test_one_trace_crosses_inmem_kafka_and_jetstream(
    kafka_server: ProcessServer, nats_server: ProcessServer
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    orders, invoices, mails = unique("orders"), unique("invoices"), unique("mails")

    def traced(url: str) -> broker.Backend:
        return instrument(broker.connect(url), tracer_provider=provider, metrics=False)

    async with (
        traced(f"inmem://trace-{uuid.uuid4().hex}") as inmem,
        traced(f"{kafka_server.url}?{TEST_QUERY}") as kafka,
        traced(nats_server.url) as nats,
    ):
        await kafka.admin.create_topic(invoices, 1)  # not instrumented: reached through the wrapper
        to_kafka = kafka.publisher().topic(invoices)
        to_nats = nats.publisher().topic(mails)
        async with nats.messages(mails, "mailer") as mailbox:

            async def bill(message: Message) -> None:  # inmem handler -> Kafka
                await to_kafka.publish(OutboundMessage(b"invoice:" + message.data, key="customer"))
                await message.ack()

            billing = asyncio.create_task(inmem.receiver(orders, "billing").receive(bill))
            try:
                await inmem.publisher().topic(orders).publish(OutboundMessage(b"order-1"))
                async with kafka.records(invoices, unique("invoicing")) as records:
                    record = await records.next_record(timeout=30)  # Kafka "handler" -> JetStream
                    await to_nats.publish(OutboundMessage(b"mail:" + (record.value or b"")))
                    await record.ack()
                mail = await mailbox.next_message(timeout=30)
                await mail.ack()
            finally:
                billing.cancel()
                await asyncio.gather(billing, return_exceptions=True)
    assert mail.data == b"mail:invoice:order-1"

    spans = {span.name: span for span in exporter.get_finished_spans()}
    chain = [
        spans[f"publish {orders}"],
        spans[f"process {orders}"],
        spans[f"publish {invoices}"],
        spans[f"process {invoices}"],
        spans[f"publish {mails}"],
        spans[f"process {mails}"],
    ]
    assert len({span.context.trace_id for span in chain}) == 1
    for parent, child in itertools.pairwise(chain):
        assert child.parent is not None and child.parent.span_id == parent.context.span_id, child.name
    assert [s.kind for s in chain] == [SpanKind.PRODUCER, SpanKind.CONSUMER] * 3
    systems = [dict(s.attributes or {})["messaging.system"] for s in chain]
    assert systems == ["inmem", "inmem", "kafka", "kafka", "nats", "nats"]
    kafka_process = dict(chain[3].attributes or {})
    assert kafka_process["messaging.destination.partition.id"] == "0"
    assert kafka_process["messaging.kafka.offset"] == record.offset
    for settle in (f"ack {orders}", f"ack {invoices}", f"ack {mails}"):
        assert spans[settle].context.trace_id == chain[0].context.trace_id
    provider.shutdown()
