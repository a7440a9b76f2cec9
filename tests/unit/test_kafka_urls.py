"""Kafka URLs no client could dial are ConfigErrors from connect() (issue 14, finding 10)."""

from __future__ import annotations

import pytest

import broker
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.settings import KafkaSettings
from broker.errors import ConfigError


@pytest.mark.parametrize(
    "url",
    [
        "kafka://127.0.0.1:99999",  # port out of range (librdkafka would dial a wrapped port)
        "kafka://127.0.0.1:0",
        "kafka://",  # no host: never a silent 127.0.0.1:9092
        "kafka://?group_id=g",
        "kafka://h1:9092,h2:70000",
    ],
)
def test_undialable_kafka_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        broker.connect(url)


def test_a_mapping_without_servers_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="bootstrap server"):
        broker.connect({"backend": "kafka"})
    with pytest.raises(ConfigError):
        KafkaSettings()
    with pytest.raises(ConfigError, match="1-65535"):
        KafkaSettings(bootstrap_servers=("h:65536",))


@pytest.mark.parametrize(
    ("url", "servers"),
    [
        ("kafka://broker1", ("broker1:9092",)),
        ("kafka://broker1:19092,broker2", ("broker1:19092", "broker2:9092")),
        ("kafka://[::1]", ("[::1]:9092",)),
        ("kafka://[::1]:19092", ("[::1]:19092",)),
        ("kafka://?bootstrap_servers=b:9093", ("b:9093",)),
    ],
)
def test_explicit_hosts_are_taken(url: str, servers: tuple[str, ...]) -> None:
    backend = broker.connect(url)
    assert isinstance(backend, KafkaBackend)
    assert backend.settings.bootstrap_servers == servers
