"""The blocking API's portal: in-loop refusal, fork safety, timeouts, close and exit on inmem://."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import broker.sync
from broker import OutboundMessage
from broker.errors import BlockingInEventLoop, ClosedError, ConfigError, InvalidMessage, Timeout
from broker.sync import portal


@pytest.fixture
def backend() -> Iterator[broker.sync.SyncBackend]:
    with broker.sync.connect(f"inmem://portal-{uuid.uuid4().hex}") as backend:
        yield backend


async def test_connect_inside_a_running_loop_is_a_typed_error() -> None:
    with pytest.raises(BlockingInEventLoop) as caught:
        broker.sync.connect("inmem://in-loop")
    assert isinstance(caught.value, RuntimeError)


def test_every_blocking_call_refuses_inside_a_running_loop(backend: broker.sync.SyncBackend) -> None:
    handle = backend.publisher().topic("t")
    consumer = backend.messages("t", "s")
    refused: list[str] = []

    async def inside() -> None:
        calls = {
            "publish": lambda: handle.publish(OutboundMessage(b"x")),
            "publish_nowait": lambda: handle.publish_nowait(OutboundMessage(b"x")),
            "next_message": lambda: consumer.next_message(timeout=0.1),
            "messages": lambda: backend.messages("t", "s2"),
            "close": backend.close,
        }
        for name, call in calls.items():
            with pytest.raises(BlockingInEventLoop):
                call()
            refused.append(name)

    asyncio.run(inside())
    assert len(refused) == 5
    handle.publish(OutboundMessage(b"after"))  # nothing was sent or closed by the refused calls
    assert consumer.next_message(timeout=5).data == b"after"


def test_a_blocking_call_on_the_loop_thread_itself_is_refused_not_a_deadlock(
    backend: broker.sync.SyncBackend,
) -> None:
    handle = backend.publisher().topic("t")

    async def from_the_loop(_: Any) -> str:
        try:
            handle.publish(OutboundMessage(b"x"))
        except BlockingInEventLoop:
            return "refused"
        return "ran"

    assert backend.run(from_the_loop, timeout=5) == "refused"


def _child(
    backend: broker.sync.SyncBackend, inherited: broker.sync.SyncPublisher | None, results: Any
) -> None:  # pragma: no cover - forked child
    try:
        topic = f"child-{os.getpid()}"
        consumer = backend.messages(topic, "s")
        handle = (inherited or backend.publisher()).topic(topic)  # a publisher made before the fork too
        for i in range(50):
            handle.publish_nowait(OutboundMessage(b"%d" % i))
        handle.publish(OutboundMessage(b"last"))
        got = [consumer.next_message(timeout=10).data for _ in range(51)]
        loop_thread = portal.portal().thread
        results.put((len(got), len(set(got)), loop_thread.is_alive(), portal.portal().pid == os.getpid()))
    except BaseException as exc:
        results.put(repr(exc))


@pytest.mark.parametrize("used_before_fork", [False, True], ids=["before-first-use", "after-first-use"])
def test_a_forked_child_gets_a_fresh_loop_and_connection(used_before_fork: bool) -> None:
    with broker.sync.connect(f"inmem://fork-{uuid.uuid4().hex}") as backend:
        pending: list[BaseException | None] = []
        publisher = None
        if used_before_fork:
            consumer = backend.messages("parent", "s")
            publisher = backend.publisher()
            handle = publisher.topic("parent")
            handle.publish(OutboundMessage(b"before"))
            handle.publish_nowait(OutboundMessage(b"queued"), on_delivery=lambda e, m: pending.append(e))
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        child = context.Process(target=_child, args=(backend, publisher, results))
        child.start()
        outcome = results.get(timeout=60)
        child.join(30)
        assert outcome == (51, 51, True, True)
        assert child.exitcode == 0
        if used_before_fork:  # the parent's own connection and queue are untouched by the child
            handle.publish(OutboundMessage(b"after"))
            assert [consumer.next_message(timeout=5).data for _ in range(3)] == [
                b"before",
                b"queued",
                b"after",
            ]
            assert pending == [None]


def test_next_message_times_out_with_a_typed_error(backend: broker.sync.SyncBackend) -> None:
    consumer = backend.messages("quiet", "s")
    started = time.perf_counter()
    with pytest.raises(Timeout):
        consumer.next_message(timeout=0.2)
    assert time.perf_counter() - started < 5


def test_bad_input_is_a_typed_error_at_the_call(backend: broker.sync.SyncBackend) -> None:
    handle = backend.publisher().topic("t")
    with pytest.raises(InvalidMessage):
        handle.publish_nowait(OutboundMessage("text"))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        handle.publish(OutboundMessage(b"x", attributes={"n": 1}))  # type: ignore[dict-item]
    with pytest.raises(ConfigError):
        backend.messages("t", "s", read_ahead=0)
    with pytest.raises(ConfigError):
        broker.sync.connect("inmem://x?partitions=zero")


def test_close_ends_a_for_loop_in_another_thread(backend: broker.sync.SyncBackend) -> None:
    consumer = backend.messages("t", "s")
    seen: list[bytes] = []
    reader = threading.Thread(target=lambda: seen.extend(m.data for m in consumer))
    reader.start()
    backend.publisher().topic("t").publish(OutboundMessage(b"one"))
    deadline = time.perf_counter() + 10
    while not seen and time.perf_counter() < deadline:
        time.sleep(0.01)
    consumer.close()
    reader.join(10)
    assert not reader.is_alive() and seen == [b"one"]
    with pytest.raises(ClosedError):
        consumer.next_message(timeout=0.1)


@dataclass
class Order:
    id: int
    item: str


def test_typed_topic_and_typed_messages(backend: broker.sync.SyncBackend) -> None:
    consumer = backend.messages("typed", "s", type=Order)
    backend.publisher().typed_topic("typed", Order).publish(Order(7, "tea"))
    message = consumer.next_message(timeout=5)
    assert message.decoded == Order(7, "tea")
    message.ack(wait=True)


def test_records_commit_and_read_on(backend: broker.sync.SyncBackend) -> None:
    handle = backend.publisher().topic("log")
    handle.batch_publish(*(OutboundMessage(b"%d" % i) for i in range(5)))
    with backend.records("log", "g") as records:
        got = [records.next_record(timeout=5) for _ in range(5)]
        got[2].commit()
        records.commit(timeout=5)
    with backend.records("log", "g") as again:
        assert again.next_record(timeout=5).value == b"3"


def test_pending_publishes_are_flushed_at_interpreter_exit() -> None:
    script = textwrap.dedent(
        """
        import atexit
        delivered = []
        atexit.register(lambda: print("delivered", len(delivered), flush=True))  # runs after broker.sync's
        import broker.sync
        from broker import OutboundMessage
        backend = broker.sync.connect("inmem://exit")
        handle = backend.publisher().topic("t")
        for i in range(20_000):
            handle.publish_nowait(OutboundMessage(b"x"), on_delivery=lambda e, m: delivered.append(e))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "delivered 20000" in done.stdout
