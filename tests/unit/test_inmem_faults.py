"""Fault injection on inmem:// (backends/inmem/faults.py) and the publish recorder (broker.testing)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker import OutboundMessage
from broker.backends.inmem.faults import Faults, faults_of
from broker.backoff import Backoff
from broker.errors import ConfigError, ConnectionFailed, PublishError, Throttled
from broker.publish_retry import retrying_publish
from broker.testing.recorder import PublishRecorder
from broker.testing.virtual_time import virtual_time


@pytest.fixture
async def backend() -> AsyncIterator[broker.Backend]:
    name = f"faults-{uuid.uuid4().hex}"
    async with broker.connect(f"inmem://{name}") as connected:
        yield connected
    broker.backends.inmem.forget(name)


async def test_the_next_n_publishes_fail_with_the_chosen_error(backend: broker.Backend) -> None:
    faults = faults_of(backend)
    assert faults is faults_of(backend) is backend.faults and isinstance(faults, Faults)  # type: ignore[attr-defined]
    topic = backend.publisher().topic("t")
    faults.fail_publishes(2, Throttled)
    assert faults.active and backend.broker.faults is faults  # type: ignore[attr-defined]
    with pytest.raises(Throttled, match="injected"):
        await topic.publish(OutboundMessage(b"1"))
    with pytest.raises(Throttled):
        await topic.batch_publish(OutboundMessage(b"2"), OutboundMessage(b"3"))  # one call, none published
    await topic.publish(OutboundMessage(b"4"))
    assert faults.injected == 2 and not faults.active
    assert backend.broker.faults is None  # type: ignore[attr-defined]  # the hot path is clean again
    async with backend.messages("t", "s") as consumer:
        assert (await consumer.next_message(timeout=1)).data == b"4"


async def test_a_publish_failure_can_target_one_topic_and_be_an_instance(backend: broker.Backend) -> None:
    faults = faults_of(backend)
    error = PublishError("quota exceeded")
    faults.fail_publishes(1, error, topic="orders")
    publisher = backend.publisher()
    await publisher.topic("other").publish(OutboundMessage(b"x"))
    with pytest.raises(PublishError) as raised:
        await publisher.topic("orders").publish(OutboundMessage(b"y"))
    assert raised.value is error
    with pytest.raises(ConfigError):
        faults.fail_publishes(0)
    with pytest.raises(ConfigError):
        faults.fail_publishes(1, ValueError)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="inmem:// only"):
        faults_of(object())


async def test_an_application_retry_survives_injected_failures_and_the_recorder_sees_each_try(
    backend: broker.Backend,
) -> None:
    publisher = backend.publisher()
    publisher.wrap_send(retrying_publish(max_attempts=5, backoff=Backoff(initial=0.5)))  # type: ignore[attr-defined]
    recorder = PublishRecorder()
    recorder.watch(backend)  # inside the retry: every send attempt
    faults_of(backend).fail_publishes(2, Throttled)
    with virtual_time() as vt:
        await publisher.topic("orders").publish(OutboundMessage(b"order", key="c-1"))
        assert vt.elapsed() == pytest.approx(0.5 + 1.0, abs=1e-3)
    assert [type(e) for _, e in recorder.failed] == [Throttled, Throttled]
    sent = recorder.assert_published("orders", data=b"order", key="c-1", count=1)
    assert sent.text == "order"


async def test_dropping_the_connection_wakes_waiting_consumers(backend: broker.Backend) -> None:
    faults = faults_of(backend)
    topic = backend.publisher().topic("jobs")
    with virtual_time() as vt:
        async with backend.messages("jobs", "w", ack_deadline=10) as consumer:
            await topic.publish(OutboundMessage(b"held"))
            held = await consumer.next_message(timeout=1)
            waiting = asyncio.create_task(consumer.next_message(timeout=60))
            await asyncio.sleep(1)
            faults.drop_connection()
            with pytest.raises(ConnectionFailed, match="dropped"):
                await waiting
            with pytest.raises(ConnectionFailed):
                await topic.publish(OutboundMessage(b"lost"))
            with pytest.raises(ConnectionFailed):
                async for _ in consumer:
                    pass
            faults.reconnect()
            again = await consumer.next_message(timeout=60)  # the lease ran out meanwhile
            assert again.id == held.id and again.delivery_attempt == 2
            assert vt.elapsed() == pytest.approx(10, abs=0.01)
            await again.ack()
    assert not faults.active


async def test_a_slow_consumer_gets_each_delivery_late(backend: broker.Backend) -> None:
    faults = faults_of(backend)
    faults.slow_consumer("slow", delay=5)
    await backend.publisher().topic("t").batch_publish(OutboundMessage(b"a"), OutboundMessage(b"b"))
    with virtual_time() as vt:
        async with backend.messages("t", "fast") as fast, backend.messages("t", "slow") as slow:
            await fast.next_message(timeout=1)
            assert vt.elapsed() == 0
            await slow.next_message(timeout=1)
            await slow.next_message(timeout=1)
            assert vt.elapsed() == pytest.approx(10, abs=1e-6)
    faults.slow_consumer("slow", delay=0)
    assert not faults.active
    with pytest.raises(ConfigError):
        faults.slow_consumer(delay=-1)


async def test_clear_removes_every_fault(backend: broker.Backend) -> None:
    faults = faults_of(backend)
    faults.fail_publishes(3)
    faults.slow_consumer(delay=1)
    faults.drop_connection()
    assert "dropped" in repr(faults)
    faults.clear()
    assert not faults.active and backend.broker.faults is None  # type: ignore[attr-defined]
    await backend.publisher().topic("t").publish(OutboundMessage(b"ok"))


@dataclasses.dataclass
class Order:
    id: int
    total: float


async def test_the_recorder_decodes_typed_publishes(backend: broker.Backend) -> None:
    from broker import typed

    recorder = PublishRecorder()
    publisher = backend.publisher()
    recorder.attach(publisher)
    orders = typed.topic(publisher, "orders", Order)
    await orders.publish(Order(1, 9.5), key="c-7")
    sent = recorder.assert_published("orders", key="c-7", value=Order(1, 9.5))
    assert sent.content_type is not None and sent.decoded(Order) == Order(1, 9.5)
    assert recorder.values("orders", Order) == [Order(1, 9.5)]
    assert recorder.topics() == ["orders"] and len(recorder) == 1
    recorder.clear()
    recorder.assert_nothing_published()
    with pytest.raises(TypeError):
        recorder.attach(object())


@dataclasses.dataclass
class Shipped:
    """A value the recorder tests publish through a typed topic handle."""

    order: int
    carrier: str


async def test_the_recorder_decodes_typed_publishes_with_their_own_binding(backend: broker.Backend) -> None:
    from broker import typed
    from broker.errors import NotSupported

    recorder = PublishRecorder()
    recorder.watch(backend)
    publisher = backend.publisher()
    shipped = typed.topic(publisher, "shipped", Shipped)
    await shipped.publish(Shipped(7, "ups"), key="o-7")
    await shipped.batch_publish(Shipped(8, "dhl"), Shipped(9, "ups"))
    await publisher.topic("raw").publish(OutboundMessage(b'{"order": 1, "carrier": "x"}'))

    assert recorder.values("shipped") == [Shipped(7, "ups"), Shipped(8, "dhl"), Shipped(9, "ups")]
    assert recorder.assert_published("shipped", value=Shipped(8, "dhl"), count=1).typed
    assert recorder.matching("shipped", value=Shipped(9, "fedex")) == []
    raw = recorder.assert_published("raw")
    assert not raw.typed
    with pytest.raises(NotSupported, match="decoded"):
        _ = raw.value
    assert raw.decoded(Shipped) == Shipped(1, "x")  # untyped payloads still decode with a type given


async def test_record_consumers_see_a_dropped_connection_and_a_slow_consumer(backend: broker.Backend) -> None:
    faults = faults_of(backend)
    topic = backend.publisher().topic("ledger")
    with virtual_time() as vt:
        async with backend.records("ledger", group="books", batch_size=1) as records:
            await topic.publish(OutboundMessage(b"r1"))
            assert (await records.next_record(timeout=5)).value == b"r1"
            waiting = asyncio.create_task(records.next_record(timeout=60))
            await asyncio.sleep(1)
            faults.drop_connection()
            with pytest.raises(ConnectionFailed, match="dropped"):
                await waiting
            faults.reconnect()
            faults.slow_consumer("books", delay=7.0)
            await topic.publish(OutboundMessage(b"r2"))
            start = vt.elapsed()
            assert (await records.next_record(timeout=60)).value == b"r2"  # nothing lost to the drop
            assert vt.elapsed() - start == pytest.approx(7.0, abs=1e-3)
            faults.clear()
            await topic.publish(OutboundMessage(b"r3"))
            assert (await records.next_record(timeout=5)).value == b"r3"
