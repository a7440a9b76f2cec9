"""broker.run drains every documented composition of wrappers and adapters on SIGTERM.

typed, schemas and telemetry wrappers around backend receivers, ``adapt.fan_in`` and the batching
adapters, nested as docs/typed-messages.md, docs/schemas.md and docs/observability.md show: on
SIGTERM every handler that started finishes (drained, not cancelled), ``broker.run`` returns 0,
and every message published is either handled and acked once or delivered again afterwards.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import broker
from broker import adapt, schemas, telemetry, typed
from broker.driver.testing.harness import collect, drain
from broker.errors import NotSupported
from broker.message import OutboundMessage

_COUNT = 16  # per topic
_SIGNAL_AFTER = 6  # handled messages before SIGTERM

_NUMBER = json.dumps({"title": "Number", "type": "integer"})


class _Setup:
    """What one composition is built from: the backend, its instrumented twin, a registry binding."""

    def __init__(self, backend: broker.Backend) -> None:
        self.backend = backend
        self.instrumented = telemetry.instrument(backend, opentelemetry=False, backlog_interval=None)

    @functools.cached_property
    def numbers(self) -> schemas.SchemaBinding[int]:
        """A JSON Schema binding of integers on confluent-kafka's in-memory registry."""
        return schemas.json_schema(schemas.Registry(f"mock://{uuid.uuid4().hex}"), _NUMBER)


#: name -> (topics published to, schema-framed?, build(setup) -> receiver)
_Composition = tuple[tuple[str, ...], bool, Callable[[_Setup], Any]]

COMPOSITIONS: dict[str, _Composition] = {
    "typed(fan_in(receiver, receiver))": (
        ("a", "b"),
        False,
        lambda s: typed.receiver(
            adapt.fan_in(s.backend.receiver("a", "s", concurrency=2), s.backend.receiver("b", "s")), int
        ),
    ),
    "fan_in(typed(receiver), telemetry receiver)": (
        ("a", "b"),
        False,
        lambda s: adapt.fan_in(
            typed.receiver(s.backend.receiver("a", "s", concurrency=2), int),
            s.instrumented.receiver("b", "s", concurrency=2),
        ),
    ),
    "typed(telemetry receiver)": (
        ("a",),
        False,
        lambda s: typed.receiver(s.instrumented.receiver("a", "s", concurrency=3), int),
    ),
    "schemas(adapt.receiver(telemetry messages))": (
        ("a",),
        True,
        lambda s: schemas.receiver(
            adapt.receiver(s.instrumented.messages("a", "s"), concurrency=2), s.numbers
        ),
    ),
    "typed batched(adapt.batched_receiver(batched_messages))": (
        ("a",),
        False,
        lambda s: typed.batched_receiver(
            adapt.batched_receiver(
                s.backend.batched_messages("a", "s", batch_size=4, batch_timeout=0.05), concurrency=2
            ),
            int,
        ),
    ),
    "schemas batched(adapt.batched_receiver(adapt.batched_messages(telemetry messages)))": (
        ("a",),
        True,
        lambda s: schemas.batched_receiver(
            adapt.batched_receiver(adapt.batched_messages(s.instrumented.messages("a", "s"), 4, 0.05)),
            s.numbers,
        ),
    ),
    "telemetry batched iterator -> adapt.batched_receiver": (
        ("a",),
        False,
        lambda s: adapt.batched_receiver(
            s.instrumented.batched_messages("a", "s", batch_size=4, batch_timeout=0.05), concurrency=2
        ),
    ),
}


def _values(topic: str) -> range:
    """The numbers published to ``topic``: each topic its own range, so a value names its topic."""
    start = 1000 * (ord(topic) - ord("a"))
    return range(start, start + _COUNT)


@pytest.mark.parametrize("name", list(COMPOSITIONS))
async def test_sigterm_drains_the_composition_and_loses_nothing(name: str) -> None:
    topics, framed, build = COMPOSITIONS[name]
    backend = broker.connect(f"inmem://run-{uuid.uuid4().hex}")
    setup = _Setup(backend)
    expected = {v for t in topics for v in _values(t)}
    for topic in topics:
        if framed:
            await schemas.topic(backend.publisher(), topic, setup.numbers).batch_publish(*_values(topic))
        else:
            await (
                backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(str(i).encode()) for i in _values(topic)))
            )
    receiver = build(setup)
    handled: list[int] = []
    started = finished = 0
    sent = False

    async def one(message: Any) -> None:
        nonlocal started, finished, sent
        started += 1
        await asyncio.sleep(0.01)  # in flight when the signal comes: the drain lets it finish
        try:
            value = message.decoded  # through a typed or schemas wrapper
        except NotSupported:
            value = int(message.data)  # untyped
        await message.ack()
        handled.append(value)
        finished += 1
        if len(handled) >= _SIGNAL_AFTER and not sent:
            sent = True
            os.kill(os.getpid(), signal.SIGTERM)

    async def batch(messages: list[Any]) -> None:
        for message in messages:
            await one(message)

    handler = one if hasattr(receiver, "receive") else batch
    async with asyncio.timeout(20):
        code = await broker.run((receiver, handler), drain_timeout=10)
    assert code == 0
    assert sent, "the run ended before the signal"
    assert started == finished, f"{started - finished} running handlers were cut short instead of drained"
    assert len(handled) == len(set(handled)), "a message was handled twice"
    rest: list[int] = []
    for topic in topics:
        left = set(_values(topic)) - set(handled)
        async with backend.messages(topic, "s") as again:
            got = await collect(again, len(left), 5)
            got += await drain(again, 0.05)
        rest += [setup.numbers.decode(m.data) if framed else int(m.data) for m in got]
    assert not set(handled) & set(rest), "acked during the drain, delivered again"
    assert set(handled) | set(rest) == expected, f"lost: {sorted(expected - set(handled) - set(rest))}"
    await backend.close()
