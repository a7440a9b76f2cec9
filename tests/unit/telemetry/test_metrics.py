"""Outcomes are counted with bounded labels; the Prometheus exposition is served over HTTP."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid

import broker
from broker import Backoff, Message, OutboundMessage, RetryPolicy, ack_all
from broker.telemetry import METRICS, InstrumentedBackend, PrometheusMetrics, instrument
from tests.unit.telemetry.conftest import Otel

LABELS = {"system": "inmem", "destination": "jobs"}


async def test_ack_nack_dead_letter_and_redelivery_are_counted(
    backend: InstrumentedBackend, otel: Otel
) -> None:
    topic = backend.publisher().topic("jobs")
    await topic.batch_publish(*(OutboundMessage(b"job %d" % i, key=f"key-{i}") for i in range(3)))
    async with backend.messages("jobs", "workers", max_attempts=5) as jobs:
        first, second, third = [await jobs.next_message(timeout=5) for _ in range(3)]
        assert otel.value("polybroker.messages.in_flight", subscription="workers") == 3
        await first.ack()
        await first.ack()  # a no-op: counted once
        await second.nack()
        await third.dead_letter("poison")
        again = await jobs.next_message(timeout=5)
        assert again.delivery_attempt == 2
        await again.ack()
    sub = {**LABELS, "subscription": "workers"}
    assert otel.value("polybroker.messages.published", **LABELS, outcome="ok") == 3
    assert otel.value("polybroker.messages.received", **sub) == 4
    assert otel.value("polybroker.messages.acked", **sub) == 2
    assert otel.value("polybroker.messages.nacked", **sub) == 1
    assert otel.value("polybroker.messages.dead_lettered", **sub) == 1
    assert otel.value("polybroker.messages.redelivered", **sub) == 1
    assert otel.value("polybroker.messages.in_flight", **sub) == 0
    assert [s.name for s in otel.spans() if s.name.startswith(("ack", "nack", "dead_letter"))] == [
        "ack jobs",
        "nack jobs",
        "dead_letter jobs",
        "ack jobs",
    ]


async def test_handler_failure_is_timed_as_an_error_and_its_message_nacked(
    backend: InstrumentedBackend, otel: Otel
) -> None:
    calls: list[int | None] = []
    done = asyncio.Event()

    async def handler(message: Message) -> None:
        calls.append(message.delivery_attempt)
        if message.delivery_attempt == 1:
            raise ValueError("first delivery fails")
        await message.ack()
        done.set()

    task = asyncio.create_task(backend.receiver("jobs", "flaky", nack_delay=0.01).receive(handler))
    try:
        await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
        await asyncio.wait_for(done.wait(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    sub = {**LABELS, "subscription": "flaky"}
    assert calls == [1, 2]
    assert otel.value("polybroker.handler.duration", **sub, outcome="error") == 1
    assert otel.value("polybroker.handler.duration", **sub, outcome="ok") == 1
    assert otel.value("polybroker.messages.nacked", **sub) == 1  # by the receiver, after the failure
    assert otel.value("polybroker.messages.acked", **sub) == 1
    assert otel.value("polybroker.messages.redelivered", **sub) == 1
    assert otel.value("polybroker.messages.in_flight", **sub) == 0
    failed = [s for s in otel.named("process jobs") if not s.status.is_ok]
    assert len(failed) == 1 and failed[0].events[0].name == "exception"


async def test_retry_in_place_counts_one_reception_and_dead_letters(
    backend: InstrumentedBackend, otel: Otel
) -> None:
    attempts = 0

    async def always_fails(message: Message) -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError("poison")

    policy = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.0, maximum=0.0), mode="ordered")
    task = asyncio.create_task(backend.receiver("jobs", "strict", retry=policy).receive(always_fails))
    try:
        await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
        async with asyncio.timeout(5):
            while otel.value("polybroker.messages.dead_lettered", subscription="strict") != 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert attempts == 3
    assert otel.value("polybroker.messages.received", subscription="strict") == 1
    assert otel.value("polybroker.handler.duration", subscription="strict", outcome="error") == 3
    assert otel.value("polybroker.messages.in_flight", subscription="strict") == 0


async def test_bulk_ack_goes_through_the_backend_and_is_counted(
    backend: InstrumentedBackend, otel: Otel
) -> None:
    await backend.publisher().topic("jobs").batch_publish(*(OutboundMessage(b"%d" % i) for i in range(5)))
    async with backend.batched_messages(
        "jobs", "bulk", batch_size=10, batch_timeout=0.05, ack_deadline=0.3
    ) as it:
        batch = await it.next_batch(timeout=5)
        assert len(batch) == 5
        await ack_all(batch)
        assert all(m.state == "acked" for m in batch)
        # acked for real with the broker: nothing comes back after the ack deadline
        assert await it.next_batch(timeout=0.6) == []
    assert otel.value("polybroker.messages.acked", subscription="bulk") == 5
    assert otel.value("polybroker.messages.in_flight", subscription="bulk") == 0
    (ack,) = otel.named("ack jobs")
    assert dict(ack.attributes or {})["messaging.batch.message_count"] == 5


async def test_no_label_holds_a_message_id_key_or_attribute(backend: InstrumentedBackend, otel: Otel) -> None:
    topic = backend.publisher().topic("jobs")
    await topic.publish(OutboundMessage(b"payload", key="customer-42", attributes={"tenant": "acme"}))
    async with backend.messages("jobs", "audit") as it:
        message = await it.next_message(timeout=5)
        await message.nack()
        message = await it.next_message(timeout=5)
        await message.ack()
    allowed = {"system", "destination", "subscription", "outcome"}
    points = otel.points()
    assert points
    values = set()
    for _name, labels in points:
        assert {k for k, _ in labels} <= allowed
        values |= {v for _, v in labels}
    assert values <= {"inmem", "jobs", "audit", "ok", "error"}
    assert message.id not in values and "customer-42" not in values
    names = {spec.otel_name for spec in METRICS}
    assert {n for n, _ in points} <= names


async def test_prometheus_scrape_over_http_lists_the_documented_metrics() -> None:
    prometheus = PrometheusMetrics()
    port = prometheus.serve(port=0)
    try:
        plain = broker.connect(f"inmem://prometheus-{uuid.uuid4().hex}")
        async with instrument(plain, prometheus=prometheus, opentelemetry=False) as backend:
            done = asyncio.Event()

            async def handler(message: Message) -> None:
                await message.ack()
                done.set()

            task = asyncio.create_task(backend.receiver("jobs", "scraped").receive(handler))
            await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
            await asyncio.wait_for(done.wait(), 5)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                body: bytes = response.read()
                return body.decode()

        text = await asyncio.to_thread(scrape)
    finally:
        prometheus.close()
    for spec in METRICS:
        assert f"# TYPE {spec.prometheus_name} " in text, spec.prometheus_name
    labels = 'destination="jobs",subscription="scraped",system="inmem"'
    assert 'polybroker_messages_published_total{destination="jobs",outcome="ok",system="inmem"} 1.0' in text
    assert f"polybroker_messages_received_total{{{labels}}} 1.0" in text
    assert f"polybroker_messages_acked_total{{{labels}}} 1.0" in text
    assert f"polybroker_messages_in_flight{{{labels}}} 0.0" in text
    duration = 'destination="jobs",outcome="ok",subscription="scraped",system="inmem"'
    assert f"polybroker_handler_duration_seconds_count{{{duration}}} 1.0" in text
    assert prometheus.exposition().decode().count("polybroker_messages_acked_total{") == 1
    assert 'outcome="scraped"' not in text  # no series with a consumer's labels in the wrong place
