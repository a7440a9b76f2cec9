"""An order service as a ``broker.App``: the application that ``examples/test_order_service.py`` tests.

It takes orders (JSON, validated by a pydantic model) from ``orders`` through subscription
``shipping`` and publishes a shipment (typed JSON) to ``shipments`` for each. A handler that fails
is retried with exponential backoff (1 s, 2 s, 4 s); after four attempts, or at once for an order
that does not decode, the order goes to ``orders-dead`` with ``x-dead-letter-*`` attributes saying
why. Everything else (decoding, acking on return, nacking on an exception, draining on SIGTERM)
is the app's.

Run the demo on the in-memory broker: ``python examples/order_service.py``; serve on a real broker with
``POLYBROKER_URL=nats://127.0.0.1:4222 python examples/order_service.py serve``.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pydantic

import broker
from broker import Backoff, DeadLetterTopic, RetryPolicy

__all__ = ["Order", "OutOfStock", "Shipment", "app", "stock"]


class Order(pydantic.BaseModel):
    """An order as the shop publishes it."""

    id: int
    item: str
    quantity: int = pydantic.Field(gt=0)


class Shipment(pydantic.BaseModel):
    """What the warehouse is told to ship."""

    order: int
    item: str
    quantity: int


class OutOfStock(Exception):
    """The item is not in stock (yet): the order is retried later."""


#: Items in stock, by name (the warehouse's database in a real service).
stock: dict[str, int] = {"book": 10, "pen": 100}

app = broker.App(os.environ.get("POLYBROKER_URL", "inmem://orders-demo"))


@app.subscriber(
    "orders",
    "shipping",
    concurrency=8,
    retry=RetryPolicy(
        max_attempts=4,
        backoff=Backoff(initial=1.0, maximum=4.0),
        dead_letter=DeadLetterTopic("orders-dead"),
    ),
    publish_to="shipments",
)
async def ship(order: Order) -> Shipment:
    """Reserve the items and ship them; an item out of stock raises (retried, then dead-lettered)."""
    left = stock.get(order.item, 0)
    if left < order.quantity:
        raise OutOfStock(f"{order.quantity} x {order.item} wanted, {left} in stock")
    stock[order.item] = left - order.quantity
    return Shipment(order=order.id, item=order.item, quantity=order.quantity)


async def demo() -> None:
    """Three orders on the in-memory broker: one shipped, one undecodable, one never in stock."""
    from broker.testing import virtual_time

    shipped: list[str] = []
    with virtual_time():  # the demo's retries (1 + 2 + 4 s) pass at once
        async with app.lifespan() as running:
            backend = running.backend()
            async with (
                backend.messages("shipments", "print") as shipments,
                backend.messages("orders-dead", "print") as dead,
            ):
                orders = running.publisher().topic("orders")
                await orders.publish(broker.OutboundMessage(b'{"id": 1, "item": "book", "quantity": 2}'))
                await orders.publish(broker.OutboundMessage(b'{"id": 2, "item": "book", "quantity": 0}'))
                await orders.publish(broker.OutboundMessage(b'{"id": 3, "item": "lamp", "quantity": 1}'))
                sent = await shipments.next_message(timeout=60)
                await sent.ack()
                shipped.append(Shipment.model_validate_json(sent.data).item)
                reasons = []
                for _ in range(2):
                    letter = await dead.next_message(timeout=60)
                    await letter.ack()
                    reasons.append(letter.attributes["x-dead-letter-reason"])
    print(f"shipped: {shipped}; books left: {stock['book']}")
    print(f"dead-lettered: {sorted(reasons)}")


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        sys.exit(asyncio.run(app.run()))
    asyncio.run(demo())
