"""Shared pull-side pieces: broker.driver.pulled shells, settle.ack_in_turn, publishing.ClosingDriver."""

from __future__ import annotations

from collections import deque

import pytest

from broker.driver.publishing import ClosingDriver
from broker.driver.pulled import PulledBatchedMessageIteration, PulledMessageIteration
from broker.driver.settling import ack_in_turn
from broker.errors import AckError, ClosedError, Timeout
from broker.message import Message


class _Taker:
    """A ``_take`` over a deque the test fills; records the calls."""

    def __init__(self) -> None:
        self.ready: deque[Message] = deque()
        self.calls: list[tuple[int, float | None]] = []
        self.closed = False

    async def _take(self, limit: int, timeout: float | None) -> list[Message]:
        self.calls.append((limit, timeout))
        if self.closed:
            raise ClosedError("closed")
        if not self.ready:
            raise Timeout(f"nothing within {timeout}s")
        return [self.ready.popleft() for _ in range(min(limit, len(self.ready)))]

    async def close(self) -> None:
        self.closed = True


class _Single(_Taker, PulledMessageIteration):
    pass


class _Batched(_Taker, PulledBatchedMessageIteration):
    def __init__(self, batch_size: int, batch_timeout: float) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout


def _messages(count: int) -> list[Message]:
    return [Message(str(i), b"x") for i in range(count)]


async def test_next_message_takes_one() -> None:
    consumer = _Single()
    consumer.ready.extend(_messages(3))
    assert (await consumer.next_message(timeout=2.0)).id == "0"
    assert consumer.calls == [(1, 2.0)]


async def test_next_message_raises_timeout() -> None:
    with pytest.raises(Timeout):
        await _Single().next_message(timeout=0.5)


async def test_async_for_ends_when_closed() -> None:
    consumer = _Single()
    consumer.ready.extend(_messages(2))
    seen = []
    async for message in consumer:
        seen.append(message.id)
        if len(seen) == 2:
            await consumer.close()
    assert seen == ["0", "1"]


async def test_next_batch_takes_up_to_batch_size_with_the_default_timeout() -> None:
    consumer = _Batched(batch_size=2, batch_timeout=0.25)
    consumer.ready.extend(_messages(3))
    assert [m.id for m in await consumer.next_batch()] == ["0", "1"]
    assert [m.id for m in await consumer.next_batch(timeout=1.0)] == ["2"]
    assert consumer.calls == [(2, 0.25), (2, 1.0)]


async def test_next_batch_answers_empty_after_the_timeout() -> None:
    consumer = _Batched(batch_size=5, batch_timeout=0.1)
    assert await consumer.next_batch() == []


async def test_next_batch_raises_closed() -> None:
    consumer = _Batched(batch_size=5, batch_timeout=0.1)
    await consumer.close()
    with pytest.raises(ClosedError):
        await consumer.next_batch()


class _InTurnAcker:
    """Acks one message per call; fails the ids in ``fail``."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.fail = fail
        self.sent: list[str] = []

    async def ack(self, message: Message) -> None:
        if message.id in self.fail:
            raise AckError(f"refused {message.id}")
        self.sent.append(message.id)

    async def nack(self, message: Message, delay: float | None) -> None:
        pass

    async def in_progress(self, message: Message) -> None:
        pass


async def test_ack_in_turn_acks_own_pending_messages_and_returns_the_others() -> None:
    mine, theirs = _InTurnAcker(), _InTurnAcker()
    messages = [Message(str(i), b"", acker=mine if i % 2 == 0 else theirs) for i in range(5)]
    await messages[2].ack()  # settled already: not sent again
    mine.sent.clear()
    others = await ack_in_turn(messages, mine, mine.ack)
    assert mine.sent == ["0", "4"]
    assert others == [messages[1], messages[3]]
    assert all(messages[i].state == "acked" for i in (0, 2, 4))
    assert messages[1].state == "pending"


async def test_ack_in_turn_leaves_the_failed_message_and_the_later_ones_pending() -> None:
    acker = _InTurnAcker(fail=frozenset({"1"}))
    messages = [Message(str(i), b"", acker=acker) for i in range(3)]
    with pytest.raises(AckError):
        await ack_in_turn(messages, acker, acker.ack)
    assert [m.state for m in messages] == ["acked", "pending", "pending"]
    assert acker.sent == ["0"]


async def test_ack_in_turn_takes_a_synchronous_send_too() -> None:
    """An SDK that acknowledges synchronously (Pulsar) passes a plain function: called, not awaited."""
    acker = _InTurnAcker(fail=frozenset({"2"}))
    sent: list[str] = []

    def send(message: Message) -> None:
        if message.id in acker.fail:
            raise AckError(f"refused {message.id}")
        sent.append(message.id)

    messages = [Message(str(i), b"", acker=acker) for i in range(4)]
    with pytest.raises(AckError):
        await ack_in_turn(messages, acker, send)
    assert sent == ["0", "1"]
    assert [m.state for m in messages] == ["acked", "acked", "pending", "pending"]


class _Driver(ClosingDriver):
    def __init__(self) -> None:
        self.closes = 0

    async def close(self) -> None:
        if not self._start_closing():
            return
        self.closes += 1


async def test_closing_driver_refuses_sends_once_closed_and_closes_once() -> None:
    driver = _Driver()
    driver._check_open("orders")
    assert not driver.closed
    await driver.close()
    await driver.close()
    assert driver.closed
    assert driver.closes == 1
    with pytest.raises(ClosedError, match="cannot publish to 'orders': the publisher is closed"):
        driver._check_open("orders")
