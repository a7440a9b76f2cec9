"""Closing while a rebalance listener runs: the SDK consumer is never closed inside its own callback,
and a closed tracker's ``on_assigned`` asks the cluster nothing more.

librdkafka runs rebalance callbacks inside ``consume()``; while one waits for the async listener,
the consumer's worker serves the listener's calls (:meth:`SdkThread.serve_until`). A close served
there destroys the consumer under the ``consume()`` that is still running: the process crashes
(SIGSEGV) once the listener returns. A queue iterator closed during its group join on a loaded
broker gets there: the tracker's ``on_assigned`` (committed offsets, watermarks) outlasts the
close bounds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import QueueSettings, RedeliveryTracker
from broker.backends.kafka.threads import SdkThread
from broker.errors import ClosedError
from broker.log import TopicPartition
from broker.testing import wait_until


class _Consume:
    """Stands for ``consume()`` running a rebalance callback that waits for the listener (``done``)."""

    def __init__(self, thread: SdkThread, order: list[str]) -> None:
        self.thread = thread
        self.order = order
        self.done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.inside = threading.Event()

    def __call__(self) -> None:
        self.order.append("callback begins")
        self.inside.set()
        self.thread.serve_until(self.done)
        self.order.append("callback ends")


async def _inside(consume: _Consume) -> None:
    await wait_until(consume.inside.is_set, 2)


async def test_a_close_submitted_during_a_callback_runs_after_it() -> None:
    order: list[str] = []
    thread = SdkThread("test-sdk-callback")
    consume = _Consume(thread, order)
    fetch = thread.submit(consume)
    await _inside(consume)
    # the listener's own calls are served inside the callback
    await asyncio.wait_for(thread.submit(order.append, "listener's commit"), 2)
    close = thread.submit(order.append, "close", outside_callbacks=True)
    after = thread.submit(order.append, "a call behind the close")
    await asyncio.wait_for(after, 2)
    assert "close" not in order
    consume.done.set_result(None)
    await asyncio.wait_for(asyncio.gather(fetch, close), 2)
    assert order == [
        "callback begins",
        "listener's commit",
        "a call behind the close",
        "callback ends",
        "close",
    ]
    thread.stop()


async def test_the_last_call_of_an_abandoned_worker_runs_after_the_callback_it_is_stuck_in() -> None:
    order: list[str] = []
    thread = SdkThread("test-sdk-abandoned-in-callback")
    consume = _Consume(thread, order)
    thread.submit(consume)
    await _inside(consume)
    queued = thread.submit(order.append, "never")
    thread.abandon(ClosedError("closed"), last=lambda: order.append("close"))
    with pytest.raises(ClosedError):
        await asyncio.wait_for(queued, 2)
    await asyncio.sleep(0.1)  # the worker must not run the close inside the callback meanwhile
    assert order == ["callback begins"]
    consume.done.set_result(None)
    await wait_until(lambda: "close" in order, 2)
    assert order == ["callback begins", "callback ends", "close"]


# -- the tracker: on_assigned after close ------------------------------------------------------
@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://close-during-assign-{uuid.uuid4().hex}?partitions=2")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


async def test_a_tracker_closed_during_on_assigned_reads_no_watermarks(
    log: InmemLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = QueueSettings(message_topic="q", marker_topic="q-markers")
    await log.create_topic("q-markers", 2)
    tracker = RedeliveryTracker(log, config)
    entered, gate = asyncio.Event(), asyncio.Event()
    watermarks_after_close: list[TopicPartition] = []
    committed, watermarks = log.committed, log.watermarks

    async def slow_committed(group: str, partitions: Any) -> Any:
        entered.set()
        await gate.wait()  # a loaded broker answers late
        return await committed(group, partitions)

    async def counted_watermarks(tp: TopicPartition) -> tuple[int, int]:
        if tracker._closed:
            watermarks_after_close.append(tp)
        return await watermarks(tp)

    monkeypatch.setattr(log, "committed", slow_committed)
    monkeypatch.setattr(log, "watermarks", counted_watermarks)
    tps = [TopicPartition("q-markers", 0), TopicPartition("q-markers", 1)]
    # On Kafka the listener runs in a task of its own (the SDK thread's callback), not the tracker's.
    assigning = asyncio.create_task(tracker.on_assigned(tps))
    await asyncio.wait_for(entered.wait(), 2)
    await tracker.close()
    gate.set()
    await asyncio.wait_for(assigning, 2)
    assert watermarks_after_close == []
    assert tracker.partitions == {}
