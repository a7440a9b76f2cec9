"""Conformance tests of the portable retry layer (:mod:`broker.retry`), mixed into the suite.

Few and fast: a handler failing twice then succeeding is retried and its message acked once;
a poison message reaches a :class:`~broker.retry.DeadLetterTopic` with the why-attributes while
the other messages flow.
"""

from __future__ import annotations

import asyncio

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

from broker.backoff import Backoff
from broker.driver.testing.harness import Harness, collect, need, subscribed_topic
from broker.message import Message, OutboundMessage
from broker.retry import (
    ATTR_ATTEMPTS,
    ATTR_ERROR,
    ATTR_ERROR_TYPE,
    ATTR_REASON,
    ATTR_SUBSCRIPTION,
    ATTR_TOPIC,
    DeadLetterTopic,
    RetryPolicy,
)

__all__ = ["RetrySuite"]

#: Short, fixed retry delays: the tests count handler calls, not time.
_FAST = Backoff(0.05, 1.0, 0.05)


async def _stop(task: asyncio.Future[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class RetrySuite:
    """Retry policies applied by ``backend.receiver(..., retry=RetryPolicy(...))`` on every backend."""

    async def test_retry_policy_retries_then_acks_once(self, harness: Harness) -> None:
        """A handler failing twice then succeeding: called three times, the message acked once."""
        need(harness, "messages", "nack_redelivers")
        topic, sub = await subscribed_topic(harness, "retry")
        calls = 0
        acked = asyncio.Event()

        async def handler(message: Message) -> None:
            nonlocal calls
            calls += 1
            if calls <= 2:
                raise RuntimeError("transient failure")
            await message.ack()
            acked.set()

        policy = RetryPolicy(max_attempts=5, backoff=_FAST)
        receiver = harness.backend.receiver(topic, sub, retry=policy)
        task = asyncio.ensure_future(receiver.receive(handler))
        try:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"flaky"))
            async with asyncio.timeout(harness.patience * 2):
                await acked.wait()
        finally:
            await _stop(task)
        assert calls == 3
        async with harness.backend.messages(topic, sub) as consumer:
            with pytest.raises(TimeoutError):  # acked (not nacked by the receiver's stop): not redelivered
                # A nack redelivers at once (test_nack_redelivers): 3 s covers it on a loaded machine,
                # also where the shortest ack deadline is 10 s.
                await consumer.next_message(timeout=min(harness.short_ack_deadline, 3.0))

    async def test_retry_poison_message_reaches_the_dead_letter_topic(self, harness: Harness) -> None:
        """After max_attempts a poison message is published to the DeadLetterTopic with why."""
        need(harness, "messages", "nack_redelivers")
        topic, sub = await subscribed_topic(harness, "poison")
        dlq, inspect = harness.name("dlq"), harness.name("inspect")
        await harness.prepare(dlq, [inspect])
        handled: set[bytes] = set()
        poison_calls = 0

        async def handler(message: Message) -> None:
            nonlocal poison_calls
            if message.data == b"poison":
                poison_calls += 1
                raise ValueError("cannot parse this")
            handled.add(message.data)
            await message.ack()

        policy = RetryPolicy(max_attempts=2, backoff=_FAST, dead_letter=DeadLetterTopic(dlq))
        async with harness.backend.messages(dlq, inspect) as dead:
            receiver = harness.backend.receiver(topic, sub, concurrency=2, retry=policy)
            task = asyncio.ensure_future(receiver.receive(handler))
            try:
                await (
                    harness.backend.publisher()
                    .topic(topic)
                    .batch_publish(
                        OutboundMessage(b"a"),
                        OutboundMessage(b"poison", attributes={"origin": "test"}),
                        OutboundMessage(b"b"),
                        OutboundMessage(b"c"),
                    )
                )
                (letter,) = await collect(dead, 1, harness.patience * 2)
                async with asyncio.timeout(harness.patience):
                    while len(handled) < 3:  # noqa: ASYNC110 - counting handled messages
                        await asyncio.sleep(0.02)
            finally:
                await _stop(task)
        assert handled == {b"a", b"b", b"c"}
        assert poison_calls == 2
        assert letter.data == b"poison"
        why = dict(letter.attributes)
        assert why["origin"] == "test"  # the original attributes are kept
        assert why[ATTR_TOPIC] == topic
        assert why[ATTR_SUBSCRIPTION] == sub
        assert why[ATTR_ERROR_TYPE] == "builtins.ValueError"
        assert why[ATTR_ERROR] == "cannot parse this"
        assert why[ATTR_ATTEMPTS] == "2"
        assert "max_attempts=2" in why[ATTR_REASON]
