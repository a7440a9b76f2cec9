"""Typed messages: publish and receive application types, with an undecodable payload dead-lettered.

Runs on the in-memory broker: ``python examples/typed.py``. Needs pydantic (``pip install
'polybroker[pydantic]'``).
"""

from __future__ import annotations

import asyncio
from typing import Literal

import pydantic

import broker
from broker import OutboundMessage, typed
from broker.retry import ATTR_REASON, DeadLetterTopic, RetryPolicy


class Card(pydantic.BaseModel):
    """Paid by card."""

    method: Literal["card"] = "card"
    last4: str


class Transfer(pydantic.BaseModel):
    """Paid by bank transfer."""

    method: Literal["transfer"] = "transfer"
    iban: str


class Payment(pydantic.BaseModel):
    """A payment; ``source`` is a discriminated union on ``method``."""

    id: int
    amount: float
    source: Card | Transfer = pydantic.Field(discriminator="method")


async def main() -> None:
    """Publish two payments and a bad payload; handle the payments, dead-letter the bad one."""
    async with broker.connect("inmem://typed-example") as backend:
        payments = typed.topic(backend.publisher(), "payments", Payment)
        policy = RetryPolicy(dead_letter=DeadLetterTopic("payments-dlq"))
        receiver = typed.receiver(backend.receiver("payments", "billing", retry=policy), Payment)
        handled: list[str] = []

        async def handle(message: typed.TypedMessage[Payment]) -> None:
            payment = message.decoded  # a Payment; DecodeError if the payload is not one
            handled.append(f"{payment.id}:{payment.source.method}:{payment.amount}")
            await message.ack()

        async with backend.messages("payments-dlq", "ops") as dead:
            task = asyncio.create_task(receiver.receive(handle))
            await payments.publish(Payment(id=1, amount=9.5, source=Card(last4="4242")), key="c-1")
            await backend.publisher().topic("payments").publish(OutboundMessage(b'{"id": "oops"}'))
            await payments.publish(Payment(id=2, amount=20.0, source=Transfer(iban="DE00")), key="c-2")
            letter = await dead.next_message(timeout=5)
            while len(handled) < 2:  # noqa: ASYNC110 - a demo: poll the list the handler fills
                await asyncio.sleep(0.01)
            receiver.stop()
            await task
        print("handled:", ", ".join(sorted(handled)))
        print("dead-lettered:", letter.data.decode(), "reason:", letter.attributes[ATTR_REASON])


if __name__ == "__main__":
    asyncio.run(main())
