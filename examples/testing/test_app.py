"""Tests of the order service (app.py) with the polybroker pytest plugin.

On ``inmem://`` (the default) every test runs; the virtual-time ones take no wall time although
the service waits 30 s ack deadlines and seconds of backoff. With ``--polybroker-url kafka://...``
(or ``POLYBROKER_TEST_URL``) the same module runs against that broker: the tests marked
``polybroker_virtual_time`` and those using ``polybroker_faults`` are skipped with the reason, the
others run unchanged on unique topic names.

Run: ``pytest examples/testing`` (pytest-asyncio in auto mode, as this repository configures it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest
from app import Confirmation, OrderService, Settings

import broker
from broker import OutboundMessage
from broker.errors import Throttled
from broker.testing import FaultInjection, PublishRecorder


def order(number: int, item: str = "book", quantity: int = 1) -> OutboundMessage:
    """An order as the shop publishes it."""
    return OutboundMessage(json.dumps({"id": number, "item": item, "quantity": quantity}).encode())


@pytest.fixture
def settings(request: pytest.FixtureRequest, polybroker_name: Callable[[str], str]) -> Settings:
    """Production settings on topic names unique to the test (work shortened in real time)."""
    if request.node.get_closest_marker("polybroker_virtual_time"):
        return Settings.named(polybroker_name)
    return Settings.named(polybroker_name, work=0.05)


@pytest.fixture
async def service(polybroker_backend: broker.Backend, settings: Settings) -> AsyncIterator[OrderService]:
    """The service under test, running; stopped after the test."""
    service = OrderService(polybroker_backend, settings)
    running = asyncio.create_task(service.run())
    yield service
    service.stop(drain_timeout=0)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def publish(backend: broker.Backend, topic: str, *messages: OutboundMessage) -> None:
    """Publish as the shop would (not through the service's publisher)."""
    await backend.publisher().topic(topic).batch_publish(*messages)


async def test_an_order_is_confirmed(
    polybroker_backend: broker.Backend, polybroker_recorder: PublishRecorder, service: OrderService
) -> None:
    s = service.settings
    await publish(polybroker_backend, s.orders, order(7, "lamp"))
    async with polybroker_backend.messages(s.confirmed, s.subscription + "-check") as confirmed:
        message = await confirmed.next_message(timeout=30)
        await message.ack()
    sent = polybroker_recorder.assert_published(s.confirmed, key="7", count=1)
    assert sent.decoded(Confirmation) == Confirmation(7, "lamp")


async def test_a_malformed_order_is_dead_lettered_at_once(
    polybroker_backend: broker.Backend, service: OrderService
) -> None:
    s = service.settings
    await publish(polybroker_backend, s.orders, OutboundMessage(b"not json"))
    async with polybroker_backend.messages(s.dead, s.subscription + "-dead") as dead:
        message = await dead.next_message(timeout=30)
        await message.ack()
    assert message.data == b"not json"


async def test_orders_are_confirmed_in_any_number(
    polybroker_backend: broker.Backend, service: OrderService
) -> None:
    s = service.settings
    await publish(polybroker_backend, s.orders, *(order(n) for n in range(5)))
    seen: set[int] = set()
    async with polybroker_backend.messages(s.confirmed, s.subscription + "-check") as confirmed:
        while len(seen) < 5:
            message = await confirmed.next_message(timeout=30)
            seen.add(json.loads(message.data)["order"])
            await message.ack()
    assert seen == set(range(5))


@pytest.mark.polybroker_virtual_time
async def test_a_poison_order_is_dead_lettered_on_schedule(
    polybroker_backend: broker.Backend, settings: Settings
) -> None:
    loop = asyncio.get_running_loop()
    s = settings
    service = OrderService(polybroker_backend, s)
    calls: list[float] = []
    handle = service.handle

    async def recording(message: broker.Message) -> None:
        calls.append(loop.time())
        await handle(message)

    await publish(polybroker_backend, s.orders, order(1, quantity=0))
    started = loop.time()
    async with polybroker_backend.messages(s.orders, s.subscription, ack_deadline=s.ack_deadline) as crashed:
        await crashed.next_message(timeout=1)  # a worker takes it and dies without settling it
        running = asyncio.create_task(service.receiver.receive(recording))
        async with polybroker_backend.messages(s.dead, "check") as dead:
            message = await dead.next_message(timeout=600)
    service.stop(0)
    await running
    # Delivery 1 died with the worker: delivery 2 comes after the 30 s ack deadline; the handler
    # fails on deliveries 2, 3 and 4, with the backoff after delivery n (1 s * 2 ** (n - 1)) between.
    assert [t - started for t in calls] == pytest.approx([30.0, 32.0, 36.0], abs=0.001)
    assert message.data == order(1, quantity=0).data
    assert loop.time() - started == pytest.approx(36.0, abs=0.001)


@pytest.mark.polybroker_virtual_time
async def test_an_out_of_stock_order_waits_for_the_restock(
    polybroker_backend: broker.Backend, polybroker_recorder: PublishRecorder, service: OrderService
) -> None:
    loop = asyncio.get_running_loop()
    s = service.settings
    service.out_of_stock.add("chair")
    await publish(polybroker_backend, s.orders, order(3, "chair"))
    await asyncio.sleep(1)
    polybroker_recorder.assert_nothing_published(s.confirmed)
    service.out_of_stock.clear()  # restocked; the nacked order is back after restock_delay
    started = loop.time() - 1
    async with polybroker_backend.messages(s.confirmed, "check") as confirmed:
        await confirmed.next_message(timeout=600)
    # Redelivered 60 s after the first delivery, then 2 s of work.
    assert loop.time() - started == pytest.approx(s.restock_delay + s.work, abs=0.001)
    polybroker_recorder.assert_published(s.confirmed, value=Confirmation(3, "chair"))


@pytest.mark.polybroker_virtual_time
async def test_shutdown_lets_running_orders_finish_within_the_drain_timeout(
    polybroker_backend: broker.Backend, polybroker_recorder: PublishRecorder, settings: Settings
) -> None:
    loop = asyncio.get_running_loop()
    service = OrderService(polybroker_backend, settings)
    running = asyncio.create_task(service.run())
    await publish(polybroker_backend, settings.orders, order(1))
    await asyncio.sleep(0.5)  # the order is being worked on (2 s)
    started = loop.time()
    service.stop(drain_timeout=10)
    await running
    assert loop.time() - started == pytest.approx(1.5, abs=0.001)  # it finished, then receive returned
    polybroker_recorder.assert_published(settings.confirmed, key="1", count=1)

    late = OrderService(polybroker_backend, settings)
    running = asyncio.create_task(late.run())
    await publish(polybroker_backend, settings.orders, order(2))
    await asyncio.sleep(0.5)
    started = loop.time()
    late.stop(drain_timeout=1)  # shorter than the work: the order is nacked for redelivery
    await running
    assert loop.time() - started == pytest.approx(1.0, abs=0.001)
    assert not polybroker_recorder.matching(settings.confirmed, key="2")  # not confirmed: redelivered later


@pytest.mark.polybroker_virtual_time
async def test_a_failed_publish_is_retried_by_the_service(
    polybroker_backend: broker.Backend,
    polybroker_recorder: PublishRecorder,
    polybroker_faults: FaultInjection,
    service: OrderService,
) -> None:
    s = service.settings
    polybroker_faults.fail_publishes(2, Throttled, topic=s.confirmed)
    await publish(polybroker_backend, s.orders, order(9))
    async with polybroker_backend.messages(s.confirmed, "check") as confirmed:
        message = await confirmed.next_message(timeout=30)
    assert json.loads(message.data)["order"] == 9
    assert polybroker_faults.injected == 2  # two sends failed, the service's retry sent it on the third
    polybroker_recorder.assert_published(s.confirmed, key="9", count=1)
