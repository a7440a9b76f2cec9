"""A queue consumer's or tracker's ``close()`` ends when its caller's timeout does.

Closing cancels a background task and waits for it. Waiting with ``await task`` under
``suppress(CancelledError)`` swallowed the caller's own cancellation along with the task's: a
``backend.close()`` under ``asyncio.timeout(...)`` then went on closing the next part, and the
next, unbounded (the Kafka conformance test closing two busy consumers hung a loaded CI worker
for its 3-minute watchdog that way).
"""

from __future__ import annotations

import asyncio

import pytest

from broker.backends.inmem import InmemLog
from broker.backends.kafka.queue import RedeliveryTracker
from broker.driver.resources import stop_task
from tests.unit.kafka_queue.test_tracker_supervision import config as _settings


async def test_a_tracker_close_cut_short_by_its_caller_raises_the_callers_timeout(
    log: InmemLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await log.create_topic("q", 2)
    tracker = RedeliveryTracker(log, _settings())
    slow_shutdown_began = asyncio.Event()
    release = asyncio.Event()

    async def slow_shutdown() -> None:  # a last commit and consumer close on a loaded broker
        slow_shutdown_began.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:  # as bounded SDK closes do: they finish first
                continue

    monkeypatch.setattr(tracker, "_shutdown", slow_shutdown)
    task = tracker.start()
    await asyncio.sleep(0.05)

    async def close_under_a_timeout() -> None:
        async with asyncio.timeout(0.3):
            await tracker.close()

    closing = asyncio.ensure_future(close_under_a_timeout())
    done, _ = await asyncio.wait([closing], timeout=10)
    if not done:
        release.set()
        raise AssertionError("close() outlived its caller's 0.3 s timeout (10 s and counting)")
    with pytest.raises(TimeoutError):
        closing.result()
    assert slow_shutdown_began.is_set()
    assert not task.done(), "the tracker's task goes on ending by itself"
    release.set()
    await asyncio.wait([task], timeout=5)
    assert task.done()


async def test_stop_task_consumes_the_tasks_end_but_never_the_callers_cancellation() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("the task's own failure")

    failed = asyncio.ensure_future(fails())
    await asyncio.sleep(0.01)
    await stop_task(failed)  # already ended with an error: consumed, not raised
    await stop_task(None)

    running = asyncio.ensure_future(asyncio.sleep(30))
    await stop_task(running)
    assert running.cancelled()

    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    late = asyncio.ensure_future(stubborn())
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(stop_task(late))
    await asyncio.sleep(0.05)
    waiter.cancel()
    await asyncio.wait([waiter], timeout=1)
    assert waiter.cancelled(), "the caller's cancellation propagates while the task still runs"
    release.set()
    await asyncio.wait([late], timeout=1)
    assert late.done()


async def test_a_consumer_close_cut_short_by_its_caller_still_closes_the_sdk_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelled while it waits for a group join, close() leaves the SDK consumer to be closed on
    its own thread: never left open in the group for its session (a lingering member holds every
    later join of its group on some brokers)."""
    from broker.backends.kafka.sdk_consumer import GroupCore

    core = GroupCore(
        {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "enable.auto.commit": False, "log_level": 0},
        ["t"],
        name="cut-short",
        prefetch=10,
        close_timeout=5.0,
    )
    sdk_consumer = core.consumer

    async def long_join() -> None:  # a join still in flight on a loaded broker
        await asyncio.sleep(30)

    monkeypatch.setattr(core, "_before_leave", long_join)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await core.close()
    assert core.closed

    def sdk_closed() -> bool:
        try:
            sdk_consumer.assignment()
        except RuntimeError:  # confluent-kafka: "Consumer closed"
            return True
        return False

    for _ in range(100):
        if sdk_closed():
            break
        await asyncio.sleep(0.05)
    assert sdk_closed(), "the SDK consumer was left open"
