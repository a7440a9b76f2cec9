"""The blocking publisher keeps several batches in flight where the driver lets it, in order."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Sequence
from contextlib import nullcontext

import pytest

import broker.sync
from broker import OutboundMessage
from broker.driver.publishing import DriverPublisher, HandOver
from broker.errors import ClosedError
from broker.sync.publishing import SyncPublisher

THREADS = 4
PER_THREAD = 500


class SlowConfirming:
    """An in-memory driver whose sends hand over with a yield inside, then wait for confirmation.

    ``confirm``: how many sends are confirmed (after a short tail); later ones wait until cancelled.
    """

    def __init__(self, inner: object, confirm: int = 1_000_000) -> None:
        self.inner = inner
        self.hand_over = HandOver()
        self.stored: list[OutboundMessage] = []
        self.active = 0
        self.peak = 0
        self.confirm = confirm
        self.started = 0
        self.entered = 0
        self.confirmed = 0

    def check_topic(self, name: str) -> None:
        """Every name is a topic."""

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Store ``messages`` (yielding once while handing over), then wait for the confirmation."""
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            with getattr(self, "hand_over", nullcontext()):
                self.entered += 1
                # a hand-over that waits, longer for every other send: a later one must still not overtake
                await asyncio.sleep(0.003 if self.entered % 2 else 0)
                self.inner.append(topic, messages)  # type: ignore[attr-defined]
                self.stored.extend(messages)
            self.started += 1
            if self.started > self.confirm:
                await asyncio.Event().wait()  # never confirmed
            await asyncio.sleep(0.005)  # the confirmation's round trip
            self.confirmed += len(messages)
        finally:
            self.active -= 1

    async def close(self) -> None:
        """Nothing to release."""


def slow_publisher(
    backend: broker.sync.SyncBackend, confirm: int = 1_000_000
) -> tuple[SyncPublisher, SlowConfirming]:
    """A blocking publisher of ``backend`` whose batches go through a :class:`SlowConfirming` driver."""
    publisher = backend.publisher(max_batch=100)
    inner = publisher._async.driver  # type: ignore[attr-defined]
    driver = SlowConfirming(inner, confirm)
    publisher._async = DriverPublisher(driver, shared=True)
    return publisher, driver


def test_batches_overlap_and_each_threads_order_is_kept_on_the_broker() -> None:
    with broker.sync.connect(f"inmem://pipeline-{uuid.uuid4().hex}") as backend:
        publisher, driver = slow_publisher(backend)
        topic = publisher.topic("orders")

        def run(thread: int) -> None:
            for i in range(PER_THREAD):
                topic.publish_nowait(OutboundMessage(b"%d:%d" % (thread, i)))

        threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        publisher.flush(timeout=60)
        assert publisher.pending == 0
        seen: dict[int, list[int]] = {t: [] for t in range(THREADS)}
        for message in driver.stored:
            thread, i = map(int, message.data.split(b":"))
            seen[thread].append(i)
        # nothing lost, nothing twice, and each thread's messages in the order it handed them over
        assert seen == {t: list(range(PER_THREAD)) for t in range(THREADS)}
        assert driver.confirmed == THREADS * PER_THREAD
        assert driver.peak >= 2, f"at most {driver.peak} batch in flight at once"
        publisher.close()


@pytest.mark.parametrize("alongside", [True, False], ids=["batches-alongside", "one-batch-at-a-time"])
def test_loop_death_fails_exactly_the_messages_not_confirmed(alongside: bool) -> None:
    with broker.sync.connect(f"inmem://pipeline-{uuid.uuid4().hex}") as backend:
        publisher, driver = slow_publisher(backend, confirm=2)
        if not alongside:
            del driver.hand_over  # a driver that offers no hand-over count
        topic = publisher.topic("orders")
        lock = threading.Lock()
        outcome: dict[str, int] = {"ok": 0, "failed": 0, "other": 0}

        def on_delivery(error: BaseException | None, message: OutboundMessage) -> None:
            with lock:
                key = "ok" if error is None else "failed" if isinstance(error, ClosedError) else "other"
                outcome[key] += 1

        total = 1_000
        for i in range(total):
            topic.publish_nowait(OutboundMessage(b"%d" % i), on_delivery=on_delivery)
        loop = publisher._portal.loop
        deadline = 200
        while not (driver.confirmed and driver.started > 2) and deadline:  # confirmed ones and one waiting
            threading.Event().wait(0.01)
            deadline -= 1

        def kill() -> None:  # what a dying loop does to its tasks
            for task in asyncio.all_tasks(loop):
                if task.get_coro().__qualname__.startswith("SyncPublisher."):  # type: ignore[union-attr]
                    task.cancel()

        loop.call_soon_threadsafe(kill)
        publisher.flush(timeout=30)
        assert publisher.pending == 0
        assert outcome["other"] == 0
        assert outcome["ok"] == driver.confirmed
        assert outcome["ok"] + outcome["failed"] == total
        assert 0 < driver.confirmed < total
