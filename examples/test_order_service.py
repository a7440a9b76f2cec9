"""Tests of the order service (app.py) with ``app.testing()``: inmem://, virtual time, the recorder.

Run: ``pytest examples/test_order_service.py`` (pytest-asyncio in auto mode, as this repository
configures it). The retries' backoff (1 + 2 + 4 s) passes in virtual time, at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from order_service import Order, Shipment, app, stock


@pytest.fixture(autouse=True)
def fresh_stock() -> Iterator[None]:
    """Each test starts with the same stock."""
    saved = dict(stock)
    yield
    stock.clear()
    stock.update(saved)


async def test_an_order_in_stock_is_shipped_and_acked() -> None:
    """The shipment goes out with the order's key; the order is acked."""
    async with app.testing() as test:
        await test.publish("orders", Order(id=1, item="book", quantity=2), key="c-1")
        await test.until(lambda: test.settled("orders") == ["acked"])
    shipment = test.recorder.assert_published("shipments", key="c-1", count=1)
    assert shipment.value == Shipment(order=1, item="book", quantity=2)
    assert stock["book"] == 8


async def test_an_order_out_of_stock_is_retried_with_backoff_then_dead_lettered() -> None:
    """Four attempts, 1, 2 and 4 virtual seconds apart, then a copy in orders-dead; nothing shipped."""
    async with app.testing() as test:
        await test.publish("orders", Order(id=2, item="lamp", quantity=1))
        await test.until(lambda: len(test.recorder.on("orders-dead")) == 1)
    times = [d.at for d in test.deliveries]
    assert [round(b - a, 3) for a, b in itertools.pairwise(times)] == [1.0, 2.0, 4.0]
    letter = test.recorder.on("orders-dead")[0]
    assert letter.attributes["x-dead-letter-reason"] == "failed 4 attempts (max_attempts=4)"
    assert letter.decoded(Order) == Order(id=2, item="lamp", quantity=1)
    test.recorder.assert_nothing_published("shipments")


async def test_an_invalid_order_is_dead_lettered_at_once_and_never_handled() -> None:
    """An order that fails validation is dead-lettered on its first delivery; the stock is untouched."""
    async with app.testing() as test:
        await test.publish("orders", b'{"id": 3, "item": "book", "quantity": 0}')
        await test.until(lambda: test.settled() == ["acked"])
    letter = test.recorder.assert_published("orders-dead", count=1)
    assert letter.attributes["x-dead-letter-reason"] == "non-retryable DecodeError"
    assert len(test.deliveries) == 1
    assert stock["book"] == 10
