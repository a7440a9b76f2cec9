"""The SDK worker thread: a call stuck in the SDK must not strand the calls queued behind it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from broker.backends.kafka.threads import SdkThread
from broker.errors import ClosedError


async def test_abandon_fails_the_calls_queued_behind_a_stuck_one() -> None:
    thread = SdkThread("test-sdk")
    release = threading.Event()
    stuck = thread.submit(release.wait)  # as librdkafka's close() hanging in a rebalance
    queued = [thread.submit(lambda: "never"), thread.submit(lambda: "never either")]
    await asyncio.sleep(0.05)
    thread.abandon(ClosedError("the consumer is closed"))
    async with asyncio.timeout(2):
        for call in queued:
            with pytest.raises(ClosedError):
                await call
    with pytest.raises(RuntimeError):
        thread.submit(lambda: None)
    assert not stuck.done()
    release.set()
    assert await asyncio.wait_for(stuck, 2) is True  # the stuck call still ends normally


async def test_stop_lets_queued_calls_finish() -> None:
    thread = SdkThread("test-sdk")
    calls = [thread.submit(lambda i=i: i) for i in range(3)]
    thread.stop()
    assert await asyncio.wait_for(asyncio.gather(*calls), 2) == [0, 1, 2]
