"""Telemetry on SQS/SNS against the moto fake: ``messaging.system`` is the semantic conventions' value.

The conventions name Amazon SQS ``aws_sqs`` and Amazon SNS ``aws.sns``. In SNS mode a publish goes to
an SNS topic (``aws.sns``) while the consumer receives from an SQS queue (``aws_sqs``); in queue mode
both sides are SQS.
"""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import broker
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer
from broker.telemetry import instrument
from broker.testing import collect


@pytest.mark.parametrize(("mode", "publish_system"), [("sns", "aws.sns"), ("queue", "aws_sqs")])
async def test_spans_name_the_aws_service_they_talk_to(
    moto_server_fake: ProcessServer, mode: str, publish_system: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    topic = f"traced-{uuid.uuid4().hex[:8]}"
    url = f"{moto_server_fake.url}&wait_time=1&mode={mode}"
    async with instrument(broker.connect(url), tracer_provider=provider, metrics=False) as backend:
        async with backend.messages(topic, "s") as consumer:
            await backend.publisher().topic(topic).publish(OutboundMessage(b"one"))
            (message,) = await collect(consumer, 1, 20.0)
            await message.ack()
    systems = {
        (span.kind, span.name.split(" ", 1)[0]): (span.attributes or {}).get("messaging.system")
        for span in exporter.get_finished_spans()
    }
    assert systems[(SpanKind.PRODUCER, "publish")] == publish_system, systems
    consumer_side = {v for (kind, _), v in systems.items() if kind != SpanKind.PRODUCER}
    assert consumer_side == {"aws_sqs"}, systems
