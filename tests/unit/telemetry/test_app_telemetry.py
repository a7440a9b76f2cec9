"""``broker.App(telemetry=...)``: every subscriber's handler runs in a ``process`` span continuing the
publisher's trace, its auto-ack is a settle span under it, and the app's publishes are traced and
counted; bad options are a ``ConfigError`` when the app is made."""

from __future__ import annotations

import asyncio
import uuid

import pydantic
import pytest
from opentelemetry import trace

import broker
from broker.app import App
from broker.errors import ConfigError
from tests.unit.telemetry.conftest import Otel


class Order(pydantic.BaseModel):
    id: int


async def test_a_subscriber_runs_in_the_publishers_trace_and_its_ack_is_traced(otel: Otel) -> None:
    url = f"inmem://app-telemetry-{uuid.uuid4().hex}"
    app = App(url, telemetry={"tracer_provider": otel.tracer_provider, "meter_provider": otel.meter_provider})
    seen: list[int] = []  # the trace id current inside the handler
    handled = asyncio.Event()

    @app.subscriber("orders", "billing", publish_to="invoices")
    async def bill(order: Order) -> Order:
        seen.append(trace.get_current_span().get_span_context().trace_id)
        handled.set()
        return order

    async with app.lifespan(ping_timeout=None):
        await app.publisher().topic("orders").publish(broker.OutboundMessage(b'{"id": 7}'))
        async with asyncio.timeout(10):
            await handled.wait()
            while not otel.named("ack orders"):  # noqa: ASYNC110 - polls the exporter
                await asyncio.sleep(0.005)

    (published,) = otel.named("publish orders")
    (processed,) = otel.named("process orders")
    (acked,) = otel.named("ack orders")
    (output,) = otel.named("publish invoices")
    trace_id = published.context.trace_id
    assert seen == [trace_id]
    assert processed.parent is not None and processed.parent.span_id == published.context.span_id
    assert acked.parent is not None and acked.parent.span_id == processed.context.span_id
    assert output.context.trace_id == trace_id  # the handler's result continues the trace
    assert otel.value("polybroker.messages.published", destination="orders", outcome="ok") == 1
    assert otel.value("polybroker.messages.received", destination="orders", subscription="billing") == 1
    assert otel.value("polybroker.messages.acked", destination="orders", subscription="billing") == 1


def test_telemetry_options_are_checked_when_the_app_is_made() -> None:
    with pytest.raises(ConfigError, match="not tracer"):
        App("inmem://x", telemetry={"tracer": None})
    with pytest.raises(ConfigError, match="True, False or a mapping"):
        App("inmem://x", telemetry="yes")  # type: ignore[arg-type]
    assert App("inmem://x").telemetry is None and App("inmem://x", telemetry=True).telemetry == {}
