"""Trace context crosses publish -> handler -> publish -> handler; spans follow the conventions."""

from __future__ import annotations

import asyncio
import itertools

from opentelemetry.trace import SpanKind

from broker import Message, OutboundMessage, ack_all
from broker.telemetry import InstrumentedBackend
from tests.unit.telemetry.conftest import Otel


async def _until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - polls the exporter
            await asyncio.sleep(0.005)


async def test_one_trace_crosses_two_hops_of_handlers(backend: InstrumentedBackend, otel: Otel) -> None:
    publisher = backend.publisher()
    seen: dict[str, Message] = {}
    done = asyncio.Event()

    async def billing(message: Message) -> None:
        seen["orders"] = message
        await publisher.topic("invoices").publish(OutboundMessage(b"invoice for " + message.data))
        await message.ack()

    async def mailing(message: Message) -> None:
        seen["invoices"] = message
        await message.ack()
        done.set()

    tasks = [
        asyncio.create_task(backend.receiver("orders", "billing").receive(billing)),
        asyncio.create_task(backend.receiver("invoices", "mailing").receive(mailing)),
    ]
    try:
        await publisher.topic("orders").publish(OutboundMessage(b"order 1", key="k1"))
        await asyncio.wait_for(done.wait(), 5)
        await _until(lambda: len(otel.named("ack invoices")) == 1)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    (pub_orders,) = otel.named("publish orders")
    (proc_orders,) = otel.named("process orders")
    (pub_invoices,) = otel.named("publish invoices")
    (proc_invoices,) = otel.named("process invoices")
    (ack_orders,) = otel.named("ack orders")
    (ack_invoices,) = otel.named("ack invoices")
    chain = [pub_orders, proc_orders, pub_invoices, proc_invoices]
    assert len({s.context.trace_id for s in [*chain, ack_orders, ack_invoices]}) == 1
    assert pub_orders.parent is None
    for parent, child in itertools.pairwise(chain):
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
    assert ack_orders.parent is not None and ack_orders.parent.span_id == proc_orders.context.span_id
    assert [s.kind for s in chain] == [SpanKind.PRODUCER, SpanKind.CONSUMER] * 2
    assert ack_orders.kind == SpanKind.CLIENT

    assert pub_orders.attributes is not None and dict(pub_orders.attributes) == {
        "messaging.system": "inmem",
        "messaging.destination.name": "orders",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.message.body.size": 7,
    }
    attrs = dict(proc_orders.attributes or {})
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.destination.name"] == "orders"
    assert attrs["messaging.consumer.group.name"] == "billing"
    assert attrs["messaging.message.id"] == seen["orders"].id
    assert attrs["polybroker.message.delivery_attempt"] == 1
    assert dict(ack_orders.attributes or {})["messaging.operation.type"] == "settle"
    # the context travelled in the message attributes, as W3C trace context
    traceparent = seen["invoices"].attributes["traceparent"]
    assert traceparent.split("-")[1] == format(pub_invoices.context.trace_id, "032x")
    assert traceparent.split("-")[2] == format(pub_invoices.context.span_id, "016x")


