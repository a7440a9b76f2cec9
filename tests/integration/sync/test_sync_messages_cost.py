"""What a blocking ``for`` loop over messages costs the loop thread on JetStream: counted, not timed.

Each pull the read-ahead task makes is an await on the loop and a hand-over to the caller's
thread. The blocking ``messages()`` consumer reads the backend's batched pulls, so consuming N
messages costs about N / batch pulls, not N, while the read-ahead bound holds, every message
arrives once, and the acks (queued from the caller's thread) all reach the broker.
"""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

import broker.sync
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer
from broker.errors import Timeout
from tests.integration.jetstream.server import running_nats_server

COUNT = 1_000
READ_AHEAD = 200


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


def test_a_messages_loop_pulls_jetstream_a_batch_at_a_time(nats_server: ProcessServer) -> None:
    pulls: Counter[str] = Counter()

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name in ("next_message", "next_batch"):
            if frame.f_code.co_filename.endswith("consumer.py"):  # the JetStream consumers
                pulls[frame.f_code.co_name] += 1

    topic = f"cost.{uuid.uuid4().hex[:8]}"
    with broker.sync.connect(nats_server.url, timeout=30) as backend:
        with backend.messages(topic, "workers", read_ahead=READ_AHEAD):
            pass  # the durable consumer exists before the messages are published
        backend.publisher().topic(topic).batch_publish(
            *(OutboundMessage(b"%d" % i, f"k{i}") for i in range(COUNT))
        )
        backend._call(_profile_loop_thread, count, what="profiling")
        try:
            with backend.messages(topic, "workers", read_ahead=READ_AHEAD) as stream:
                seen: list[bytes] = []
                for message in stream:
                    seen.append(message.data)
                    assert len(stream._buffer) <= READ_AHEAD  # the read-ahead bound holds
                    message.ack()
                    if len(seen) == COUNT:
                        break
                stream.flush(timeout=30)
        finally:
            backend._call(_profile_loop_thread, None, what="profiling")
        with backend.messages(topic, "workers") as again:  # every ack reached the broker
            with pytest.raises(Timeout):
                again.next_message(timeout=0.5)
    assert sorted(seen, key=int) == [b"%d" % i for i in range(COUNT)]
    assert len(set(seen)) == COUNT
    assert sum(pulls.values()) <= 3 * COUNT // (READ_AHEAD // 2), f"{dict(pulls)} pulls for {COUNT} messages"


async def _profile_loop_thread(hook: Any) -> None:
    sys.setprofile(hook)  # runs on the loop thread: profiles that thread only


def test_batch_options_given_to_messages_are_not_a_type_error(nats_server: ProcessServer) -> None:
    """``batch_size`` given to a blocking ``messages()`` is checked as ``messages()`` checks it
    (the batched read underneath must not pass it twice: a ``TypeError``)."""
    from broker.errors import BrokerError

    with broker.sync.connect(nats_server.url) as backend:
        try:
            consumer = backend.messages("cost-opts", "s", batch_size=5)
        except BrokerError:
            return  # refused with a typed error: fine
        consumer.close()
