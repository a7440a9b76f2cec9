"""broker.App: user middleware around every delivery, and ``Depends()`` parameters through FastDepends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import pydantic
import pytest
from fast_depends import Depends

from broker import Message
from broker.app import App
from broker.backoff import Backoff
from broker.errors import ConfigError
from broker.retry import DeadLetterTopic, RetryPolicy


class Order(pydantic.BaseModel):
    id: int
    total: float


class Shipment(pydantic.BaseModel):
    order: int


CallNext = Callable[[Any], Awaitable[Any]]


# -- middleware ----------------------------------------------------------------------------------
async def test_middleware_runs_outermost_first_around_decode_and_handler_and_may_replace_the_result() -> None:
    trail: list[str] = []

    async def outer(delivery: Any, call_next: CallNext) -> Any:
        trail.append(f"outer in {type(delivery).__name__}")
        result = await call_next(delivery)
        trail.append("outer out")
        return result

    async def inner(delivery: Message, call_next: CallNext) -> Any:
        trail.append(f"inner in {delivery.key}")
        result = await call_next(delivery)
        trail.append("inner out")
        return Shipment(order=result.order * 10)  # replaces what the handler returned

    app = App("inmem://unused", middleware=[outer])

    @app.subscriber("orders", "ship", publish_to="shipments", middleware=[inner])
    async def ship(order: Order) -> Shipment:
        trail.append("handler")
        return Shipment(order=order.id)

    async with app.testing() as test:
        await test.publish("orders", Order(id=4, total=1.0), key="k4")
        await test.until(lambda: test.settled() == ["acked"])
    assert trail == ["outer in Message", "inner in k4", "handler", "inner out", "outer out"]
    assert test.recorder.assert_published("shipments", count=1).value == Shipment(order=40)


async def test_a_middleware_exception_goes_to_the_retry_policy_and_a_skipped_call_acks() -> None:
    failures = {"left": 2}
    handled: list[int] = []

    async def gate(delivery: Message, call_next: CallNext) -> Any:
        if delivery.key == "drop":
            return None  # the handler is skipped; auto-ack acks the message
        if failures["left"]:
            failures["left"] -= 1
            raise TimeoutError("rate limiter unavailable")
        return await call_next(delivery)

    app = App("inmem://unused")
    app.middleware(gate)

    @app.subscriber("orders", "bill", retry=RetryPolicy(backoff=Backoff(initial=1, maximum=1)))
    async def bill(order: Order) -> None:
        handled.append(order.id)

    async with app.testing() as test:
        await test.publish("orders", Order(id=1, total=1.0), key="drop")
        await test.until(lambda: test.settled() == ["acked"])
        await test.publish("orders", Order(id=2, total=1.0), key="keep")
        await test.until(lambda: test.settled()[-1:] == ["acked"] and len(test.settled()) == 4)
    assert test.settled() == ["acked", "nacked", "nacked", "acked"]
    assert handled == [2]  # the dropped one never reached the handler, the other once


async def test_middleware_sees_a_batch_as_its_list_and_an_undecodable_payload_is_still_dead_lettered() -> (
    None
):
    seen: list[int] = []

    async def count(delivery: list[Message], call_next: CallNext) -> Any:
        seen.append(len(delivery))
        return await call_next(delivery)

    app = App("inmem://unused", middleware=[count])

    @app.subscriber(
        "orders",
        "sum",
        batch_size=5,
        batch_timeout=0.5,
        retry=RetryPolicy(dead_letter=DeadLetterTopic("dead")),
    )
    async def total(orders: list[Order]) -> None:
        seen.append(-len(orders))

    async with app.testing() as test:
        for i in range(4):
            await test.publish("orders", Order(id=i, total=1.0))
        await test.publish("orders", b'{"id": "oops"}')
        await test.until(lambda: len(test.settled()) == 5 and "pending" not in test.settled())
    assert seen == [5, -4]
    test.recorder.assert_published("dead", data=b'{"id": "oops"}', count=1)


def test_middleware_that_is_not_an_async_function_is_a_config_error() -> None:
    def blocking(delivery: Any, call_next: Any) -> Any:
        return None

    with pytest.raises(ConfigError, match="middleware must be an async function"):
        App("inmem://unused", middleware=[blocking])
    app = App("inmem://unused")
    with pytest.raises(ConfigError, match="middleware must be an async function"):
        app.middleware(blocking)
    with pytest.raises(ConfigError, match="middleware must be an async function"):
        app.subscriber("t", "s", middleware=[blocking])


# -- Depends -------------------------------------------------------------------------------------
def settings() -> dict[str, int]:
    return {"rate": 3}


class Database:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.closed = False


opened: list[Database] = []


async def database(config: dict[str, int] = Depends(settings)) -> AsyncIterator[Database]:
    db = Database(config["rate"])
    opened.append(db)
    yield db
    db.closed = True  # after the handler returned


async def test_depends_resolves_async_generators_nested_dependencies_and_keeps_bound_parameters() -> None:
    opened.clear()
    app = App("inmem://unused")
    seen: list[tuple[int, int, bool, str | None]] = []

    @app.subscriber("orders", "bill")
    async def bill(
        db: Annotated[Database, Depends(database)],
        order: Order,
        message: Message,
        scale: int = Depends(lambda: 2),
    ) -> None:
        seen.append((order.id * db.rate * scale, len(opened), db.closed, message.key))

    async with app.testing() as test:
        await test.publish("orders", Order(id=5, total=1.0), key="k")
        await test.publish("orders", Order(id=7, total=1.0), key="j")
        await test.until(lambda: test.settled() == ["acked", "acked"])
    assert seen == [
        (30, 1, False, "k"),
        (42, 2, False, "j"),
    ]  # one database per delivery, open in the handler
    assert [db.closed for db in opened] == [True, True]  # and closed once it returned


async def test_dependency_overrides_and_plain_def_handlers_with_depends() -> None:
    app = App("inmem://unused")
    seen: list[tuple[int, int]] = []

    @app.subscriber("orders", "bill")
    def bill(order: Order, config: dict[str, int] = Depends(settings)) -> None:  # runs in a worker thread
        seen.append((order.id, config["rate"]))

    app.dependency_provider.override(settings, lambda: {"rate": 99})
    async with app.testing() as test:
        await test.publish("orders", Order(id=1, total=1.0))
        await test.until(lambda: test.settled() == ["acked"])
    assert seen == [(1, 99)]


async def test_a_failing_dependency_goes_to_the_retry_policy() -> None:
    app = App("inmem://unused")
    calls = {"n": 0}

    def flaky() -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("pool exhausted")
        return 1

    @app.subscriber("orders", "bill", retry=RetryPolicy(backoff=Backoff(initial=1, maximum=1)))
    async def bill(order: Order, one: int = Depends(flaky)) -> None:
        pass

    async with app.testing() as test:
        await test.publish("orders", Order(id=1, total=1.0))
        await test.until(lambda: test.settled() == ["nacked", "acked"])


async def test_a_handler_without_depends_never_goes_through_fast_depends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fast_depends

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a handler without Depends() went through FastDepends")

    monkeypatch.setattr(fast_depends, "inject", refuse)
    app = App("inmem://unused")
    seen: list[int] = []

    @app.subscriber("orders", "bill")
    async def bill(order: Order) -> None:
        seen.append(order.id)

    async with app.testing() as test:
        await test.publish("orders", Order(id=3, total=1.0))
        await test.until(lambda: test.settled() == ["acked"])
    assert seen == [3] and not app.subscribers[0].signature.depends


def test_depends_with_positional_only_parameters_is_a_config_error() -> None:
    app = App("inmem://unused")
    with pytest.raises(ConfigError, match=r"'order'.*by name"):

        @app.subscriber("orders", "bill")
        async def bill(order: Order, /, config: dict[str, int] = Depends(settings)) -> None:
            pass
