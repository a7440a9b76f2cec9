"""``QueueSettings.go_fleet``: what sharing a marker queue with kafka-mq-go needs, in one setting.

kafka-mq-go's observable behaviour encoded here: its trackers are all in the fixed group
``kafka-mq-redelivery``; it reads only per-message markers (``Marker`` protobuf v1); its
redelivered copies carry no subscription header.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.backends.kafka.queue import QueueService, QueueSettings, open_messages
from broker.backends.kafka.queue.settings import GO_TRACKER_GROUP, queue_settings_for_topic
from broker.errors import ConfigError, Timeout
from broker.log import TopicPartition
from tests.unit.kafka_queue.test_markers_and_tracker_state import go_marker_class


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://go-{uuid.uuid4().hex}?partitions=2")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


def go_config(**overrides: Any) -> QueueSettings:
    values: dict[str, Any] = {
        "message_topic": "q",
        "marker_topic": "q-markers",
        "go_fleet": True,
        "redelivery_timeout": 0.3,
        "next_message_timeout": 0.05,
        "use_now_if_no_marker_seen": 0.05,
        "tracker_poll_interval": 0.02,
    }
    values.update(overrides)
    return QueueSettings(**values)


def test_one_setting_bundles_per_message_markers_and_the_go_tracker_group() -> None:
    config = go_config()
    assert GO_TRACKER_GROUP == "kafka-mq-redelivery"  # fixed in kafka-mq-go's tracker
    assert (config.marker_format, config.tracker_group) == ("per-message", GO_TRACKER_GROUP)
    assert not config.marks_handout
    assert QueueSettings("q", "m").marker_format == "batched"  # outside the mode: our own format
    with pytest.raises(ConfigError, match="per-message"):
        go_config(marker_format="batched")
    with pytest.raises(ConfigError, match="redelivered twice"):
        go_config(tracker_group="our-own")


def test_trackers_of_backend_topics_get_a_group_per_topic_unless_in_a_go_fleet() -> None:
    # Never kafka-mq-go's fixed group by default: a Go tracker in it takes markers partitions whose
    # batched markers it cannot read (found against the real kafka-mq-go: held back while it ran).
    assert QueueSettings("q", "q.markers").tracker_group == "kafka-mq-redelivery-q.markers"
    assert QueueSettings("q", "m", tracker_group="mine").tracker_group == "mine"
    assert QueueSettings("q", "m", go_fleet=True).tracker_group == GO_TRACKER_GROUP
    with pytest.raises(ConfigError):
        QueueSettings("q", "m", tracker_group="")
    assert queue_settings_for_topic("orders", {}).tracker_group == "kafka-mq-redelivery-orders.markers"
    fleet = queue_settings_for_topic("orders", {"go_fleet": "true"})
    assert (fleet.tracker_group, fleet.marker_format) == (GO_TRACKER_GROUP, "per-message")
    assert fleet.go_fleet


async def test_topic_mode_is_refused(log: InmemLog) -> None:
    service = QueueService(log, go_config())
    with pytest.raises(ConfigError, match="queue mode only"):
        service.consumer("sub", mode="topic")
    with pytest.raises(ConfigError, match="queue mode only"):
        open_messages(log, go_config(), "sub")


async def test_queue_mode_writes_only_markers_a_go_tracker_reads_and_redelivers_once(log: InmemLog) -> None:
    service = QueueService(log, go_config())
    await service.create_topics(partitions=2)
    count = 30  # enough that the chance of every redelivery landing in one partition is negligible
    # two trackers in the one Go group share the markers' partitions: each message comes back once
    async with service.tracker(), service.tracker(), service.consumer("jobs") as consumer:
        producer = service.producer("jobs")
        for i in range(count):
            producer.send_async(b"%d" % i)
        await producer.flush()
        first = [await consumer.receive(timeout=2) for _ in range(count)]
        for message in first:
            consumer.interrupt(message)  # as if the worker died
        again = [await consumer.receive(timeout=5) for _ in range(count)]
        await broker.ack_all(again)
        with pytest.raises(Timeout):
            await consumer.receive(timeout=1.0)
    assert sorted(int(m.data) for m in again) == list(range(count)), "redelivered exactly once each"
    assert {m.delivery_attempt for m in again} == {2}
    # Every queue record is keyed by the queue id: written back by key, every redelivery would land
    # in one partition, on one consumer; per-message redeliveries spread like batched ones.
    assert len({m.raw.partition for m in again}) > 1, "every redelivery went to one partition"
    Go = go_marker_class()
    reader = log.reader()
    reader.assign({TopicPartition("q-markers", p): 0 for p in range(2)})
    markers = []
    while batch := await reader.poll(1000, 0.2):
        markers.extend(batch)
    await reader.close()
    assert markers
    kinds = set()
    for record in markers:
        parsed = Go.FromString(record.value)  # every marker is one a Go tracker reads as its own
        assert parsed.version == 0 and parsed.HasField("message_id")
        # kafka-mq-go keys its markers by the queue id: its tracker reads the queue from the key
        assert record.key == "jobs", (parsed.type, record.key)
        kinds.add(parsed.type)
    assert {0, 1} <= kinds  # START and END markers both present (and both keyed)
