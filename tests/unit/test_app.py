"""broker.App on inmem://: decoding by annotation, the ack policy, retries and dead letters,
outputs, plain-function handlers, batches, bad signatures, and the lifecycle (nothing lost)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import msgspec
import pydantic
import pytest

import broker
from broker import Message, OutboundMessage, Publisher
from broker.app import App, Attributes, Key
from broker.backoff import Backoff
from broker.errors import ConfigError
from broker.retry import ATTR_REASON, DeadLetterTopic, RetryPolicy
from broker.testing import virtual_time, wait_until
from broker.typed.cloudevents import CloudEvent


class Order(pydantic.BaseModel):
    id: int
    total: float


@dataclasses.dataclass(frozen=True)
class Shipment:
    order: int
    total: float


class Spot(msgspec.Struct):
    x: int


def order(number: int, total: float = 9.5) -> Order:
    return Order(id=number, total=total)


async def test_payload_key_attributes_message_publisher_and_logger_are_bound_and_acked_on_return() -> None:
    app = App("inmem://unused")
    seen: list[tuple[Order, str | None, dict[str, str], bool, bool, bool]] = []

    @app.subscriber("orders", "billing")
    async def bill(
        order: Order,
        message: Message,
        key: Annotated[str | None, Key],
        attributes: Annotated[Mapping[str, str], Attributes],
        publisher: Publisher,
        log: logging.Logger,
    ) -> None:
        seen.append(
            (
                order,
                key,
                dict(attributes),
                isinstance(message, Message),
                hasattr(publisher, "topic"),
                log.name.endswith("bill"),
            )
        )

    async with app.testing() as test:
        for i in range(3):
            await test.publish("orders", order(i), key=f"c-{i}", attributes={"source": "web"})
        await test.until(lambda: test.settled("orders") == ["acked"] * 3)
        await asyncio.sleep(60)  # past the 30 s ack deadline: an acked message is not redelivered
    assert [s[0] for s in seen] == [order(0), order(1), order(2)]
    assert [s[1] for s in seen] == ["c-0", "c-1", "c-2"]
    assert all(s[2]["source"] == "web" and s[3] and s[4] and s[5] for s in seen)
    assert len(test.deliveries) == 3


async def test_the_return_value_is_published_typed_to_the_output_topic_with_the_key() -> None:
    app = App("inmem://unused")

    @app.subscriber("orders", "shipping", publish_to="shipments")
    async def ship(order: Order) -> Shipment:
        return Shipment(order.id, order.total)

    @app.subscriber("orders", "nothing-out", publish_to="never")
    async def skip(order: Order) -> Shipment | None:
        return None

    async with app.testing() as test:
        await test.publish("orders", order(7), key="c-7")
        await test.until(lambda: test.settled() == ["acked", "acked"])
    sent = test.recorder.assert_published("shipments", key="c-7", count=1)
    assert sent.value == Shipment(7, 9.5)
    test.recorder.assert_nothing_published("never")


async def test_an_exception_is_retried_with_the_policy_backoff_then_dead_lettered() -> None:
    app = App("inmem://unused")
    calls: list[float] = []
    policy = RetryPolicy(
        max_attempts=3, backoff=Backoff(initial=2, maximum=8), dead_letter=DeadLetterTopic("dead")
    )

    @app.subscriber("orders", "billing", retry=policy)
    async def fail(order: Order) -> None:
        calls.append(asyncio.get_running_loop().time())
        raise RuntimeError("card declined")

    async with app.testing() as test:
        await test.publish("orders", order(1))
        await test.until(lambda: len(test.recorder.on("dead")) == 1)
    assert len(calls) == 3
    assert [round(b - a, 3) for a, b in itertools.pairwise(calls)] == [2.0, 4.0]  # the policy's backoff
    assert test.settled() == ["nacked", "nacked", "acked"]  # the third: acked once the copy is out
    letter = test.recorder.on("dead")[0]
    assert letter.decoded(Order) == order(1)
    assert letter.attributes[ATTR_REASON].startswith("failed 3 attempts")


async def test_a_failure_then_success_is_acked_on_the_retry() -> None:
    app = App("inmem://unused")
    attempts: list[int | None] = []

    @app.subscriber("orders", "billing", retry=RetryPolicy(backoff=Backoff(initial=1, maximum=1)))
    async def flaky(order: Order, message: Message) -> None:
        attempts.append(message.delivery_attempt)
        if len(attempts) < 3:
            raise TimeoutError("gateway slow")

    async with app.testing() as test:
        await test.publish("orders", order(1))
        await test.until(lambda: test.settled()[-1:] == ["acked"])
    assert attempts == [1, 2, 3]
    assert test.settled() == ["nacked", "nacked", "acked"]


async def test_a_failed_handler_without_a_policy_is_nacked_with_the_default_backoff_and_handled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App("inmem://unused")
    calls: list[float] = []

    @app.subscriber("orders", "billing")
    async def flaky(order: Order) -> None:
        calls.append(asyncio.get_running_loop().time())
        if len(calls) < 3:
            raise RuntimeError("gateway down")

    with caplog.at_level(logging.ERROR, logger="broker.adapt"):
        async with app.testing() as test:
            await test.publish("orders", order(1))
            await test.until(lambda: test.settled()[-1:] == ["acked"])
    assert [round(b - a, 3) for a, b in itertools.pairwise(calls)] == [0.1, 0.2]  # the default backoff
    assert test.settled() == ["nacked", "nacked", "acked"]
    failed = [r for r in caplog.records if "message handler failed" in r.getMessage()]
    assert len(failed) == 2 and all(r.exc_info and "gateway down" in str(r.exc_info[1]) for r in failed)


async def test_outside_the_test_kit_a_payload_handler_is_retried_decodes_msgpack_and_keeps_leases() -> None:
    """``app.lifespan()`` with no test kit watching: the same outcomes as under ``app.testing()``
    (a failure nacked with the default backoff and handled again, a msgpack payload decoded by its
    content type, a handler slower than the ack deadline handled once), counted, in virtual time."""
    url = f"inmem://payload-{uuid.uuid4().hex[:8]}"
    app = App(url)
    calls: list[tuple[int, float]] = []
    done: list[int] = []

    @app.subscriber("orders", "billing", concurrency=2, ack_deadline=1)
    async def handle(order: Order) -> None:
        calls.append((order.id, asyncio.get_running_loop().time()))
        if order.id == 1 and len([c for c in calls if c[0] == 1]) < 3:
            raise RuntimeError("gateway down")
        if order.id == 3:
            await asyncio.sleep(5)  # five ack deadlines
        done.append(order.id)

    with virtual_time():
        async with broker.connect(url) as backend:
            async with backend.messages("orders", "billing", ack_deadline=1):
                pass
            async with app.lifespan(ping_timeout=None):
                topic = backend.publisher().topic("orders")
                await broker.typed.topic(backend.publisher(), "orders", Order).publish(order(1))
                packed = broker.typed.binding(Order, format="msgpack")
                await broker.typed.topic(backend.publisher(), "orders", packed).publish(order(2))
                await broker.typed.topic(backend.publisher(), "orders", Order).publish(order(3))
                await topic.publish(OutboundMessage(b"not json"))
                await wait_until(lambda: sorted(done) == [1, 2, 3], timeout=60)
                await asyncio.sleep(20)  # a redelivery of anything acked would come by now
        broker.connect(url).forget()  # type: ignore[attr-defined]
    times = [t for number, t in calls if number == 1]
    assert [round(b - a, 3) for a, b in itertools.pairwise(times)] == [0.1, 0.2]
    assert sorted(number for number, _ in calls) == [1, 1, 1, 2, 3]  # 3 was handled once
    assert sorted(done) == [1, 2, 3]


async def test_an_undecodable_payload_is_dead_lettered_and_never_given_to_the_handler() -> None:
    app = App("inmem://unused")
    handled: list[Order] = []
    policy = RetryPolicy(dead_letter=DeadLetterTopic("orders-dead"))

    @app.subscriber("orders", "billing", retry=policy)
    async def bill(order: Order) -> None:
        handled.append(order)

    async with app.testing() as test:
        await test.publish("orders", b'{"id": "oops"}')
        await test.publish("orders", order(2))
        await test.until(lambda: len(test.deliveries) == 2 and "pending" not in test.settled())
    assert handled == [order(2)]
    dead = test.recorder.assert_published("orders-dead", data=b'{"id": "oops"}', count=1)
    assert dead.attributes[ATTR_REASON] == "non-retryable DecodeError"
    assert test.settled() == ["acked", "acked"]


async def test_an_undecodable_payload_without_a_dead_letter_is_logged_and_nacked_with_the_longest_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App("inmem://unused")

    @app.subscriber("orders", "billing")
    async def bill(order: Order) -> None:
        raise AssertionError("never called")

    with caplog.at_level(logging.ERROR, logger="broker.app"):
        async with app.testing() as test:
            await test.publish("orders", b"not json")
            await test.until(lambda: len(test.deliveries) == 2)
    first, second = test.deliveries
    assert first.message.state == "nacked"
    assert first.message.id == second.message.id  # redelivered, never dropped
    assert round(second.at - first.at, 3) == 10.0  # the default backoff's longest delay
    errors = [r.getMessage() for r in caplog.records if r.name == "broker.app" and r.levelno == logging.ERROR]
    assert any(first.message.id in e and "no dead-letter destination" in e for e in errors)


async def test_manual_ack_leaves_settling_to_the_handler_and_warns_about_an_unsettled_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App("inmem://unused")

    @app.subscriber("orders", "billing", ack="manual")
    async def forgetful(order: Order, message: Message) -> None:
        if order.id == 1:
            await message.ack()

    with caplog.at_level(logging.WARNING, logger="broker.settle"):
        async with app.testing() as test:
            await test.publish("orders", order(1))
            await test.publish("orders", order(2))
            await test.until(lambda: len(test.deliveries) == 2)
            await asyncio.sleep(0)
            settled = test.settled()
            unsettled = test.delivered()[1]
    assert settled == ["acked", "pending"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "broker.settle"]
    assert len(warnings) == 1 and unsettled.id in warnings[0] and "forgetful" in warnings[0]


async def test_a_plain_function_runs_in_a_worker_thread_bounded_by_concurrency() -> None:
    app = App("inmem://unused")
    lock = threading.Lock()
    running, most, threads = [0], [0], set()
    loop_thread = threading.get_ident()

    @app.subscriber("orders", "billing", concurrency=3)
    def blocking(order: Order) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            threads.add(threading.get_ident())
        threading.Event().wait(0.05)
        with lock:
            running[0] -= 1

    async with app.testing(virtual_time=False) as test:
        for i in range(9):
            await test.publish("orders", order(i))
        await test.until(lambda: test.settled().count("acked") == 9, timeout=30)
    assert loop_thread not in threads
    assert 1 < most[0] <= 3


async def test_a_list_payload_makes_a_batch_subscriber_acked_as_a_whole() -> None:
    app = App("inmem://unused")
    batches: list[list[int]] = []
    dead = RetryPolicy(dead_letter=DeadLetterTopic("dead"))

    @app.subscriber("orders", "billing", batch_size=5, batch_timeout=0.5, retry=dead, publish_to="totals")
    async def bill(orders: list[Order], messages: list[Message]) -> list[float]:
        assert len(orders) == len(messages)
        batches.append([o.id for o in orders])
        return [sum(o.total for o in orders)]

    async with app.testing() as test:
        await test.publish("orders", b"{broken")
        for i in range(11):
            await test.publish("orders", order(i, 1.0))
        await test.until(lambda: sum(map(len, batches)) == 11 and "pending" not in test.settled())
    assert sorted(i for b in batches for i in b) == list(range(11))
    assert all(len(b) <= 5 for b in batches)
    assert test.settled() == ["acked"] * 12  # the broken one: acked once dead-lettered
    assert len(test.recorder.on("dead")) == 1
    assert sum(p.decoded(float) for p in test.recorder.on("totals")) == 11.0


async def test_text_bytes_and_cloudevent_payloads() -> None:
    app = App("inmem://unused")
    got: list[object] = []

    @app.subscriber("raw", "a")
    async def raw(payload: bytes) -> None:
        got.append(payload)

    @app.subscriber("text", "a")
    async def text(payload: str) -> None:
        got.append(payload)

    @app.subscriber("events", "a")
    async def event(payload: CloudEvent[Order]) -> None:
        got.append((payload.type, payload.data))

    async with app.testing() as test:
        await test.publish("raw", b"\x00\x01")
        await test.publish("text", "h\u00e9".encode())
        ce = broker.typed.cloudevents.binding(Order, protocol="inmem")
        event_message = ce.message(CloudEvent(source="/shop", type="order.placed", data=order(3)))
        await test.publish("events", event_message)
        await test.until(lambda: len(got) == 3)
    assert sorted(map(repr, got)) == sorted(map(repr, [b"\x00\x01", "h\u00e9", ("order.placed", order(3))]))


def test_a_parameter_that_cannot_be_bound_is_a_config_error_naming_it() -> None:
    app = App("inmem://unused")

    async def two_payloads(order: Order, other: int) -> None: ...

    async def unannotated(order) -> None: ...  # type: ignore[no-untyped-def]

    async def unbindable(thing: Order | Spot) -> None: ...  # one binding cannot mix the engines

    def batch_with_key(orders: list[Order], key: Annotated[str | None, Key]) -> None: ...

    cases: list[tuple[Callable[..., Any], str]] = [
        (two_payloads, "'other'"),
        (unannotated, "'order'"),
        (unbindable, "'thing'"),
        (batch_with_key, "'key'"),
    ]
    for handler, name in cases:
        with pytest.raises(ConfigError, match=name):
            app.subscriber("orders", "billing")(handler)
    assert app.subscribers == []
    with pytest.raises(ConfigError, match="no backend named 'events'"):
        app.subscriber("orders", "billing", backend="events")


def test_the_app_reads_polybroker_url_and_names_it_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLYBROKER_URL", raising=False)
    with pytest.raises(ConfigError, match="POLYBROKER_URL"):
        App()
    monkeypatch.setenv("POLYBROKER_URL", "inmem://from-env")
    assert App().backend_specs == {"default": "inmem://from-env"}
    assert set(App(events="kafka://127.0.0.1:1").backend_specs) == {"default", "events"}
    with pytest.raises(ConfigError, match="once"):
        App("inmem://a", default="inmem://b")


async def test_one_app_consumes_one_backend_and_publishes_to_another() -> None:
    app = App(default="inmem://unused-a", events="inmem://unused-b")

    @app.subscriber("orders", "billing", backend="events", publish_to="shipments", publish_backend="default")
    async def ship(order: Order) -> Shipment:
        return Shipment(order.id, order.total)

    async with app.testing() as test:
        await test.publish("orders", order(4), backend="events")
        await test.until(lambda: test.settled() == ["acked"])
        assert app.publisher("default") is app.publisher("default")  # one shared publisher per backend
    assert test.recorder.assert_published("shipments").value == Shipment(4, 9.5)


async def test_lifespan_runs_the_hooks_in_order_and_drains_with_nothing_lost() -> None:
    url = f"inmem://app-drain-{uuid.uuid4().hex}"
    app = App(url)
    events: list[str] = []
    started: list[int] = []
    finished: list[int] = []

    @app.on_startup
    def starting() -> None:
        events.append("startup")

    @app.on_shutdown
    async def stopping() -> None:
        events.append(f"shutdown after {len(finished)} handled")

    @app.subscriber("orders", "billing", concurrency=4)
    async def slow(order: Order) -> None:
        started.append(order.id)
        await asyncio.sleep(5)
        finished.append(order.id)

    with virtual_time():
        async with app.lifespan(drain_timeout=30) as running:
            publisher = running.publisher()
            for i in range(20):
                await publisher.topic("orders").publish(OutboundMessage(order(i).model_dump_json().encode()))
            await wait_until(lambda: len(started) >= 6, timeout=60)
        first_run = (list(started), list(finished))
        assert sorted(first_run[0]) == sorted(first_run[1])  # every handler that started, finished
        assert events == ["startup", f"shutdown after {len(finished)} handled"]
        async with app.lifespan():
            await wait_until(lambda: set(finished) == set(range(20)), timeout=120)
    assert len(first_run[1]) < 20  # the drain stopped the first run early ...
    assert set(finished) == set(range(20))  # ... and nothing was lost
    broker.connect(url).forget()  # type: ignore[attr-defined]


async def test_a_signal_during_startup_drains_the_app_instead_of_killing_the_process() -> None:
    """SIGTERM while a startup hook runs (``broker run --reload`` stopping a worker that just
    started): ``run`` returns 0 after the shutdown hooks, and the message waiting is kept."""
    url = f"inmem://app-early-signal-{uuid.uuid4().hex}"
    app = App(url)
    events: list[str] = []
    handled: list[bytes] = []
    await broker.connect(url).publisher().topic("jobs").publish(OutboundMessage(b"kept"))

    @app.on_startup
    async def starting() -> None:
        events.append("startup")
        if len(events) == 1:  # the first run only
            os.kill(os.getpid(), signal.SIGTERM)  # before the subscribers start
            await asyncio.sleep(0.05)  # the loop runs the signal's handler

    @app.on_shutdown
    def stopping() -> None:
        events.append("shutdown")

    @app.subscriber("jobs", "runner")
    async def job(data: bytes) -> None:
        handled.append(data)

    previous = signal.getsignal(signal.SIGTERM)
    assert await asyncio.wait_for(app.run(drain_timeout=5), 30) == 0
    assert events == ["startup", "shutdown"] and handled == []
    assert signal.getsignal(signal.SIGTERM) == previous  # the run's handler is gone again
    async with app.lifespan():
        await wait_until(lambda: handled == [b"kept"], timeout=30)
    broker.connect(url).forget()  # type: ignore[attr-defined]


async def test_the_lease_is_kept_while_a_slow_handler_runs_so_it_is_handled_once() -> None:
    app = App("inmem://unused")
    calls: list[int] = []

    @app.subscriber("orders", "billing")
    async def slow(order: Order) -> None:
        calls.append(order.id)
        await asyncio.sleep(5)  # five ack deadlines

    async with app.testing(ack_deadline=1.0) as test:
        await test.publish("orders", order(1))
        await test.until(lambda: test.settled() == ["acked"])
        await asyncio.sleep(10)
    assert calls == [1]
    assert len(test.deliveries) == 1


async def test_leases_of_concurrent_slow_handlers_are_all_kept_so_each_message_is_handled_once() -> None:
    app = App("inmem://unused")
    calls: list[int] = []

    @app.subscriber("orders", "billing", concurrency=3)
    async def slow(order: Order) -> None:
        calls.append(order.id)
        await asyncio.sleep(5)  # five ack deadlines, three handlers at once

    async with app.testing(ack_deadline=1.0) as test:
        for number in (1, 2, 3):
            await test.publish("orders", order(number))
        await test.until(lambda: test.settled() == ["acked"] * 3)
        await asyncio.sleep(10)
    assert sorted(calls) == [1, 2, 3]
    assert len(test.deliveries) == 3


async def test_lease_keeping_stops_at_its_maximum() -> None:
    app = App("inmem://unused")
    calls: list[int] = []

    @app.subscriber("orders", "billing", concurrency=2, max_lease=3.0)
    async def stuck(order: Order) -> None:
        calls.append(order.id)
        if len(calls) == 1:
            await asyncio.sleep(30)

    async with app.testing(ack_deadline=1.0) as test:
        await test.publish("orders", order(1))
        await test.until(lambda: len(test.deliveries) == 2)
        second = test.deliveries[1]
    assert 3.0 <= second.at - test.deliveries[0].at <= 5.0  # the lease stopped being kept after 3 s
