"""Conformance tests of typed messages (:mod:`broker.typed`), mixed into the suite.

Every type kind (dataclass, pydantic model and discriminated union, msgspec Struct and tagged
union, TypedDict, plain JSON value) in JSON and MessagePack makes the round trip with its key and
attributes intact and its content type carried (in the AMQP property on RabbitMQ and Service
Bus); an application's own ``content-type`` attribute round-trips; a payload that does not decode
is dead-lettered with its reason while nothing else is lost. Needs pydantic and msgspec (the
``test`` extra installs both); the tests skip without them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Literal, TypedDict

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

from broker import typed
from broker.backoff import Backoff
from broker.driver.testing.harness import Harness, collect, collect_records, need, subscribed_topic
from broker.message import Message, OutboundMessage
from broker.retry import ATTR_ERROR_TYPE, ATTR_REASON, DeadLetterTopic, RetryPolicy

__all__ = ["TypedSuite"]

_FAST = Backoff(0.05, 1.0, 0.05)


def _cases() -> list[tuple[str, typed.Binding[Any], Any]]:
    """(name, binding, value) for every type kind in both formats."""
    msgspec = pytest.importorskip("msgspec")
    pydantic = pytest.importorskip("pydantic")

    @dataclasses.dataclass
    class Order:
        id: int
        items: list[str]

    class Payment(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        id: int
        amount: float

    class Cat(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        kind: Literal["cat"] = "cat"
        lives: int

    class Dog(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        kind: Literal["dog"] = "dog"
        good: bool

    class Point(msgspec.Struct):  # type: ignore[name-defined,misc]
        x: int
        y: int

    class Circle(msgspec.Struct, tag=True):  # type: ignore[name-defined,misc,call-arg]
        radius: float

    class Square(msgspec.Struct, tag=True):  # type: ignore[name-defined,misc,call-arg]
        side: float

    class Row(TypedDict):
        id: int
        name: str

    kinds: list[tuple[str, Any, Any, Any]] = [
        ("dataclass", Order, None, Order(1, ["a", "b"])),
        ("pydantic", Payment, None, Payment(id=2, amount=9.5)),
        ("pydantic-union", (Cat, Dog), "kind", Dog(good=True)),
        ("struct", Point, None, Point(3, 4)),
        ("struct-union", (Circle, Square), None, Square(2.5)),
        ("typeddict", Row, None, {"id": 5, "name": "naïve ☃"}),
        ("json-value", object, None, {"any": [1, "two", None, {"x": 3.5}]}),
    ]
    cases: list[tuple[str, typed.Binding[Any], Any]] = []
    for fmt in ("json", "msgpack"):
        for name, kind, discriminator, value in kinds:
            if isinstance(kind, tuple):
                bound: typed.Binding[Any] = typed.union(*kind, format=fmt, discriminator=discriminator)
            else:
                bound = typed.binding(kind, format=fmt)
            cases.append((f"{name}/{fmt}", bound, value))
    return cases


#: W3C trace context attributes a tracing layer adds on publish (the instrumented conformance runs).
_TRACE_CONTEXT = frozenset({"traceparent", "tracestate", "baggage"})


def _own(message: Message) -> dict[str, str]:
    """The message's attributes less the trace context that telemetry may have added."""
    return {k: v for k, v in message.attributes.items() if k not in _TRACE_CONTEXT}


