"""Optional acker contracts are typed protocols: which backend acker offers which; the traced wrapper."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import pytest

from broker.driver.acking import (
    BulkAcker,
    DeadLetterAcker,
    NativePropertiesAcker,
    acks_in_bulk,
    can_dead_letter,
)
from broker.errors import NotSupported
from broker.message import Message
from broker.telemetry.core import TracedAcker, TracedBulkAcker

#: (module, acker class, has a bulk ack path): every backend's acker dead-letters.
BACKEND_ACKERS = [
    ("broker.backends.inmem.queue", "Subscription", True),
    ("broker.backends.jetstream.acker", "JetStreamAcker", True),
    ("broker.backends.kafka.queue.consumer", "QueueConsumer", True),
    ("broker.backends.pubsub.pull", "PullSettler", True),
    ("broker.backends.pubsub.receiver", "StreamSettler", False),
    ("broker.backends.pulsar.consumer", "PulsarAcker", True),
    ("broker.backends.rabbitmq.consumer", "RabbitmqAcker", False),
    ("broker.backends.redis.consumer", "RedisAcker", True),
    ("broker.backends.servicebus.consumer", "_Settler", True),
]


@pytest.mark.parametrize(("module", "name", "bulk"), BACKEND_ACKERS)
def test_backend_ackers_implement_the_contracts(module: str, name: str, bulk: bool) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, DeadLetterAcker)
    assert issubclass(cls, BulkAcker) is bulk
    # Typed message properties: the brokers whose properties carry types of their own.
    assert issubclass(cls, NativePropertiesAcker) is (name in ("RabbitmqAcker", "_Settler"))


class _Plain:
    """Acks, nacks and extends; neither dead-letters nor acks in bulk."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def ack(self, message: Message) -> None:
        self.calls.append(f"ack {message.id}")

    async def nack(self, message: Message, delay: float | None) -> None:
        self.calls.append(f"nack {message.id}")

    async def in_progress(self, message: Message) -> None:
        self.calls.append(f"extend {message.id}")


class _Full(_Plain):
    """Everything, the bulk path included."""

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        self.calls.append(f"dead {message.id} {reason}")

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        others = []
        for message in messages:
            if message.acker is self and not message.settled:
                message._state = 1
                self.calls.append(f"bulk {message.id}")
            elif message.acker is not self:
                others.append(message)
        return others


def test_the_checks_answer_per_class() -> None:
    assert not can_dead_letter(_Plain()) and not acks_in_bulk(_Plain())
    assert can_dead_letter(_Full()) and acks_in_bulk(_Full())


async def test_message_dead_letter_goes_through_the_protocol() -> None:
    acker = _Full()
    message = Message("1", b"x", acker=acker)
    await message.dead_letter("poison")
    assert acker.calls == ["dead 1 poison"] and message.state == "dead-lettered"
    plain = Message("2", b"x", acker=_Plain())
    with pytest.raises(NotSupported):
        await plain.dead_letter()
    assert plain.state == "pending"


class _Consumer:
    """The part of ConsumerTelemetry a traced acker calls."""

    def __init__(self) -> None:
        self.settled: list[str] = []

    async def settle(self, kind: str, message: Message, call: object, *args: object) -> None:
        self.settled.append(kind)
        await call(message, *args)  # type: ignore[operator]

    async def settle_bulk(self, count: int, bulk: object, messages: list[Message]) -> list[Message]:
        self.settled.append(f"bulk {count}")
        return await bulk(messages)  # type: ignore[no-any-return,operator]

    def settled_many(self, messages: list[Message]) -> None:
        self.settled.append(f"settled {len(messages)}")


async def test_traced_acker_keeps_the_wrapped_ackers_contracts() -> None:
    consumer = _Consumer()
    plain = TracedAcker.wrapping(_Plain(), consumer)  # type: ignore[arg-type]
    assert type(plain) is TracedAcker and not acks_in_bulk(plain)
    message = Message("1", b"x", acker=plain)
    with pytest.raises(NotSupported):
        await message.dead_letter()
    assert message.state == "pending"

    full_acker = _Full()
    full = TracedAcker.wrapping(full_acker, consumer)  # type: ignore[arg-type]
    assert isinstance(full, TracedBulkAcker) and acks_in_bulk(full) and can_dead_letter(full)
    mine = [Message(str(i), b"x", acker=full) for i in range(3)]
    other = Message("other", b"x", acker=_Plain())
    assert await full.ack_many([mine[0], other, mine[1], mine[2]]) == [other]
    assert full_acker.calls == ["bulk 0", "bulk 1", "bulk 2"]
    assert all(m.acker is full for m in mine)  # handed back to the traced acker after the bulk call
    await Message("d", b"x", acker=full).dead_letter("bad")
    assert full_acker.calls[-1] == "dead d bad"
    assert consumer.settled == ["bulk 3", "settled 3", "dead_letter"]
