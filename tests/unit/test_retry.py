"""Retry policies (broker.retry) on the in-memory broker: every rule, with small counts and delays."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import broker
from broker import adapt
from broker.backoff import Backoff
from broker.driver.testing.harness import collect, drain
from broker.errors import ConfigError
from broker.message import Message, OutboundMessage, Record
from broker.retry import (
    ATTR_ATTEMPTS,
    ATTR_ERROR,
    ATTR_ERROR_TYPE,
    ATTR_FIRST_FAILURE,
    ATTR_LAST_FAILURE,
    ATTR_MESSAGE_ID,
    ATTR_REASON,
    ATTR_SUBSCRIPTION,
    ATTR_TOPIC,
    DeadLetterTopic,
    ErrorThreshold,
    RetryPolicy,
    ThresholdEvent,
)
from tests.unit.scripted import ScriptedIterator

FAST = Backoff(0.01, 1.0, 0.01)


@pytest.fixture
async def backend() -> AsyncIterator[broker.Backend]:
    async with broker.connect(f"inmem://retry-{uuid.uuid4().hex}") as connected:
        yield connected


async def _publish(backend: broker.Backend, topic: str, *values: str, key: str | None = None) -> None:
    await (
        backend.publisher()
        .topic(topic)
        .batch_publish(*(OutboundMessage(v.encode(), key=key) for v in values))
    )


async def _run_until(
    receiver: Any, handler: Callable[[Message], Awaitable[None]], done: Callable[[], bool], timeout: float = 5
) -> None:
    task = asyncio.ensure_future(receiver.receive(handler))
    try:
        async with asyncio.timeout(timeout):
            while not done():  # noqa: ASYNC110 - counting handler calls
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# -- backoff ---------------------------------------------------------------------------------
def test_backoff_jitter_bounds_and_determinism() -> None:
    plain = Backoff(1.0, 2.0, 8.0)
    assert [plain.delay(n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    full = Backoff(1.0, 2.0, 8.0, jitter="full", random=random.Random(7).random)
    equal = Backoff(1.0, 2.0, 8.0, jitter="equal", random=random.Random(7).random)
    for attempt in range(1, 8):
        base = plain.delay(attempt)
        for _ in range(50):
            assert 0 <= full.delay(attempt) <= base
            assert base / 2 <= equal.delay(attempt) <= base
    again = Backoff(1.0, 2.0, 8.0, jitter="full", random=random.Random(7).random)
    first = Backoff(1.0, 2.0, 8.0, jitter="full", random=random.Random(7).random)
    assert [again.delay(3) for _ in range(5)] == [first.delay(3) for _ in range(5)]
    assert Backoff(1.0, 2.0, 8.0, jitter="full", random=lambda: 0.5).delay(3) == 2.0
    assert Backoff(1.0, 2.0, 8.0, jitter="equal", random=lambda: 0.0).delay(3) == 2.0
    with pytest.raises(ConfigError):
        Backoff(jitter="some")  # type: ignore[arg-type]


def test_policy_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigError):
        RetryPolicy(mode="sideways")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=3, dead_letter=None)
    with pytest.raises(ConfigError):
        RetryPolicy(non_retryable=(ValueError,), dead_letter=None)
    with pytest.raises(ConfigError):
        RetryPolicy(non_retryable=(int,))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        RetryPolicy(dead_letter="elsewhere")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        RetryPolicy(on_threshold=print)
    with pytest.raises(ConfigError):
        ErrorThreshold(failures=0)
    with pytest.raises(ConfigError):
        DeadLetterTopic("")
    with pytest.raises(ConfigError, match="publisher"):  # a DeadLetterTopic needs somewhere to publish
        adapt.receiver(
            ScriptedIterator(), retry=RetryPolicy(max_attempts=2, dead_letter=DeadLetterTopic("d"))
        )
    with pytest.raises(ConfigError, match="not both"):
        adapt.receiver(ScriptedIterator(), nack_delay=1.0, retry=RetryPolicy())
    with pytest.raises(ConfigError):
        adapt.batched_receiver(ScriptedIterator(), retry=RetryPolicy(mode="ordered"))


# -- attempts and backoff --------------------------------------------------------------------
async def test_fails_twice_then_succeeds_with_broker_counted_attempts(backend: broker.Backend) -> None:
    attempts: list[int | None] = []

    async def handler(message: Message) -> None:
        attempts.append(message.delivery_attempt)
        if len(attempts) < 3:
            raise RuntimeError("transient")
        await message.ack()

    policy = RetryPolicy(max_attempts=5, backoff=FAST, dead_letter=DeadLetterTopic("dlq"))
    async with backend.messages("dlq", "inspect") as dead:
        receiver = backend.receiver("t", "s", retry=policy)  # subscribed from here on
        await _publish(backend, "t", "x")
        await _run_until(receiver, handler, lambda: len(attempts) >= 3)
        assert attempts == [1, 2, 3]  # inmem counts deliveries: the policy uses its count
        assert await drain(dead, 0.1) == []
    async with backend.messages("t", "s") as again:
        assert await drain(again, 0.1) == []  # acked once, not redelivered


async def test_counts_attempts_itself_where_the_broker_does_not() -> None:
    source = ScriptedIterator()  # delivery_attempt None: the FailureCounter counts
    calls = 0

    async def handler(message: Message) -> None:
        nonlocal calls
        calls += 1
        if calls < 4:
            source.feed(Message("m", b"m", acker=source.acker))  # the broker redelivers it
        raise RuntimeError("always")

    source.feed(Message("m", b"m", acker=source.acker))
    backoff = Backoff(1.0, 2.0, 100.0)
    pub = broker.connect(f"inmem://{uuid.uuid4().hex}")
    policy = RetryPolicy(
        max_attempts=4, backoff=backoff, dead_letter=DeadLetterTopic("dlq", publisher=pub.publisher())
    )
    receiver = adapt.receiver(source, retry=policy)
    await _run_until(receiver, handler, lambda: calls >= 4 and len(source.acker.acked) == 1)
    assert source.acker.nacked == [("m", 1.0), ("m", 2.0), ("m", 4.0)]  # backoff by counted attempt
    assert source.acker.acked == ["m"]  # the 4th failure: dead-lettered (published, then acked)
    await pub.close()


# -- dead letters ----------------------------------------------------------------------------
async def test_poison_message_reaches_the_dead_letter_topic_with_why(backend: broker.Backend) -> None:
    handled: list[str] = []

    async def handler(message: Message) -> None:
        if message.data == b"poison":
            raise ValueError("cannot parse " + "x" * 100)
        handled.append(message.data.decode())
        await message.ack()

    policy = RetryPolicy(
        max_attempts=2, backoff=FAST, dead_letter=DeadLetterTopic("dlq", max_error_length=20)
    )
    async with backend.messages("dlq", "inspect") as dead, backend.messages("orders", "billing"):
        receiver = backend.receiver("orders", "billing", concurrency=2, retry=policy)
        await _publish(backend, "orders", "a", "poison", "b")
        await (
            backend.publisher()
            .topic("orders")
            .publish(OutboundMessage(b"c", key="k", attributes={"trace": "t1"}))
        )
        task = asyncio.ensure_future(receiver.receive(handler))
        (letter,) = await collect(dead, 1, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert sorted(handled) == ["a", "b", "c"]
    assert letter.data == b"poison"
    why = dict(letter.attributes)
    assert why[ATTR_TOPIC] == "orders"
    assert why[ATTR_SUBSCRIPTION] == "billing"
    assert why[ATTR_ERROR_TYPE] == "builtins.ValueError"
    assert why[ATTR_ERROR] == ("cannot parse " + "x" * 100)[:20]
    assert why[ATTR_ATTEMPTS] == "2"
    assert "max_attempts=2" in why[ATTR_REASON]
    assert why[ATTR_MESSAGE_ID]
    assert why[ATTR_FIRST_FAILURE] <= why[ATTR_LAST_FAILURE]
    assert why[ATTR_FIRST_FAILURE].endswith("Z")


async def test_non_retryable_goes_straight_to_the_dead_letter(backend: broker.Backend) -> None:
    calls = Counter[str]()

    async def handler(message: Message) -> None:
        calls[message.data.decode()] += 1
        raise KeyError("no such customer")

    policy = RetryPolicy(
        max_attempts=10, backoff=FAST, dead_letter=DeadLetterTopic("dlq"), non_retryable=(KeyError,)
    )
    async with backend.messages("dlq", "inspect") as dead, backend.messages("t", "s"):
        receiver = backend.receiver("t", "s", retry=policy)
        await _publish(backend, "t", "one")
        task = asyncio.ensure_future(receiver.receive(handler))
        (letter,) = await collect(dead, 1, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert calls == {"one": 1}
    assert letter.attributes[ATTR_ATTEMPTS] == "1"
    assert letter.attributes[ATTR_REASON] == "non-retryable KeyError"


async def test_native_dead_letter(backend: broker.Backend) -> None:
    calls = 0

    async def handler(message: Message) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("poison")

    policy = RetryPolicy(max_attempts=3, backoff=FAST)  # dead_letter="native"
    async with backend.messages("native-dlq", "inspect") as dead:
        receiver = backend.receiver("t", "s", retry=policy, dead_letter_topic="native-dlq")
        async with backend.messages("t", "s", dead_letter_topic="native-dlq"):
            await _publish(backend, "t", "p")
        task = asyncio.ensure_future(receiver.receive(handler))
        (letter,) = await collect(dead, 1, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert letter.data == b"p"
    assert calls == 3


async def test_a_failed_dead_letter_publish_never_loses_the_message() -> None:
    source = ScriptedIterator()
    source.feed(1)

    class BrokenTopic:
        name = "dlq"

        async def publish(self, message: OutboundMessage, *, timeout: float | None = None) -> None:
            raise ConnectionError("down")

    class BrokenPublisher:
        def topic(self, name: str) -> BrokenTopic:
            return BrokenTopic()

    async def handler(message: Message) -> None:
        raise ValueError("bad")

    policy = RetryPolicy(
        dead_letter=DeadLetterTopic("dlq", publisher=BrokenPublisher()),  # type: ignore[arg-type]
        non_retryable=(ValueError,),
        backoff=FAST,
    )
    await _run_until(adapt.receiver(source, retry=policy), handler, lambda: bool(source.acker.nacked))
    assert source.acker.acked == []  # not acked: it was not dead-lettered
    assert source.acker.nacked == [("1", 0.01)]


# -- ordered mode ----------------------------------------------------------------------------
async def test_ordered_mode_blocks_only_its_key(backend: broker.Backend) -> None:
    seen: list[str] = []
    failures = Counter[str]()
    a_blocked = asyncio.Event()
    b_done = asyncio.Event()

    async def handler(message: Message) -> None:
        value = message.data.decode()
        if value == "a1" and failures[value] < 2:
            failures[value] += 1
            a_blocked.set()
            await b_done.wait()  # the other key flows meanwhile
            raise RuntimeError("transient")
        seen.append(value)
        if sum(v.startswith("b") for v in seen) == 3:
            b_done.set()
        await message.ack()

    policy = RetryPolicy(max_attempts=5, backoff=FAST, mode="ordered")
    async with backend.messages("t", "s"):
        pass
    receiver = backend.receiver("t", "s", concurrency=3, retry=policy)
    for value in ("a1", "a2", "b1", "a3", "b2", "b3"):
        await _publish(backend, "t", value, key=value[0])
    await _run_until(receiver, handler, lambda: len(seen) == 6)
    a_order = [v for v in seen if v.startswith("a")]
    assert a_order == ["a1", "a2", "a3"]  # retried in place: a2 and a3 waited
    assert seen.index("b3") < seen.index("a1")  # key b was never blocked by key a
    assert failures["a1"] == 2


async def test_ordered_records_retried_in_place_then_dead_lettered(backend: broker.Backend) -> None:
    await _publish(backend, "log", "r0", "bad", "r2", key="k")
    retrier = RetryPolicy(
        max_attempts=3, backoff=FAST, mode="ordered", dead_letter=DeadLetterTopic("log-dlq")
    ).bind(publisher=backend.publisher(), subscription="g")
    calls = Counter[str]()
    outcomes = []

    async def handler(record: Record) -> None:
        calls[(record.value or b"").decode()] += 1
        if record.value == b"bad":
            raise ValueError("bad record")
        await record.ack()

    async with backend.messages("log-dlq", "inspect") as dead:
        async with backend.records("log", "g") as records:
            for _ in range(3):
                outcomes.append(await retrier.handle(await records.next_record(timeout=5), handler))
        (letter,) = await collect(dead, 1, 5)
    assert outcomes == ["handled", "dead-lettered", "handled"]
    assert calls == {"r0": 1, "bad": 3, "r2": 1}
    assert letter.attributes[ATTR_TOPIC] == "log"
    assert letter.attributes[ATTR_MESSAGE_ID].startswith("log/")
    with pytest.raises(ConfigError):
        await RetryPolicy().bind().handle(Record("t", 0, 0, b""), handler)


# -- error threshold -------------------------------------------------------------------------
async def test_error_threshold_pauses_and_calls_back(backend: broker.Backend) -> None:
    events: list[ThresholdEvent] = []
    calls: list[float] = []
    healthy = False

    async def on_threshold(event: ThresholdEvent) -> None:
        events.append(event)

    async def handler(message: Message) -> None:
        calls.append(time.monotonic())
        if not healthy:
            raise RuntimeError("downstream is down")
        await message.ack()

    policy = RetryPolicy(
        backoff=FAST,
        error_threshold=ErrorThreshold(failures=3, window=10.0, cooldown=0.4),
        on_threshold=on_threshold,
    )
    async with backend.messages("t", "s"):
        pass
    receiver = backend.receiver("t", "s", retry=policy)
    await _publish(backend, "t", *(str(i) for i in range(6)))
    task = asyncio.ensure_future(receiver.receive(handler))
    try:
        async with asyncio.timeout(5):
            while not events:  # noqa: ASYNC110 - waiting for the callback
                await asyncio.sleep(0.01)
        tripped = time.monotonic()
        healthy = True
        assert receiver.retrier.paused  # type: ignore[attr-defined]
        async with asyncio.timeout(5):
            while len([c for c in calls if c > tripped]) < 6:  # noqa: ASYNC110 - counting calls
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(events) == 1 and events[0].failures == 3 and isinstance(events[0].error, RuntimeError)
    after = [c for c in calls if c > tripped]
    # At most the message already taken before the pause runs during the cool-down.
    assert len([c for c in after if c < tripped + 0.35]) <= 1
    assert not receiver.retrier.paused  # type: ignore[attr-defined]


# -- graceful drain --------------------------------------------------------------------------
async def test_stop_drains_in_flight_handlers_and_nacks_the_rest() -> None:
    source = ScriptedIterator()
    source.feed(*range(6))
    started: list[str] = []
    release = asyncio.Event()

    async def handler(message: Message) -> None:
        started.append(message.id)
        if message.id == "1":
            await asyncio.sleep(3600)  # will not finish within the drain timeout
        await release.wait()
        await message.ack()

    receiver = adapt.receiver(source, concurrency=2, drain_timeout=0.3)
    task = asyncio.ensure_future(receiver.receive(handler))
    async with asyncio.timeout(5):
        while len(started) < 2:  # noqa: ASYNC110 - waiting for both workers
            await asyncio.sleep(0.01)
    receiver.stop()  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    release.set()  # "0" finishes within the drain timeout
    async with asyncio.timeout(5):
        await task  # returns (no CancelledError) after the drain
    assert started == ["0", "1"]
    assert source.acker.acked == ["0"]
    nacked = {m for m, _ in source.acker.nacked}
    assert "1" in nacked  # interrupted at the drain timeout
    assert "0" not in nacked
    assert "2" in nacked  # taken (queued) but never started
    assert source.pulls <= 4  # stopped taking new messages


async def test_stop_drains_ordered_receivers_and_nacks_what_waits_behind_a_key() -> None:
    source = ScriptedIterator()
    for i in range(4):
        source.feed(Message(str(i), b"", key="same", acker=source.acker))
    gate = asyncio.Event()

    async def handler(message: Message) -> None:
        await gate.wait()
        await message.ack()

    receiver = adapt.receiver(source, concurrency=3, retry=RetryPolicy(mode="ordered"), drain_timeout=1.0)
    task = asyncio.ensure_future(receiver.receive(handler))
    await asyncio.sleep(0.1)
    receiver.stop()  # type: ignore[attr-defined]
    gate.set()
    async with asyncio.timeout(5):
        await task
    assert source.acker.acked == ["0"]
    assert sorted(m for m, _ in source.acker.nacked) == ["1", "2", "3"]


async def test_batched_receiver_applies_the_policy_per_message_and_stops() -> None:
    source = ScriptedIterator()
    source.feed(1, 2, 3)

    async def handler(batch: list[Message]) -> None:
        await batch[0].ack()  # settled before the failure: left alone
        raise RuntimeError("the rest failed")

    receiver = adapt.batched_receiver(source, retry=RetryPolicy(backoff=Backoff(0.5, 2.0, 5.0)))
    task = asyncio.ensure_future(receiver.receive_batch(handler))
    async with asyncio.timeout(5):
        while len(source.acker.nacked) < 2:  # noqa: ASYNC110 - counting settlements
            await asyncio.sleep(0.01)
    receiver.stop()  # type: ignore[attr-defined]
    async with asyncio.timeout(5):
        await task
    assert source.acker.acked == ["1"]
    assert source.acker.nacked == [("2", 0.5), ("3", 0.5)]
