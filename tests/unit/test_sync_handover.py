"""The blocking publisher's lock-free hand-over: its bound on pending messages, its gate once the
publisher is closed, and the loop side sending checked messages through interceptors and
middleware without checking them again."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence

import pytest

import broker
import broker.sync
from broker import OutboundMessage
from broker.driver.publishing import DriverPublisher, DriverTopic
from broker.errors import ClosedError, Timeout


@pytest.fixture
def backend() -> Iterator[broker.sync.SyncBackend]:
    with broker.sync.connect(f"inmem://handover-{uuid.uuid4().hex}", timeout=30) as connected:
        yield connected


def _hold_loop(publisher: broker.sync.SyncPublisher) -> threading.Event:
    """Keep the loop thread busy (the drainer cannot run) until the returned event is set."""
    release, held = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(30)

    publisher._portal.call_soon(hold)
    assert held.wait(10), "the loop thread did not pick up the hold"
    return release


def test_the_lock_free_publish_stops_at_max_pending_and_loses_nothing(
    backend: broker.sync.SyncBackend,
) -> None:
    consumer = backend.messages("bounded", "s")
    publisher = backend.publisher(max_pending=50)
    handle = publisher.topic("bounded")
    release = _hold_loop(publisher)
    try:
        for i in range(50):
            handle.publish_nowait(OutboundMessage(b"%d" % i))
        assert publisher.pending == 50
        with pytest.raises(Timeout, match="stayed full"):  # the 51st finds no room: not queued
            handle.publish_nowait(OutboundMessage(b"over"), timeout=0.2)
    finally:
        release.set()
    publisher.flush(timeout=10)
    handle.publish_nowait(OutboundMessage(b"50"))  # room again once the drainer sent them
    publisher.flush(timeout=10)
    got = [consumer.next_message(timeout=5) for _ in range(51)]
    assert [m.data for m in got] == [b"%d" % i for i in range(51)]
    for message in got:
        message.ack()
    with pytest.raises(Timeout):
        consumer.next_message(timeout=0.2)


def test_a_closed_publisher_refuses_the_lock_free_publish(backend: broker.sync.SyncBackend) -> None:
    publisher = backend.publisher()
    handle = publisher.topic("closed")
    handle.publish_nowait(OutboundMessage(b"before"))  # the hand-over's common call, warmed up
    publisher.close()
    with pytest.raises(ClosedError):
        handle.publish_nowait(OutboundMessage(b"after"))
    assert publisher.pending == 0


async def test_send_checked_runs_interceptors_and_middleware() -> None:
    async with broker.connect(f"inmem://checked-{uuid.uuid4().hex}") as backend:
        async with backend.messages("checked", "s") as stream:
            publisher = backend.publisher()
            assert isinstance(publisher, DriverPublisher)
            seen: list[int] = []

            def tag(topic: str, messages: Sequence[OutboundMessage]) -> Sequence[OutboundMessage]:
                return [OutboundMessage(m.data, m.key, {"via": "interceptor"}) for m in messages]

            async def count(
                topic: str,
                messages: Sequence[OutboundMessage],
                send: Callable[[Sequence[OutboundMessage]], Awaitable[None]],
            ) -> None:
                seen.append(len(messages))
                await send(messages)

            publisher.intercept(tag)
            publisher.wrap_send(count)
            topic = publisher.topic("checked")
            assert type(topic) is DriverTopic
            await topic.send_checked(())  # nothing to send: no send at all
            await topic.send_checked((OutboundMessage(b"a"), OutboundMessage(b"b")))
            got = [await stream.next_message(timeout=5) for _ in range(2)]
            assert [(m.data, dict(m.attributes)) for m in got] == [
                (b"a", {"via": "interceptor"}),
                (b"b", {"via": "interceptor"}),
            ]
            assert seen == [2]
