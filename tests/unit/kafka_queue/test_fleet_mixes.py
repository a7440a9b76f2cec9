"""Go-fleet combinations that misbehave are warned about at run time (issue 34, point 9).

(a) a tracker outside go_fleet reads per-message markers it did not write (a kafka-mq-go consumer's):
beside a Go tracker each expired message would be redelivered twice; (b) a go_fleet tracker reads
batched markers (our consumers without go_fleet): a Go tracker in the same group skips them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import QueueMetrics, QueueService, QueueSettings
from broker.backends.kafka.queue.fleet import (
    FOREIGN_PER_MESSAGE,
    GO_FLEET_BATCHED,
    FleetGuard,
    scan_for_batched,
)
from broker.backends.kafka.queue.markers import Marker, MarkerType, MessageId, encode_marker
from broker.log import TopicPartition
from broker.testing import wait_until


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://fleet-{uuid.uuid4().hex}?partitions=2")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


def settings(**overrides: Any) -> QueueSettings:
    values: dict[str, Any] = {
        "message_topic": "q",
        "marker_topic": "q-markers",
        "redelivery_timeout": 0.2,
        "next_message_timeout": 0.05,
        "use_now_if_no_marker_seen": 0.05,
        "tracker_poll_interval": 0.02,
    }
    values.update(overrides)
    return QueueSettings(**values)


async def test_a_tracker_outside_go_fleet_warns_on_a_go_consumers_markers_and_still_redelivers(
    log: InmemLog, caplog: pytest.LogCaptureFixture
) -> None:
    config = settings()
    service = QueueService(log, config)
    await service.create_topics(partitions=2)
    # What a kafka-mq-go consumer does: the message in the queue topic keyed by queue id, then a
    # per-message START (payload included, no delivery attempt field) on the markers topic.
    tp, offset = await log.produce("q", b"from go", key="jobs")
    start = Marker(MarkerType.START, MessageId(tp.partition, offset), 200, b"jobs", b"from go")
    await log.produce("q-markers", encode_marker(start), key="jobs")
    caplog.set_level(logging.WARNING)
    tracker = service.tracker()
    async with tracker:
        reader = log.reader()
        reader.assign({TopicPartition("q", p): 0 for p in range(2)})
        seen: list[bytes] = []

        async def copies() -> int:
            seen.extend(r.value or b"" for r in await reader.poll(10, 0.05))
            return seen.count(b"from go")

        for _ in range(200):
            if await copies() >= 2:
                break
        await reader.close()
    assert seen.count(b"from go") >= 2, "the tracker must still redeliver (no loss)"
    assert FOREIGN_PER_MESSAGE in tracker.fleet.warned
    assert tracker.metrics.counts["fleet_mismatch"] >= 1
    warnings = [r for r in caplog.records if "did not write" in r.getMessage()]
    assert len(warnings) == 1 and "--go-fleet" in warnings[0].getMessage()


async def test_our_own_per_message_markers_raise_no_warning(log: InmemLog) -> None:
    config = settings(marker_format="per-message")
    service = QueueService(log, config)
    await service.create_topics(partitions=2)
    tracker = service.tracker()
    async with tracker, service.consumer("jobs") as consumer:
        await service.producer("jobs").send(b"ours")
        message = await consumer.receive(timeout=5)
        await message.nack(delay=0.05)
        again = await consumer.receive(timeout=5)
        await again.ack()
    assert not tracker.fleet.warned and not tracker.metrics.counts["fleet_mismatch"]


async def test_a_go_fleet_tracker_warns_on_batched_markers(
    log: InmemLog, caplog: pytest.LogCaptureFixture
) -> None:
    ours = QueueService(log, settings())  # our default consumers: batched markers
    await ours.create_topics(partitions=2)
    async with ours.consumer("jobs") as consumer:
        await ours.producer("jobs").send(b"batched")
        message = await consumer.receive(timeout=5)
        await message.ack()
    caplog.set_level(logging.ERROR)
    go = QueueService(log, settings(go_fleet=True))
    tracker = go.tracker()
    async with tracker:
        await wait_until(lambda: GO_FLEET_BATCHED in tracker.fleet.warned, 5)
    errors = [r for r in caplog.records if "reads batched markers" in r.getMessage()]
    assert len(errors) == 1 and "go_fleet=True on every consumer" in errors[0].getMessage()


async def test_the_start_scan_finds_batched_markers_in_any_partition(log: InmemLog) -> None:
    ours = QueueService(log, settings())
    await ours.create_topics(partitions=2)
    async with ours.consumer("jobs") as consumer:
        await ours.producer("jobs").send(b"batched")
        await (await consumer.receive(timeout=5)).ack()
    guard = FleetGuard(settings(go_fleet=True), QueueMetrics())
    await scan_for_batched(log, guard)  # reads every partition's tail, owned or not
    assert GO_FLEET_BATCHED in guard.warned
    clean = FleetGuard(settings(go_fleet=True, marker_topic="other-markers"), QueueMetrics())
    await log.create_topic("other-markers", 2)
    await scan_for_batched(log, clean)
    assert not clean.warned
