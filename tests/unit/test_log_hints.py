"""``broker.log.ReadHints``: checked on creation, applied by the Kafka log within its bounds,
ignored by the in-memory log, and the queue's fast path found through ``broker.log.RawBatches``."""

from __future__ import annotations

import pytest

import broker
from broker.backends.inmem import InmemBackend
from broker.errors import ConfigError
from broker.log import RawBatches, ReadHints, TopicPartition


def test_hints_are_checked() -> None:
    with pytest.raises(ConfigError):
        ReadHints(max_wait=-1)
    with pytest.raises(ConfigError):
        ReadHints(failure_timeout=-0.5)
    with pytest.raises(ConfigError):
        ReadHints(min_bytes=0)
    assert ReadHints() == ReadHints(None, None, None, None)


def test_the_kafka_log_maps_hints_within_its_bounds() -> None:
    pytest.importorskip("confluent_kafka")
    from broker.backends.kafka.admin import KafkaAdmin
    from broker.backends.kafka.log import KafkaLog
    from broker.backends.kafka.settings import KafkaSettings

    admin = KafkaAdmin({"bootstrap.servers": "127.0.0.1:1"}, timeout=1.0)  # never used
    servers = ("127.0.0.1:1",)
    log = KafkaLog(KafkaSettings(servers, session_timeout=45.0, heartbeat_interval=3.0), admin=admin)
    assert log.hinted(None) == {}
    assert log.hinted(ReadHints(max_wait=0.1, min_bytes=1, out_of_range="earliest")) == {
        "fetch_max_wait": 0.1,
        "fetch_min_bytes": 1,
        "start": "earliest",
    }
    # a failure timeout becomes a session between the broker's minimum (6 s) and 10 s ...
    assert log.hinted(ReadHints(failure_timeout=1.0))["session_timeout"] == 6.0
    assert log.hinted(ReadHints(failure_timeout=8.0)) == {"session_timeout": 8.0, "heartbeat_interval": 8 / 3}
    assert log.hinted(ReadHints(failure_timeout=60.0))["session_timeout"] == 10.0
    # ... never above the connection's own session timeout
    short = KafkaLog(KafkaSettings(servers, session_timeout=2.0, heartbeat_interval=0.3), admin=admin)
    assert short.hinted(ReadHints(failure_timeout=8.0)) == {"session_timeout": 2.0, "heartbeat_interval": 0.3}


async def test_the_in_memory_log_takes_and_ignores_hints() -> None:
    backend = broker.connect("inmem://hints")
    assert isinstance(backend, InmemBackend)
    async with backend:
        log = backend.log()
        await log.create_topic("t", 1)
        await log.produce("t", b"v", partition=0)
        hints = ReadHints(max_wait=0.1, min_bytes=4096, failure_timeout=5, out_of_range="earliest")
        reader = log.reader(hints=hints)
        reader.assign({TopicPartition("t", 0): 0})
        assert [r.value for r in await reader.poll(10, 1)] == [b"v"]
        await reader.close()
        consumer = log.consumer("g", ["t"], hints=hints)
        assert not isinstance(consumer, RawBatches)  # the queue reads Records from it
        await consumer.close()
