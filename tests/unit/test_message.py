"""Message and Record settlement rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from broker.driver.acking import LazyMessage, claim_acks
from broker.errors import AckError, NotSupported
from broker.message import Message, OutboundMessage, Record
from tests.unit.scripted import RecordingAcker


async def test_ack_twice_is_a_no_op() -> None:
    acker = RecordingAcker()
    message = Message("1", b"x", acker=acker)
    await message.ack()
    await message.ack()
    assert acker.acked == ["1"]
    assert message.settled and message.state == "acked"


async def test_ack_after_nack_and_nack_after_ack_raise() -> None:
    acker = RecordingAcker()
    nacked = Message("1", b"x", acker=acker)
    await nacked.nack(delay=1.5)
    await nacked.nack()  # twice: no-op
    with pytest.raises(AckError):
        await nacked.ack()
    acked = Message("2", b"x", acker=acker)
    await acked.ack()
    with pytest.raises(AckError):
        await acked.nack()
    with pytest.raises(AckError):
        await acked.in_progress()
    assert acker.nacked == [("1", 1.5)]


async def test_a_failed_ack_leaves_the_message_pending() -> None:
    class Failing(RecordingAcker):
        async def ack(self, message: Message) -> None:
            raise ConnectionError("broker unreachable")

    message = Message("1", b"x", acker=Failing())
    with pytest.raises(ConnectionError):
        await message.ack()
    assert message.state == "pending"


async def test_negative_nack_delay_is_rejected() -> None:
    with pytest.raises(ValueError):
        await Message("1", b"x", acker=RecordingAcker()).nack(delay=-1)


async def test_hand_built_messages_and_records_refuse_settlement() -> None:
    with pytest.raises(AckError):
        await Message("1", b"x").ack()
    with pytest.raises(AckError):
        await Record("t", 0, 0, b"x").ack()


async def test_dead_letter_needs_backend_support() -> None:
    with pytest.raises(NotSupported):
        await Message("1", b"x", acker=RecordingAcker()).dead_letter()


def test_outbound_defaults_and_repr_hides_acker() -> None:
    message = OutboundMessage(b"data")
    assert message.key is None and dict(message.attributes) == {}
    assert "acker" not in repr(Message("1", b"x", acker=RecordingAcker()))


class _Raw:
    """A client message stand-in counting how often each field is decoded."""

    def __init__(self) -> None:
        self.decoded: list[str] = []

    def get(self, name: str, value: Any) -> Any:
        self.decoded.append(name)
        return value


class _Lazy(LazyMessage):
    __slots__ = ()
    decoders = {
        "id": lambda raw: raw.get("id", "7"),
        "key": lambda raw: raw.get("key", None),
        "attributes": lambda raw: raw.get("attributes", {"a": "b"}),
        "publish_time": lambda raw: raw.get("publish_time", 12.5),
        "delivery_attempt": lambda raw: raw.get("delivery_attempt", 2),
    }


async def test_lazy_messages_decode_each_field_once_on_first_read() -> None:
    raw = _Raw()
    message = _Lazy(b"data", raw, RecordingAcker(), 3.0)
    assert raw.decoded == []  # building it decodes nothing
    assert (message.data, message.ingestion_time, message.state) == (b"data", 3.0, "pending")
    assert message.key is None and message.key is None
    assert raw.decoded == ["key"]
    eager = Message("7", b"data", None, {"a": "b"}, 12.5, 3.0, 2)
    names = [f.name for f in dataclasses.fields(Message) if f.compare]
    assert [getattr(message, n) for n in names] == [getattr(eager, n) for n in names]
    assert sorted(raw.decoded) == ["attributes", "delivery_attempt", "id", "key", "publish_time"]
    message.key = "set"  # fields stay assignable
    assert message.key == "set"
    with pytest.raises(AttributeError):
        message.no_such_field  # noqa: B018
    await message.ack()
    assert message.state == "acked"


async def test_lazy_messages_built_many_at_once_equal_those_built_one_by_one() -> None:
    acker = RecordingAcker()
    raws = [_Raw(), _Raw(), _Raw()]
    data = {id(raws[0]): b"a", id(raws[1]): None, id(raws[2]): b"c"}
    many = _Lazy.many(raws, lambda raw: data[id(raw)], acker, 4.0)
    single = [_Lazy(data[id(raw)] or b"", raw, acker, 4.0) for raw in raws]
    assert [type(m) for m in many] == [_Lazy] * 3
    names = [f.name for f in dataclasses.fields(Message) if f.init]  # not the typed-consumer state
    for built, one in zip(many, single, strict=True):
        assert [getattr(built, n) for n in names] == [getattr(one, n) for n in names]
    assert [m.data for m in many] == [b"a", b"", b"c"]
    await many[1].ack()
    assert acker.acked == ["7"] and many[1].state == "acked" and many[0].state == "pending"


async def test_claim_acks_marks_the_pending_messages_of_one_acker_and_returns_the_rest() -> None:
    mine, theirs = RecordingAcker(), RecordingAcker()
    pending = [Message(str(i), b"x", acker=mine) for i in range(3)]
    settled = Message("s", b"x", acker=mine)
    await settled.ack()
    nacked = Message("n", b"x", acker=mine)
    await nacked.nack()
    other = Message("o", b"x", acker=theirs)
    claimed, others = claim_acks([pending[0], other, settled, pending[1], nacked, pending[2]], mine)
    assert claimed == [pending[0], pending[1], pending[2]]
    assert all(m.state == "acked" for m in claimed)
    assert others == [other] and other.state == "pending"
    assert nacked.state == "nacked"  # a settled message is neither claimed nor handed back
    assert mine.acked == ["s"]  # claiming sends nothing: the bulk acker does
