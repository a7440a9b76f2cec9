"""Cancelling a receiver returns in bounded time when Service Bus stops answering settlements.

On cancel a receiver nacks (abandons) the messages it took but did not handle; a broker that
never answers those settlements must not hold the cancel: after a bound the messages are left
to their lock expiry, so they come back (never acked, never lost). The FAKE's
``withhold_outcomes`` ignores every settlement, as a broker that stops answering does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker import Message, OutboundMessage
from broker.adapt import _common
from broker.retry import DeadLetterTopic, RetryPolicy
from broker.testing import collect
from tests.servicebus_fake import FakeServiceBus

#: The receivers' bound on nacking at shutdown, shortened here so that the test is cheap.
NACK_BOUND = 0.5

#: What a cancel may take: two nack bounds (the feeder's and the workers' leftovers) and room for a
#: loaded machine; far under the SDK's own 60 s wait for a settlement's outcome (which it retries).
CANCEL_BOUND = 2 * NACK_BOUND + 9.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def backend(fake_servicebus: FakeServiceBus) -> AsyncIterator[broker.Backend]:
    async with broker.connect(fake_servicebus.settings) as connected:
        yield connected


async def test_cancel_with_an_unanswered_ack_returns_and_the_message_comes_back(
    fake_servicebus: FakeServiceBus, backend: broker.Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler's ack is on the wire and unanswered when ``receive()`` is cancelled (the retry
    conformance test stops its receiver so, right after its handler counted a message): the
    cancel returns within the bound, and the message, whose ack was never applied, comes back."""
    queue, dead = _name("q"), _name("dlq")
    fake_servicebus.create_queue(queue, lock_duration=1.0)
    fake_servicebus.create_queue(dead)
    monkeypatch.setattr(_common, "SHUTDOWN_NACK_TIMEOUT", NACK_BOUND)
    acking = asyncio.Event()

    async def handler(message: Message) -> None:
        acking.set()
        await message.ack()

    policy = RetryPolicy(max_attempts=2, dead_letter=DeadLetterTopic(dead))
    receiver = backend.receiver(queue, "", concurrency=2, retry=policy)
    await backend.publisher().topic(queue).publish(OutboundMessage(b"m"))
    fake_servicebus.withhold_outcomes()
    try:
        task = asyncio.ensure_future(receiver.receive(handler))
        async with asyncio.timeout(10):
            await acking.wait()
        await asyncio.sleep(0.2)  # the disposition is on the wire; its answer never comes
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=CANCEL_BOUND)
        assert task in done, f"cancelling the receiver did not return within {CANCEL_BOUND:g}s"
        assert task.cancelled()
    finally:
        fake_servicebus.withhold_outcomes(False)
    async with backend.messages(queue, "") as consumer:
        (again,) = await collect(consumer, 1, 10)  # the lock ran out: redelivered, not lost
    assert again.data == b"m"
    assert fake_servicebus.count(queue) == 0
