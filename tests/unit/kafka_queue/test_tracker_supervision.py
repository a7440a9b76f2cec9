"""A failing embedded redelivery tracker is loud and comes back (issue 14, finding 13)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker.backends.inmem import InmemLog
from broker.backends.kafka.queue import QueueSettings, RedeliveryTracker, open_messages
from broker.backends.kafka.queue.reader import QueueTopicReader
from broker.errors import (
    AuthenticationFailed,
    ConfigError,
    ConnectionFailed,
    PermissionDenied,
    ReceiveError,
    UnknownTopic,
)
from broker.testing import wait_until


def config() -> QueueSettings:
    return QueueSettings(
        message_topic="q",
        marker_topic="q-markers",
        redelivery_timeout=0.3,
        next_message_timeout=0.05,
        use_now_if_no_marker_seen=0.05,
        tracker_poll_interval=0.02,
    )


async def test_a_failing_tracker_is_logged_counted_raised_once_and_restarted(
    log: InmemLog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await log.create_topic("q", 2)
    failures = {"left": 3}
    original = RedeliveryTracker._create_topics

    async def flaky(self: RedeliveryTracker) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("injected tracker failure")
        await original(self)

    monkeypatch.setattr(RedeliveryTracker, "_create_topics", flaky)
    hooked: list[tuple[str, int]] = []
    from broker.backends.kafka.queue import QueueMetrics

    iterator = open_messages(log, config(), "sub", metrics=QueueMetrics(lambda n, a: hooked.append((n, a))))
    tracker = iterator.tracker
    assert tracker is not None
    tracker.restart_backoff = 0.01
    await log.produce("q", b"one")
    with caplog.at_level(logging.ERROR, logger="broker.backends.kafka.queue.tracker"):
        async with iterator:
            await wait_until(lambda: tracker.failure_streak >= 3, 60)
            assert isinstance(iterator.tracker_error, RuntimeError)
            assert ("tracker_failures", 1) in hooked
            with pytest.raises(ReceiveError, match="failed 3 times in a row") as raised:
                await iterator.next_message(timeout=60)
            assert isinstance(raised.value.__cause__, RuntimeError)
            # Raised once per streak: the iterator stays usable, and the restarted tracker works.
            message = await iterator.next_message(timeout=60)
            await message.nack()
            again = await iterator.next_message(timeout=60)
            assert again.data == b"one" and again.delivery_attempt == 2
            await again.ack()
            assert iterator.tracker_error is None and tracker.failure_streak == 0
    assert tracker.metrics.counts["tracker_failures"] == 3
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3 and "injected tracker failure" in errors[0].getMessage()


async def test_a_tracker_failing_while_running_is_restarted(
    log: InmemLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await log.create_topic("q", 2)
    iterator = open_messages(log, config(), "sub")
    tracker = iterator.tracker
    assert tracker is not None
    tracker.restart_backoff = 0.01
    broken = {"on": False}
    original = RedeliveryTracker._redeliver_expired

    def failing(self: RedeliveryTracker) -> None:
        if broken["on"]:
            broken["on"] = False
            raise RuntimeError("injected failure in the loop")
        original(self)

    monkeypatch.setattr(RedeliveryTracker, "_redeliver_expired", failing)
    async with iterator:
        await log.produce("q", b"x")
        first = await iterator.next_message(timeout=60)
        broken["on"] = True
        await wait_until(lambda: tracker.metrics.counts["tracker_failures"] == 1, 60)
        await first.nack()
        again = await iterator.next_message(timeout=60)
        assert again.data == b"x" and again.delivery_attempt == 2
        await again.ack()


@pytest.mark.parametrize(
    "error",
    [PermissionDenied("no write access"), AuthenticationFailed("expired"), ConfigError("bad topic")],
    ids=lambda e: type(e).__name__,
)
async def test_a_permanent_redelivery_error_fails_the_loop_instead_of_being_retried_forever(
    log: InmemLog, error: Exception
) -> None:
    await log.create_topic("q", 2)
    iterator = open_messages(log, config(), "sub")
    tracker = iterator.tracker
    assert tracker is not None
    # No restart within the test: a restarted loop whose first pass completes clears last_error
    # (on a loaded machine that pass came before the assertion below).
    tracker.restart_backoff = 60.0
    sends: list[str] = []

    def refused(topic: str, value: bytes, **kwargs: Any) -> Any:
        sends.append(topic)

        async def fail() -> Any:
            raise error

        return fail()

    tracker._sender.send = refused  # type: ignore[method-assign]
    async with iterator:
        await log.produce("q", b"x")
        first = await iterator.next_message(timeout=60)
        await first.nack()
        await wait_until(lambda: tracker.metrics.counts["tracker_failures"] >= 1, 60)
        assert tracker.last_error is error
        assert len(sends) == 1, "a permanent error was retried"


async def test_a_retryable_redelivery_error_is_retried_and_never_fails_the_loop(log: InmemLog) -> None:
    await log.create_topic("q", 2)
    iterator = open_messages(log, config(), "sub")
    tracker = iterator.tracker
    assert tracker is not None
    tracker._max_backoff = 0.02
    original = tracker._sender.send
    sends: list[str] = []

    def flaky(topic: str, value: bytes, **kwargs: Any) -> Any:
        sends.append(topic)
        if len(sends) < 3:

            async def fail() -> Any:
                raise ConnectionFailed("broker gone for a moment")

            return fail()
        return original(topic, value, **kwargs)

    tracker._sender.send = flaky  # type: ignore[method-assign]
    async with iterator:
        await log.produce("q", b"x")
        first = await iterator.next_message(timeout=60)
        await first.nack()
        again = await iterator.next_message(timeout=60)
        assert again.data == b"x" and again.delivery_attempt == 2
        await again.ack()
    assert len(sends) == 3 and tracker.metrics.counts["tracker_failures"] == 0


async def test_a_failure_after_every_poll_adds_up_and_a_clean_pass_ends_the_streak(
    log: InmemLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await log.create_topic("q", 2)
    tracker = RedeliveryTracker(log, config())
    tracker.restart_backoff = tracker.max_restart_backoff = 0.01
    broken = {"on": True}
    original = RedeliveryTracker._redeliver_expired

    def failing(self: RedeliveryTracker) -> None:
        if broken["on"]:
            raise RuntimeError("fails after every poll")
        original(self)

    monkeypatch.setattr(RedeliveryTracker, "_redeliver_expired", failing)
    async with tracker:
        # Every run polls successfully, then fails: the streak must still grow.
        await wait_until(lambda: tracker.failure_streak >= 4, 60)
        assert isinstance(tracker.last_error, RuntimeError)
        broken["on"] = False
        await wait_until(lambda: tracker.failure_streak == 0, 60)
        assert tracker.last_error is None
        assert tracker._task is not None and not tracker._task.done()


async def test_the_supervised_task_never_ends_with_an_error(log: InmemLog) -> None:
    """What ``broker queue tracker`` relies on: failures are counted, never raised from the task."""

    class Refusing:
        def __getattr__(self, name: str) -> Any:
            async def refuse(*args: Any, **kwargs: Any) -> Any:
                raise PermissionDenied("no access")

            return refuse

    tracker = RedeliveryTracker(Refusing(), config())
    tracker.restart_backoff = tracker.max_restart_backoff = 0.01
    task = tracker.start()
    await wait_until(lambda: tracker.failure_streak >= 3, 60)
    assert not task.done() and isinstance(tracker.last_error, PermissionDenied)
    await tracker.close()
    assert task.done() and (task.cancelled() or task.exception() is None)


async def test_concurrent_read_backs_share_one_sweep(log: InmemLog) -> None:
    import asyncio

    from broker.log import TopicPartition

    await log.create_topic("q", 2)
    for i in range(100):
        await log.produce("q", str(i).encode(), partition=i % 2)
    reader = QueueTopicReader(log)
    reads: list[Any] = [reader.read(TopicPartition("q", i % 2), [i // 2]) for i in range(100)]
    results = await asyncio.gather(*reads)
    for i, (found, gone) in enumerate(results):
        assert not gone and found[i // 2].value == str(i).encode()
    assert reader.sweeps <= 3, f"{reader.sweeps} sweeps for 100 concurrent reads"
    await reader.close()


class _KafkaLikeTopics:
    """The in-memory log, except that a topic nobody created is ``UnknownTopic``, as on Kafka.

    (The in-memory log creates a topic on first use, which would hide what the tracker does.)
    """

    def __init__(self, inner: InmemLog) -> None:
        self.inner = inner
        self.created: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def create_topic(self, name: str, partitions: int = 1, *, config: Any = None) -> None:
        self.created.append((name, partitions))
        await self.inner.create_topic(name, partitions, config=config)

    async def partitions(self, topic: str) -> int:
        if topic not in {name for name, _ in self.created}:
            raise UnknownTopic(f"{topic} does not exist")
        return await self.inner.partitions(topic)


async def test_a_tracker_started_before_its_message_topic_creates_it(log: InmemLog) -> None:
    """Portable-contract finding 1: nacks were lost when the consumer came before its topic.

    The tracker must not track markers of a message topic that does not exist yet: it creates
    the topic (one partition) before the markers topic, so reading redeliveries back works.
    """
    kafka_like = _KafkaLikeTopics(log)
    tracker = RedeliveryTracker(kafka_like, config())  # type: ignore[arg-type]
    task = tracker.start()
    try:
        await wait_until(lambda: bool(tracker.partitions), 60)
        assert kafka_like.created[:2] == [("q", 1), ("q-markers", 1)]
        assert await kafka_like.partitions("q") == 1
        assert tracker.failure_streak == 0
    finally:
        await tracker.close()
    assert task.done()
