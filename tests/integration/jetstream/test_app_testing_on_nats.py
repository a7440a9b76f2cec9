"""``app.testing(url=...)`` runs the application on a real broker (nats-server here), in real time, with the
recorder and the deliveries of the in-memory kit."""

from __future__ import annotations

import uuid

import pydantic

from broker.app import App
from broker.driver.devserver import ProcessServer


class Order(pydantic.BaseModel):
    id: int
    total: float


async def test_app_testing_runs_the_app_on_the_named_broker(nats_server: ProcessServer) -> None:
    orders, shipments = f"orders-{uuid.uuid4().hex[:8]}", f"shipments-{uuid.uuid4().hex[:8]}"
    app = App("inmem://replaced-by-the-test-url")
    handled: list[int] = []

    @app.subscriber(orders, "billing", publish_to=shipments)
    async def bill(order: Order) -> Order:
        handled.append(order.id)
        return Order(id=order.id, total=order.total * 2)

    async with app.testing(url=nats_server.url) as test:
        assert app.backend().name == "nats"
        await test.publish(orders, Order(id=3, total=1.5), key="c3")
        await test.until(lambda: test.settled(orders) == ["acked"], 30)
    assert handled == [3]
    assert test.recorder.assert_published(shipments, key="c3", count=1).value == Order(id=3, total=3.0)