class TypedSuite:
    """Typed publishing and consuming through the portable layer, on every backend."""

    async def test_typed_round_trip_every_kind_and_format(self, harness: Harness) -> None:
        """Each type kind in JSON and MessagePack: the value, key, attributes and content type arrive."""
        need(harness, "messages")
        cases = _cases()
        topic, (sub,) = harness.name("typed"), [harness.name("sub")]
        await harness.prepare(topic, [sub])
        publisher = harness.backend.publisher()
        own = {"content-type": "text/plain; charset=utf-8", "case": "untyped"}
        async with harness.messages(topic, sub) as consumer:
            for index, (name, bound, value) in enumerate(cases):
                handle = typed.TypedTopic(publisher.topic(topic), bound)
                await handle.publish(value, key=f"key-{index}", attributes={"case": name})
            await publisher.topic(topic).publish(OutboundMessage(b"plain text", attributes=own))
            got = await collect(consumer, len(cases) + 1, harness.patience)
        by_case: dict[str, Message] = {m.attributes.get("case", "?"): m for m in got}
        assert set(by_case) == {name for name, _, _ in cases} | {"untyped"}
        assert _own(by_case["untyped"]) == own  # an application's own content type is kept
        for index, (name, bound, value) in enumerate(cases):
            message = by_case[name]
            assert message.key == f"key-{index}", name
            assert _own(message) == {"case": name, "content-type": bound.content_type}, name
            assert typed.tag_message(message, bound).decoded == value, name

    async def test_typed_undecodable_message_is_dead_lettered_with_its_reason(self, harness: Harness) -> None:
        """A typed receiver with a retry policy dead-letters payloads that do not decode, loses nothing."""
        need(harness, "messages")
        topic, sub = await subscribed_topic(harness, "typed-poison")
        dlq, inspect = harness.name("dlq"), harness.name("inspect")
        await harness.prepare(dlq, [inspect])
        handled: list[int] = []
        policy = RetryPolicy(max_attempts=3, backoff=_FAST, dead_letter=DeadLetterTopic(dlq))
        receiver = typed.receiver(harness.backend.receiver(topic, sub, concurrency=2, retry=policy), dict)

        async def handle(message: typed.TypedMessage[dict[str, int]]) -> None:
            handled.append(message.decoded["id"])
            await message.ack()

        async with harness.backend.messages(dlq, inspect) as dead:
            task = asyncio.ensure_future(receiver.receive(handle))
            try:
                await (
                    harness.backend.publisher()
                    .topic(topic)
                    .batch_publish(
                        OutboundMessage(b'{"id": 1}', attributes={"content-type": "application/json"}),
                        OutboundMessage(b"{not json", key="bad", attributes={"origin": "test"}),
                        OutboundMessage(b'{"id": 2}'),
                        OutboundMessage(b'{"id": 3}', attributes={"content-type": "application/x-unknown"}),
                    )
                )
                letters = await collect(dead, 2, harness.patience * 2)
                async with asyncio.timeout(harness.patience):
                    while len(handled) < 2:  # noqa: ASYNC110 - counting handled messages
                        await asyncio.sleep(0.02)
                await asyncio.sleep(0.2)  # nothing else arrives late
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        assert sorted(handled) == [1, 2]
        by_data = {m.data: m for m in letters}
        assert set(by_data) == {b"{not json", b'{"id": 3}'}
        for letter in letters:
            assert letter.attributes[ATTR_REASON] == "non-retryable DecodeError"
            assert letter.attributes[ATTR_ERROR_TYPE] == "broker.errors.DecodeError"
        assert by_data[b"{not json"].attributes["origin"] == "test"
        assert by_data[b"{not json"].key == "bad"
        assert by_data[b'{"id": 3}'].attributes["content-type"] == "application/x-unknown"

    async def test_typed_records_bad_record_dead_lettered_and_committed_past(self, harness: Harness) -> None:
        """On a partitioned log, typed records decode and a bad one is dead-lettered, then committed."""
        need(harness, "records")
        topic, dlq = harness.name("typed-log"), harness.name("typed-log-dlq")
        await harness.prepare(topic, [])
        await harness.prepare(dlq, [])
        publisher = harness.backend.publisher()
        handle = typed.topic(publisher, topic, typed.binding(dict, format="msgpack"))
        await handle.publish({"id": 1}, key="k")
        await publisher.topic(topic).publish(OutboundMessage(b"\xc1", key="k"))  # never valid MessagePack
        await handle.publish({"id": 3}, key="k")
        retrier = RetryPolicy(mode="ordered", backoff=_FAST, dead_letter=DeadLetterTopic(dlq)).bind(
            publisher=publisher
        )
        handled: list[Any] = []

        async def handle_record(record: Any) -> None:
            handled.append(typed.tag_record(record, handle.binding).decoded)
            await record.ack()

        outcomes = []
        async with harness.records(topic, harness.name("group")) as records:
            for record in await collect_records(records, 3, harness.patience):
                outcomes.append(await retrier.handle(record, handle_record))
        assert handled == [{"id": 1}, {"id": 3}]
        assert outcomes == ["handled", "dead-lettered", "handled"]
        async with harness.records(dlq, harness.name("inspect")) as dead:
            (letter,) = await collect_records(dead, 1, harness.patience)
        assert letter.value == b"\xc1" and letter.key == "k"
        assert letter.attributes[ATTR_REASON] == "non-retryable DecodeError"