async def test_trace_context_survives_batch_publish(backend: InstrumentedBackend, otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("app")
    topic = backend.publisher().topic("batch")
    async with (
        backend.messages("batch", "one-by-one") as single,
        backend.batched_messages("batch", "in-batches", batch_size=10, batch_timeout=0.05) as batched,
    ):
        with tracer.start_as_current_span("request") as request:
            await topic.batch_publish(
                *(OutboundMessage(b"m%d" % i, attributes={"n": str(i)}) for i in range(3))
            )
        received = [await single.next_message(timeout=5) for _ in range(3)]
        assert [m.attributes["n"] for m in received] == ["0", "1", "2"]  # user attributes kept
        batch = await batched.next_batch(timeout=5)
        assert len(batch) == 3
        await ack_all([*received, *batch])

    (publish,) = otel.named("publish batch")
    assert publish.parent is not None and publish.parent.span_id == request.get_span_context().span_id
    assert dict(publish.attributes or {})["messaging.batch.message_count"] == 3
    processes = otel.named("process batch")
    singles = [s for s in processes if "messaging.batch.message_count" not in (s.attributes or {})]
    (in_batch,) = [s for s in processes if "messaging.batch.message_count" in (s.attributes or {})]
    assert len(singles) == 3
    for span in singles:
        assert span.parent is not None and span.parent.span_id == publish.context.span_id
        assert span.context.trace_id == request.get_span_context().trace_id
    # a batch's process span links to each message's creation context
    assert [link.context.span_id for link in in_batch.links] == [publish.context.span_id] * 3
    assert dict(in_batch.attributes or {})["messaging.batch.message_count"] == 3


async def test_iterator_makes_the_process_span_current_until_the_next_pull(
    backend: InstrumentedBackend, otel: Otel
) -> None:
    publisher = backend.publisher()
    await publisher.topic("in").batch_publish(OutboundMessage(b"1"), OutboundMessage(b"2"))
    async with backend.messages("in", "s") as iterator:
        count = 0
        async for message in iterator:
            await publisher.topic("out").publish(OutboundMessage(message.data))
            await message.ack()
            count += 1
            if count == 2:
                break
    processes = otel.named("process in")
    outs = otel.named("publish out")
    assert len(processes) == 2 and len(outs) == 2  # the last one ended when the iterator closed
    for process, out in zip(processes, outs, strict=True):
        assert out.parent is not None and out.parent.span_id == process.context.span_id


async def test_records_carry_partition_and_offset(otel: Otel) -> None:
    import uuid

    import broker
    from broker.telemetry import instrument

    plain = broker.connect(f"inmem://records-{uuid.uuid4().hex}?partitions=2")
    async with instrument(
        plain, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
    ) as backend:
        await backend.publisher().topic("log").publish(OutboundMessage(b"r", key="a"))
        async with backend.records("log", "readers", start="earliest") as records:
            record = await records.next_record(timeout=5)
            await record.ack()
    (publish,) = otel.named("publish log")
    (process,) = otel.named("process log")
    (ack,) = otel.named("ack log")
    attrs = dict(process.attributes or {})
    assert attrs["messaging.destination.partition.id"] == str(record.partition)
    assert attrs["polybroker.record.offset"] == record.offset
    assert attrs["messaging.consumer.group.name"] == "readers"
    assert process.parent is not None and process.parent.span_id == publish.context.span_id
    assert ack.parent is not None and ack.parent.span_id == process.context.span_id
    assert otel.value("polybroker.messages.acked", destination="log", subscription="readers") == 1
    assert otel.value("polybroker.messages.received", destination="log", subscription="readers") == 1


async def test_failed_send_ends_its_span_with_an_error(backend: InstrumentedBackend, otel: Otel) -> None:
    from opentelemetry.trace import StatusCode

    from broker.driver.publishing import DriverPublisher, Send
    from broker.errors import PublishError

    publisher = backend.publisher()
    assert isinstance(publisher, DriverPublisher)

    async def broken_wire(topic: str, messages: object, send: Send) -> None:
        raise PublishError("the broker said no")

    publisher.wrap_send(broken_wire)  # inside the telemetry middleware, where the driver would fail
    try:
        await publisher.topic("t").batch_publish(OutboundMessage(b"x"), OutboundMessage(b"y"))
    except PublishError:
        pass
    else:
        raise AssertionError("the publish should have failed")
    (span,) = otel.named("publish t")
    assert span.status.status_code == StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "PublishError"
    assert otel.value("polybroker.messages.published", destination="t", outcome="error") == 2
    assert otel.value("polybroker.messages.published", destination="t", outcome="ok") is None


async def test_settle_spans_can_be_left_out_and_are_still_counted(otel: Otel) -> None:
    import uuid

    import broker
    from broker.telemetry import instrument

    plain = broker.connect(f"inmem://quiet-{uuid.uuid4().hex}")
    async with instrument(
        plain, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, settle_spans=False
    ) as backend:
        await backend.publisher().topic("q").publish(OutboundMessage(b"x"))
        async with backend.messages("q", "s") as it:
            await (await it.next_message(timeout=5)).ack()
    assert sorted(s.name for s in otel.spans()) == ["process q", "publish q"]
    assert otel.value("polybroker.messages.acked", subscription="s") == 1
