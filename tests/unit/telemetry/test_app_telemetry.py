"""``broker.App(telemetry=...)``: every subscriber's handler runs in a ``process`` span continuing the
publisher's trace, its auto-ack is a settle span under it, and the app's publishes are traced and
counted; bad options are a ``ConfigError`` when the app is made."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

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


def _app(otel: Otel, name: str) -> App:
    return App(
        f"inmem://{name}-{uuid.uuid4().hex}",
        telemetry={"tracer_provider": otel.tracer_provider, "meter_provider": otel.meter_provider},
    )


async def _until(condition: Any) -> None:
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 - polls the exporter
            await asyncio.sleep(0.005)


async def test_a_records_subscriber_runs_each_record_in_its_publishers_trace(otel: Otel) -> None:
    app = _app(otel, "app-records")
    seen: list[tuple[str | None, int]] = []  # (key, trace id current inside the handler)

    @app.records("events", "projector")
    async def project(value: bytes, record: broker.Record) -> None:
        seen.append((record.key, trace.get_current_span().get_span_context().trace_id))

    async with app.lifespan(ping_timeout=None):
        topic = app.publisher().topic("events")
        for key in ("a", "b", "c"):
            await topic.publish(broker.OutboundMessage(b"x", key))
        await _until(lambda: len(seen) == 3 and otel.value("polybroker.messages.acked", destination="events"))

    published = {s.context.trace_id for s in otel.named("publish events")}
    assert len(published) == 3 and {trace_id for _, trace_id in seen} == published
    processed = otel.named("process events")
    assert len(processed) == 3 and all(s.end_time is not None for s in processed)
    assert otel.value("polybroker.messages.received", destination="events", subscription="projector") == 3
    assert otel.value("polybroker.handler.duration", destination="events", outcome="ok") == 3


async def test_a_batch_subscriber_runs_in_one_span_linked_to_each_message(otel: Otel) -> None:
    app = _app(otel, "app-batch")
    batches: list[list[int]] = []
    current: list[Any] = []  # the span current inside the handler

    @app.subscriber("orders", "billing", batch_size=3, batch_timeout=0.2)
    async def bill(orders: list[Order]) -> None:
        batches.append([o.id for o in orders])
        current.append(trace.get_current_span())

    async with app.lifespan(ping_timeout=None):
        topic = app.publisher().topic("orders")
        for i in range(3):
            await topic.publish(broker.OutboundMessage(f'{{"id": {i}}}'.encode()))
        await _until(lambda: sum(map(len, batches)) == 3 and otel.value("polybroker.messages.acked"))

    assert sorted(i for batch in batches for i in batch) == [0, 1, 2]
    processed = otel.named("process orders")
    assert [s.context.span_id for s in processed] == [s.get_span_context().span_id for s in current]
    linked = {link.context.span_id for span in processed for link in span.links}
    assert linked == {s.context.span_id for s in otel.named("publish orders")}
    assert otel.value("polybroker.handler.duration", destination="orders", outcome="ok") == len(batches)
    assert otel.value("polybroker.messages.acked", destination="orders", subscription="billing") == 3


async def test_each_process_span_ends_with_its_settle_outcome(otel: Otel) -> None:
    app = _app(otel, "app-outcome")
    handled: list[int] = []

    @app.subscriber("orders", "billing", retry=broker.RetryPolicy(dead_letter="native"))
    async def bill(order: Order) -> None:
        handled.append(order.id)

    async with app.lifespan(ping_timeout=None):
        topic = app.publisher().topic("orders")
        await topic.publish(broker.OutboundMessage(b'{"id": 1}'))
        await topic.publish(broker.OutboundMessage(b"not json"))
        await _until(lambda: len(otel.named("process orders")) == 2)

    assert handled == [1]
    outcomes = sorted(s.attributes["polybroker.settle.outcome"] for s in otel.named("process orders"))
    assert outcomes == ["ack", "dead_letter"]
    assert otel.value("polybroker.messages.acked", destination="orders") == 1
    assert otel.value("polybroker.messages.dead_lettered", destination="orders") == 1


async def test_health_names_the_broker_error_that_ended_a_subscriber(otel: Otel) -> None:
    """The App's receivers are the backend's own (telemetry is a stage of the pipeline): a receiver
    that dies with a broker error still leaves it in ``health()`` as the subscriber's last error."""
    from broker.errors import ConnectionFailed

    url = f"inmem://app-health-{uuid.uuid4().hex}"
    app = App(url, telemetry={"tracer_provider": otel.tracer_provider, "meter_provider": otel.meter_provider})

    @app.subscriber("orders", "billing")
    async def bill(order: Order) -> None:
        pass

    async with app.lifespan(ping_timeout=None) as running:
        backend: Any = running.backend()
        await asyncio.sleep(0.05)
        backend.wrapped.faults.drop_connection(ConnectionFailed("connection refused"))
        async with asyncio.timeout(10):
            while backend.health().ready:  # noqa: ASYNC110 - polls the report
                await asyncio.sleep(0.01)
        (entry,) = backend.health().consumers
        assert entry.last_error == "ConnectionFailed: connection refused"
