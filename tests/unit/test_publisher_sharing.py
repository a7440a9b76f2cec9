"""``backend.publisher()`` is cheap: publishers share the backend's one publish driver (its SDK
client), a publisher's ``close()`` waits for its own sends and leaves that driver open, the
backend's ``close()`` closes it, and closed resources leave the backend's resource list.

The same behaviour on every server is in the conformance suite
(``test_publishers_share_one_client_and_leave_the_resource_list``); here, on ``inmem://``, the
large call counts and the close semantics.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

import pytest

import broker
from broker.driver.base import BackendBase
from broker.driver.publishing import DriverPublisher, Send
from broker.errors import ClosedError
from broker.message import OutboundMessage


@pytest.fixture
async def backend() -> AsyncIterator[BackendBase]:
    async with broker.connect(f"inmem://sharing-{uuid.uuid4().hex}") as connected:
        assert isinstance(connected, BackendBase)
        yield connected


async def test_100000_publisher_calls_keep_one_client_and_a_bounded_resource_list(
    backend: BackendBase,
) -> None:
    """Half the publishers are closed, half dropped unclosed; none stays in the list, all share one
    driver, and a message published through every 10,000th one arrives (nothing lost)."""
    topic = f"t-{uuid.uuid4().hex}"
    async with backend.messages(topic, "sub") as consumer:
        drivers: dict[int, object] = {}
        most = 0
        sent = 0
        for call in range(100_000):
            publisher = backend.publisher()
            assert isinstance(publisher, DriverPublisher)
            drivers.setdefault(id(publisher.driver), publisher.driver)
            if call % 10_000 == 0:
                await publisher.topic(topic).publish(OutboundMessage(str(call).encode()))
                sent += 1
            if call % 2:
                await publisher.close()
            if call % 10 == 0:
                most = max(most, len(backend.resources))
            if len(drivers) > 8 or most > 8:
                break
        del publisher  # no cycle collection needed: a dropped publisher leaves the list at once
        outcome = f"after {call + 1} calls: {len(drivers)} clients, up to {most} resources"
        assert (call + 1, len(drivers), most <= 2) == (100_000, 1, True), outcome
        assert backend.resources == (consumer,)
        got = [await consumer.next_message(timeout=1.0) for _ in range(sent)]
    assert sorted(int(m.data) for m in got) == list(range(0, 100_000, 10_000))


async def test_closed_transactional_publishers_and_consumers_leave_the_list(backend: BackendBase) -> None:
    """A transactional publisher owns its driver and leaves the list as it closes; closed
    consumers are swept from it, so opening and closing 500 of each keeps the list small."""
    for _ in range(500):
        async with backend.transactional_publisher():
            pass
        async with backend.messages("t", "sub"):
            pass
    assert len(backend._resources) <= 64  # swept whenever it reaches 64 entries (_SWEEP_AT)
    assert backend.resources == ()


async def test_close_waits_for_the_publishers_own_sends_and_leaves_the_client_open(
    backend: BackendBase,
) -> None:
    """``close()`` returns once the publisher's send in flight is done; the shared client stays
    open for the backend's other publishers; the backend's close ends them all."""
    release = asyncio.Event()

    async def held(topic: str, messages: Sequence[OutboundMessage], send: Send) -> None:
        await release.wait()
        await send(messages)

    topic = f"t-{uuid.uuid4().hex}"
    async with backend.messages(topic, "sub") as consumer:
        slow, other = backend.publisher(), backend.publisher()
        assert isinstance(slow, DriverPublisher) and isinstance(other, DriverPublisher)
        slow.wrap_send(held)
        publishing = asyncio.create_task(slow.topic(topic).publish(OutboundMessage(b"in flight")))
        await asyncio.sleep(0)
        closing = asyncio.create_task(slow.close())
        await asyncio.sleep(0.05)
        assert not closing.done(), "close() returned while its publish was in flight"
        release.set()
        await asyncio.wait_for(asyncio.gather(publishing, closing), 5.0)
        with pytest.raises(ClosedError):
            await slow.topic(topic).publish(OutboundMessage(b"late"))
        await other.topic(topic).publish(OutboundMessage(b"other"))  # the shared client is open
        got = [await consumer.next_message(timeout=1.0) for _ in range(2)]
    assert sorted(m.data for m in got) == [b"in flight", b"other"]
    kept = other.topic(topic)
    await backend.close()
    assert other.closed
    with pytest.raises(ClosedError):
        await kept.publish(OutboundMessage(b"after the backend closed"))
