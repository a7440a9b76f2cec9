"""The SDK worker thread: a call stuck in the SDK must not strand the calls queued behind it."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest

from broker.backends.kafka.threads import SdkThread
from broker.errors import ClosedError
from broker.testing import wait_until


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


class _SdkObject:
    """Stands for a librdkafka consumer: freeing it unclosed would run its close on the freeing thread."""

    def __init__(self, closes: list[str]) -> None:
        self.closes = closes

    def close(self) -> None:
        self.closes.append(threading.current_thread().name)


async def test_after_abandon_the_sdk_object_is_closed_on_its_thread_and_never_freed_elsewhere() -> None:
    thread = SdkThread("test-sdk-last")
    closes: list[str] = []
    sdk = _SdkObject(closes)
    alive = weakref.ref(sdk)
    release = threading.Event()
    stuck = thread.submit(release.wait)
    await asyncio.sleep(0.05)
    thread.abandon(ClosedError("closed"), last=sdk.close)
    del sdk, thread
    gc.collect()
    assert alive() is not None, "held by the stuck worker, not freed on the event loop's thread"
    assert closes == []
    release.set()
    assert await asyncio.wait_for(stuck, 2) is True
    await wait_until(lambda: bool(closes), 2)
    assert closes == ["test-sdk-last"], "closed once, on the SDK thread"
