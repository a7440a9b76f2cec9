"""An order service: the application that ``examples/testing/test_app.py`` tests.

It receives orders (JSON) from the ``orders`` topic and publishes a confirmation (typed, JSON) to
``orders-confirmed`` for each. Production settings are the ones under test: a 30 s ack deadline,
four attempts with exponential backoff (1 s, 2 s, 4 s, ...) before an order that keeps failing is
dead-lettered to ``orders-dead``, a delayed nack while an item is out of stock, publishes retried
on transient errors, and a graceful shutdown that lets running handlers finish for
``drain_timeout`` seconds.

Run it on the in-memory broker: ``python examples/testing/app.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import broker
from broker import retrying_publish, typed
from broker.backoff import Backoff
from broker.errors import DecodeError
from broker.retry import DeadLetterTopic, RetryPolicy

__all__ = ["Confirmation", "OrderService", "Settings"]


@dataclass(frozen=True)
class Confirmation:
    """What the service publishes for each order it handled."""

    order: int
    item: str
    status: str = "confirmed"


@dataclass
class Settings:
    """The service's configuration (production values by default)."""

    orders: str = "orders"
    confirmed: str = "orders-confirmed"
    dead: str = "orders-dead"
    subscription: str = "order-service"
    ack_deadline: float = 30.0
    max_attempts: int = 4
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, multiplier=2.0, maximum=60.0))
    restock_delay: float = 60.0
    drain_timeout: float = 10.0
    #: Seconds the work for one order takes (the warehouse call).
    work: float = 2.0

    @classmethod
    def named(cls, name: Callable[[str], str], **changes: Any) -> Settings:
        """Settings whose topic and subscription names go through ``name`` (unique names in tests)."""
        base = cls()
        return cls(
            orders=name(base.orders),
            confirmed=name(base.confirmed),
            dead=name(base.dead),
            subscription=name(base.subscription),
            **changes,
        )


class OrderService:
    """Confirms orders; see the module."""

    def __init__(self, backend: broker.Backend, settings: Settings | None = None) -> None:
        self.settings = s = settings or Settings()
        self.out_of_stock: set[str] = set()
        publisher = backend.publisher()
        publisher.wrap_send(retrying_publish(max_attempts=5, backoff=Backoff(initial=0.2)))
        self.confirmations = typed.topic(publisher, s.confirmed, Confirmation)
        policy = RetryPolicy(
            max_attempts=s.max_attempts,
            backoff=s.backoff,
            dead_letter=DeadLetterTopic(s.dead),
            non_retryable=(DecodeError,),
        )
        self.receiver = backend.receiver(
            s.orders, s.subscription, concurrency=4, retry=policy, ack_deadline=s.ack_deadline
        )

    async def handle(self, message: broker.Message) -> None:
        """Handle one order: confirm it, or nack it for later while its item is out of stock."""
        try:
            order = json.loads(message.data)
            number, item, quantity = int(order["id"]), str(order["item"]), int(order["quantity"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DecodeError(f"not an order: {message.data[:80]!r}") from exc
        if quantity <= 0:
            raise ValueError(f"order {number}: quantity must be positive")
        if item in self.out_of_stock:
            await message.nack(delay=self.settings.restock_delay)
            return
        await asyncio.sleep(self.settings.work)
        await self.confirmations.publish(Confirmation(number, item), key=str(number))
        await message.ack()

    async def run(self) -> None:
        """Handle orders until :meth:`stop` (or cancellation)."""
        await self.receiver.receive(self.handle)

    def stop(self, drain_timeout: float | None = None) -> None:
        """Stop taking orders; running handlers get ``drain_timeout`` seconds (default: the setting's)."""
        self.receiver.stop(self.settings.drain_timeout if drain_timeout is None else drain_timeout)


async def main() -> None:
    """Confirm one order on the in-memory broker."""
    async with broker.connect("inmem://orders-demo") as backend:
        service = OrderService(backend, Settings(work=0.1))
        running = asyncio.create_task(service.run())
        order = {"id": 1, "item": "book", "quantity": 2}
        await backend.publisher().topic("orders").publish(broker.OutboundMessage(json.dumps(order).encode()))
        async with backend.messages("orders-confirmed", "demo") as confirmations:
            message = await confirmations.next_message(timeout=5)
            print("confirmed:", message.data.decode())
            await message.ack()
        service.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main())
