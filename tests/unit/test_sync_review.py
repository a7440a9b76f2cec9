"""Edge cases of the blocking API: re-opening after fork from many threads, close racing the
read-ahead, the loop-side tasks surviving a BaseException, and bad arguments."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
import uuid
from typing import Any

import pytest

import broker.sync
from broker import OutboundMessage
from broker.errors import AckError, ClosedError, ConfigError, PublishError

THREADS = 8


def _child_races_first_publish(
    publisher: broker.sync.SyncPublisher, results: Any
) -> None:  # pragma: no cover
    try:
        handle = publisher.topic("race")
        start = threading.Barrier(THREADS)
        done: list[str] = []

        def publish(n: int) -> None:
            start.wait()
            try:
                handle.publish_future(OutboundMessage(b"%d" % n)).result(10)
                done.append("ok")
            except BaseException as exc:
                done.append(repr(exc))

        threads = [threading.Thread(target=publish, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        results.put(sorted(done))
    except BaseException as exc:
        results.put([repr(exc)])


def test_threads_making_the_first_publish_in_a_forked_child_lose_nothing() -> None:
    with broker.sync.connect(f"inmem://review-{uuid.uuid4().hex}") as backend:
        publisher = backend.publisher()
        publisher.topic("race").publish(OutboundMessage(b"parent"))
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        child = context.Process(target=_child_races_first_publish, args=(publisher, results))
        child.start()
        try:
            outcome = results.get(timeout=60)
            child.join(30)
        finally:
            if child.is_alive():
                child.kill()
        assert outcome == ["ok"] * THREADS
        assert child.exitcode == 0


@pytest.mark.parametrize("bad", [None, float("nan"), -1.0])
def test_connect_refuses_a_bad_timeout(bad: Any) -> None:
    with pytest.raises(ConfigError):
        broker.sync.connect("inmem://review-bad", timeout=bad)


@pytest.mark.parametrize("option", ["max_batch", "max_pending"])
def test_publisher_refuses_a_zero_count(option: str) -> None:
    with broker.sync.connect(f"inmem://review-{uuid.uuid4().hex}") as backend, pytest.raises(ConfigError):
        backend.publisher(**{option: 0})


def test_a_message_pulled_while_the_consumer_closes_is_nacked_not_left_to_its_deadline() -> None:
    """The read-ahead task's pull completes just after close() took its snapshot of the buffer: that
    message is nacked by the close (redelivered at once), not held until its 30 s ack deadline.

    (The in-memory broker also requeues what a closing consumer holds; a broker that does not —
    JetStream, Pub/Sub, Service Bus — would keep it until the deadline: the nack is what counts.)"""
    name = f"inmem://late-{uuid.uuid4().hex}"
    with broker.sync.connect(name) as backend:
        consumer = backend.messages("t", "s", ack_deadline=30.0, read_ahead=1)
        real_pull = consumer._pull
        pulled: list[Any] = []

        async def pull_that_finishes_after_close() -> Any:
            item = await real_pull()
            pulled.append(item)
            while not consumer._closed:  # the SDK call returns once close() has begun
                try:
                    await asyncio.sleep(0.005)
                except asyncio.CancelledError:
                    continue  # already dequeued: the call completes despite the cancel
            return item

        consumer._pull = pull_that_finishes_after_close  # type: ignore[method-assign]
        # restart the read-ahead with the slow pull
        consumer._fetcher.cancel()
        consumer._fetcher = asyncio.run_coroutine_threadsafe(consumer._fetch(), consumer._portal.loop)
        backend.publisher().topic("t").publish(OutboundMessage(b"late"))
        deadline = time.monotonic() + 5
        while not pulled and time.monotonic() < deadline:
            time.sleep(0.01)
        consumer.close(timeout=10)
        assert len(pulled) == 1 and pulled[0].settled, "the late message was not nacked by the close"
        with backend.messages("t", "s", ack_deadline=30.0) as again:
            message = again.next_message(timeout=3)  # nacked by the close: back at once
            assert message.data == b"late"
            message.ack()


def test_a_settling_task_that_dies_fails_its_waiters_instead_of_hanging_them() -> None:
    name = f"inmem://dies-{uuid.uuid4().hex}"
    with broker.sync.connect(name) as backend, backend.messages("t", "s") as consumer:
        backend.publisher().topic("t").publish(OutboundMessage(b"x"))
        message = consumer.next_message(timeout=5)

        async def dies(items: Any) -> None:
            raise asyncio.CancelledError  # the loop tearing down under the settlement

        import broker.sync.consuming as consuming

        real = consuming.ack_all
        consuming.ack_all = dies  # type: ignore[assignment]
        try:
            with pytest.raises(ClosedError):
                message.ack(wait=True, timeout=5)
        finally:
            consuming.ack_all = real
        with pytest.raises(AckError):
            consumer.flush(timeout=5)  # the failure is reported, and flush returns at once
        consumer.flush(timeout=5)  # and the consumer works on


def test_a_draining_task_that_dies_fails_pending_publishes_instead_of_hanging_flush() -> None:
    name = f"inmem://drain-dies-{uuid.uuid4().hex}"
    with broker.sync.connect(name) as backend:
        publisher = backend.publisher()
        handle = publisher.topic("t")
        real = publisher._send

        async def dies(taken: Any) -> None:
            raise asyncio.CancelledError

        publisher._send = dies  # type: ignore[method-assign]
        errors: list[BaseException | None] = []
        handle.publish_nowait(OutboundMessage(b"a"), on_delivery=lambda error, m: errors.append(error))
        handle.publish_nowait(OutboundMessage(b"b"))
        with pytest.raises(PublishError):
            publisher.flush(timeout=5)  # b failed silently: reported here, no 5 s wait
        assert len(errors) == 1 and isinstance(errors[0], ClosedError)
        publisher._send = real  # type: ignore[method-assign]
        handle.publish(OutboundMessage(b"c"), timeout=5)  # the drainer starts again
