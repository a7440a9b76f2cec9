"""The tracker's redelivery backoff policy can be supplied (kafka-mq-go's backoffPolicy; issue 34.8)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import QueueSettings, open_messages
from broker.backends.kafka.queue.settings import RedeliveryBackoff
from broker.backends.kafka.queue.tracker import GiveUp
from broker.errors import ConfigError, ConnectionFailed
from broker.log import TopicPartition
from broker.testing import wait_until


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://backoff-{uuid.uuid4().hex}?partitions=2")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


FAST = RedeliveryBackoff(start=0.01, factor=1.0, jitter=0.0, maximum=0.01, max_elapsed=0.15)


def config(**overrides: Any) -> QueueSettings:
    base = QueueSettings(
        message_topic="q",
        marker_topic="q-markers",
        redelivery_timeout=0.3,
        next_message_timeout=0.05,
        use_now_if_no_marker_seen=0.05,
        tracker_poll_interval=0.02,
        redelivery_backoff=FAST,
    )
    return replace(base, **overrides)


def test_the_policy_start_factor_jitter_and_maximum() -> None:
    policy = RedeliveryBackoff(start=1.0, factor=3.0, jitter=0.0, maximum=5.0)
    assert [policy.wait(n, 0.7) for n in (1, 2, 3, 4)] == [1.0, 3.0, 5.0, 5.0]
    spread = RedeliveryBackoff(start=2.0, factor=1.0, jitter=0.5, maximum=2.0)
    assert spread.wait(1, 0.0) == 1.0 and spread.wait(1, 0.5) == 2.0 and spread.wait(1, 0.999) < 3.0
    assert RedeliveryBackoff().max_elapsed == 168 * 3600  # kafka-mq-go's week
    for bad in ({"start": 0}, {"factor": 0.5}, {"jitter": 1.0}, {"maximum": 0.01}, {"max_elapsed": 0}):
        with pytest.raises(ConfigError):
            RedeliveryBackoff(**bad)
    with pytest.raises(ConfigError):
        QueueSettings(message_topic="q", marker_topic="m", redelivery_backoff=30.0)  # type: ignore[arg-type]


def failing_queue_sends(tracker: Any) -> list[str]:
    """Make the tracker's writes to the queue topic fail (retryable); other topics work."""
    original = tracker._sender.send
    sends: list[str] = []

    def flaky(topic: str, value: bytes, **kwargs: Any) -> Any:
        sends.append(topic)
        if topic == "q":

            async def fail() -> Any:
                raise ConnectionFailed("the queue topic is unwritable")

            return fail()
        return original(topic, value, **kwargs)

    tracker._sender.send = flaky
    return sends


async def test_a_redelivery_failing_past_max_elapsed_is_dead_lettered(log: InmemLog) -> None:
    await log.create_topic("q", 2)
    iterator = open_messages(log, config(dead_letter_topic="q-dead"), "sub")
    tracker = iterator.tracker
    assert tracker is not None
    sends = failing_queue_sends(tracker)
    reports: list[GiveUp] = []
    tracker.on_give_up = reports.append
    async with iterator:
        await log.produce("q", b"x", key="k")
        first = await iterator.next_message(timeout=5)
        await first.nack()
        await wait_until(lambda: bool(reports), 5)
    [report] = reports
    assert report.dead_lettered and report.step == "redelivery" and isinstance(report.error, ConnectionFailed)
    assert 5 <= sends.count("q") <= 40  # retried with the policy's 10 ms waits for about 150 ms
    assert tracker.metrics.counts["dead_lettered"] == 1 and tracker.metrics.counts["tracker_failures"] == 0
    reader = log.reader()
    reader.assign({TopicPartition("q-dead", p): 0 for p in range(2)})
    [dead] = await reader.poll(10, 1.0)
    await reader.close()
    assert dead.value == b"x" and dead.key == "k"
    assert "redelivery failed" in dead.attributes["dead_letter_reason"]


async def test_without_a_dead_letter_topic_the_give_up_is_reported_and_nothing_is_lost(log: InmemLog) -> None:
    await log.create_topic("q", 2)
    iterator = open_messages(log, config(), "sub")
    tracker = iterator.tracker
    assert tracker is not None
    failing_queue_sends(tracker)
    reports: list[GiveUp] = []
    tracker.on_give_up = reports.append
    async with iterator:
        await log.produce("q", b"x")
        first = await iterator.next_message(timeout=5)
        await first.nack()
        await wait_until(lambda: bool(reports), 5)
        assert not reports[0].dead_lettered
        assert tracker.metrics.counts["abandoned"] == 1
    # The message stayed started (no END): a restarted tracker, whose writes work, redelivers it.
    again_iterator = open_messages(log, config(redelivery_backoff=None), "sub")
    async with again_iterator:
        again = await again_iterator.next_message(timeout=10)
        assert again.data == b"x" and again.delivery_attempt == 2
        await again.ack()
