"""CloudEvents: publish events in binary and structured mode and receive them with typed data.

Runs on the in-memory broker: ``python examples/cloudevents.py``. The same code runs on every
backend; the attribute names follow that broker's CloudEvents binding (``ce_`` headers on Kafka,
``cloudEvents_`` properties on Service Bus, ``ce-`` elsewhere), picked from the backend.
"""

from __future__ import annotations

import asyncio
import dataclasses

import broker
from broker import OutboundMessage, typed
from broker.errors import DecodeError
from broker.typed import cloudevents
from broker.typed.cloudevents import CloudEvent


@dataclasses.dataclass
class OrderPlaced:
    """The data of a ``com.example.order.placed`` event."""

    order: int
    total: float


async def main() -> None:
    """Publish one event per content mode and a message that is no event; receive all three."""
    async with broker.connect("inmem://cloudevents-example") as backend:
        publisher = backend.publisher()
        binary = cloudevents.topic(publisher, "orders", OrderPlaced, protocol=backend)
        structured = cloudevents.topic(publisher, "orders", OrderPlaced, protocol=backend, mode="structured")
        bound = cloudevents.binding(OrderPlaced, protocol=backend)  # reads both modes
        async with typed.messages(backend.messages("orders", "shipping"), bound) as consumer:
            for handle, order in ((binary, 1), (structured, 2)):
                await handle.publish(
                    CloudEvent(
                        "com.example.order.placed",
                        "/shop",
                        OrderPlaced(order, 9.5 * order),
                        subject=f"order-{order}",
                        extensions={"tenant": "acme"},
                    )
                )
            await publisher.topic("orders").publish(OutboundMessage(b'{"order": 3}'))
            for _ in range(3):
                message = await consumer.next_message(timeout=10)
                try:
                    event = message.decoded
                except DecodeError as exc:
                    print(f"not a CloudEvent: {exc}")
                else:
                    structured_mode = typed.content_type(message) == cloudevents.STRUCTURED_CONTENT_TYPE
                    mode = "structured" if structured_mode else "binary"
                    print(
                        f"{mode}: {event.type} {event.subject} tenant={event.extensions['tenant']} "
                        f"data={event.data}"
                    )
                await message.ack()


if __name__ == "__main__":
    asyncio.run(main())
