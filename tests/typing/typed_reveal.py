"""Checked by mypy --strict in tests/unit/test_typed_reveal.py: what the typed API gives the checker.

Each ``reveal_type`` line ends with the type mypy must reveal.
"""

from __future__ import annotations

from typing import Annotated, reveal_type

import pydantic

import broker
from broker import typed
from broker.app import Key
from broker.interfaces import MessageIterator, Publisher, Receiver, RecordIterator
from tests.unit.typed_models import Cat, Dog, Order, Payment, Point, Row


async def check(publisher: Publisher, source: MessageIterator, log: RecordIterator, rx: Receiver) -> None:
    reveal_type(typed.binding(Order).decode(b""))  # Order
    reveal_type(typed.binding(Payment).decode(b""))  # Payment
    reveal_type(typed.binding(Point, format="msgpack").decode(b""))  # Point
    reveal_type(typed.binding(Row).decode(b""))  # TypedDict(Row, {'id': int, 'name': str})
    reveal_type(typed.union(Cat, Dog).decode(b""))  # Cat | Dog
    pets = typed.Binding[Cat | Dog](Annotated[Cat | Dog, pydantic.Field(discriminator="kind")])
    reveal_type(pets.decode(b""))  # Cat | Dog
    reveal_type(typed.topic(publisher, "orders", Order))  # TypedTopic[Order]
    message = await typed.messages(source, Payment).next_message()
    reveal_type(message.decoded)  # Payment
    record = await typed.records(log, typed.union(Cat, Dog, discriminator="kind")).next_record()
    reveal_type(record.decoded)  # Cat | Dog | None

    async def handle(message: typed.TypedMessage[Point]) -> None:
        reveal_type(message.decoded)  # Point

    await typed.receiver(rx, Point).receive(handle)


app = broker.App("inmem://reveal")


@app.subscriber("orders", "billing", publish_to="paid")
async def bill(order: Payment, key: Annotated[str | None, Key]) -> Order:
    return Order(order.id)


@app.subscriber("points", "plot")
def plot(points: list[Point]) -> None: ...


reveal_type(bill)  # def (order: Payment, key: str | None) -> Coroutine[Any, Any, Order]
reveal_type(plot)  # def (points: list[Point])


@app.records("points", "stats", per_key=True)
async def count(point: Point, record: broker.Record) -> None: ...


reveal_type(count)  # def (point: Point, record: Record) -> Coroutine[Any, Any, None]
