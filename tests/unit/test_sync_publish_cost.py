"""What one non-waiting publish costs the calling thread: counted, not timed.

``publish_nowait`` runs once per message on the user's thread, so its per-message Python work is
what a blocking publisher pays over a raw SDK producer. These tests count that work (Python
function calls seen by a profile hook on the caller's thread, objects left for the garbage
collector per queued message) while the loop thread is held busy, then let it go and count what
arrives: every message, once, in order. Counting does not depend on the machine's load.
"""

from __future__ import annotations

import gc
import sys
import threading
import uuid
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

import broker.sync
from broker import OutboundMessage
from broker.errors import InvalidMessage

COUNT = 2_000
ATTRIBUTES = {"source": "test"}


@pytest.fixture
def backend() -> Iterator[broker.sync.SyncBackend]:
    with broker.sync.connect(f"inmem://cost-{uuid.uuid4().hex}", timeout=30) as connected:
        yield connected


class _HeldLoop:
    """Keeps the portal's loop thread busy until released: the drainer cannot run meanwhile."""

    def __init__(self, publisher: broker.sync.SyncPublisher) -> None:
        self._release = threading.Event()
        self._held = threading.Event()
        publisher._portal.call_soon(self._hold)
        assert self._held.wait(10), "the loop thread did not pick up the hold"

    def _hold(self) -> None:
        self._held.set()
        self._release.wait(30)

    def release(self) -> None:
        self._release.set()


def _python_calls_while(run: Any) -> int:
    """The number of Python-level function calls made on this thread while ``run()`` runs, not
    counting the calls of ``publish_nowait`` itself."""
    calls = 0
    own = broker.sync.SyncTopic.publish_nowait.__code__

    def count(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is not own:
            calls += 1

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def _drain_all(stream: broker.sync.SyncMessages, count: int) -> list[bytes]:
    seen: list[bytes] = []
    while len(seen) < count:  # a missing message is a Timeout, never a hang
        message = stream.next_message(timeout=10)
        seen.append(message.data)
        message.ack()
    stream.flush()
    return seen


def test_publish_nowait_makes_no_python_call_per_message(backend: broker.sync.SyncBackend) -> None:
    stream = backend.messages("cost", "all", read_ahead=COUNT)
    publisher = backend.publisher()
    topic = publisher.topic("cost")
    topic.publish(OutboundMessage(b"warm-up"))
    assert stream.next_message(timeout=10).data == b"warm-up"
    batch = [OutboundMessage(b"%d" % i, f"k{i % 10}", ATTRIBUTES) for i in range(COUNT)]
    held = _HeldLoop(publisher)
    try:

        def publish_all() -> None:
            for message in batch:
                topic.publish_nowait(message)

        calls = _python_calls_while(publish_all)
    finally:
        held.release()
    # the one wake of the idle drainer (its call into the loop) and one validation of the shared
    # attributes: a constant, nothing per message
    assert calls <= 20, f"{calls} Python calls made by {COUNT} publish_nowait calls"
    publisher.flush(timeout=30)
    assert _drain_all(stream, COUNT) == [m.data for m in batch]


def test_a_queued_message_leaves_no_collected_object_per_message(backend: broker.sync.SyncBackend) -> None:
    stream = backend.messages("alloc", "all", read_ahead=COUNT)
    publisher = backend.publisher()
    topic = publisher.topic("alloc")
    topic.publish(OutboundMessage(b"warm-up"))
    stream.next_message(timeout=10)
    batch = [OutboundMessage(b"%d" % i, None, ATTRIBUTES) for i in range(COUNT)]
    held = _HeldLoop(publisher)
    gc.disable()
    try:
        gc.collect()
        before = len(gc.get_objects())
        for message in batch:
            topic.publish_nowait(message)
        grown = len(gc.get_objects()) - before
        assert publisher.pending == COUNT
    finally:
        gc.enable()
        held.release()
    # an object per queued message (a tuple, a closure) is one more for the cyclic garbage
    # collector to walk, again and again, while the messages wait
    assert grown < COUNT // 4, f"{grown} objects tracked by the garbage collector for {COUNT} queued messages"
    publisher.flush(timeout=30)
    assert sorted(_drain_all(stream, COUNT)) == sorted(m.data for m in batch)


def test_attributes_changed_after_a_publish_are_validated_again(backend: broker.sync.SyncBackend) -> None:
    publisher = backend.publisher()
    topic = publisher.topic("changed")
    attributes: dict[str, Any] = {"source": "test"}
    topic.publish_nowait(OutboundMessage(b"one", None, attributes))
    topic.publish_nowait(OutboundMessage(b"two", None, attributes))
    publisher.flush(timeout=30)  # sent: a message's attributes are not changed while it is queued
    attributes["count"] = 3  # the same dict, now with a value that is not a str
    with pytest.raises(InvalidMessage):
        topic.publish_nowait(OutboundMessage(b"three", None, attributes))
    with pytest.raises(InvalidMessage):
        topic.publish_nowait(OutboundMessage("text", None))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        topic.publish_nowait(OutboundMessage(b"bad key", 7))  # type: ignore[arg-type]
    publisher.flush(timeout=30)
    assert publisher.pending == 0
