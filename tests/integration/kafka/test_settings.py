"""Kafka settings, URLs and the librdkafka configs built from them (no broker needed)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import broker
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.rdkafka_config import consumer_config, producer_config, reader_config, redacted
from broker.backends.kafka.registration import factory
from broker.backends.kafka.settings import ConsumerOptions, KafkaSettings
from broker.capabilities import Capabilities
from broker.driver.settings import describe
from broker.errors import ConfigError, UnknownSetting


def kafka_settings(**values: Any) -> KafkaSettings:
    """KafkaSettings with a bootstrap server (there is no default host)."""
    return KafkaSettings(bootstrap_servers=("k:9092",), **values)


def open_kafka(target: str | dict[str, object]) -> KafkaBackend:
    backend = broker.connect(target)
    assert isinstance(backend, KafkaBackend)
    return backend


def test_url_hosts_query_and_credentials_map_onto_settings() -> None:
    backend = open_kafka("kafka://alice:s3cret@k1:9093,k2?group_id=orders&linger=0.005&acks=leader")
    settings = backend.settings
    assert settings.bootstrap_servers == ("k1:9093", "k2:9092")
    assert settings.group_id == "orders" and settings.linger == 0.005 and settings.acks == "leader"
    assert settings.sasl_username == "alice" and settings.sasl_password == "s3cret"
    assert "s3cret" not in repr(settings) and "s3cret" not in repr(backend)
    assert describe(settings)["sasl_password"] == "***"
    config = producer_config(settings)
    assert config["security.protocol"] == "sasl_ssl"  # credentials never travel in clear by default
    assert config["sasl.mechanism"] == "PLAIN"
    assert redacted(config)["sasl.password"] == "***"


def test_unknown_and_bad_settings_are_errors() -> None:
    with pytest.raises(UnknownSetting, match="lingr"):
        broker.connect("kafka://k:9092?lingr=1")
    for bad in (
        "kafka://k:9092?acks=some",
        "kafka://k:9092?linger=-1",
        "kafka://k:9092?session_timeout=1&heartbeat_interval=2",
        "kafka://k:9092?batch_size=0",
        "kafka://k:9092?sasl_mechanism=GSSAPI&sasl_password=x",
    ):
        with pytest.raises(ConfigError):
            broker.connect(bad)
    with pytest.raises(ConfigError):
        KafkaSettings(bootstrap_servers=("no-port",))


def test_defaults_follow_the_seed_except_where_documented() -> None:
    settings = kafka_settings()
    producer = producer_config(settings)
    assert producer["linger.ms"] == 10 and producer["batch.size"] == 5 * 1024 * 1024
    assert producer["acks"] == "all" and producer["enable.idempotence"] is True
    assert producer["compression.type"] == "snappy" and producer["partitioner"] == "murmur2_random"
    consumer = consumer_config(settings, settings.consumer_options(), "g")
    # librdkafka's fetch defaults, not lib-brokers' 100 B / 5 s: a lone record is seen at once.
    assert consumer["fetch.min.bytes"] == 1 and consumer["fetch.wait.max.ms"] == 500
    assert consumer["fetch.max.bytes"] == consumer["max.partition.fetch.bytes"] == 10 * 1024 * 1024
    assert consumer["enable.auto.commit"] is False and consumer["enable.auto.offset.store"] is False
    assert consumer["isolation.level"] == "read_committed" and consumer["auto.offset.reset"] == "earliest"
    assert settings.batch_size == 100
    assert producer_config(kafka_settings(acks="leader"))["enable.idempotence"] is False
    assert isinstance(producer["logger"], logging.Logger)


def test_raw_librdkafka_settings_override_everything_and_stay_hidden() -> None:
    settings = kafka_settings(
        librdkafka={"socket.timeout.ms": 1234, "sasl.password": "hidden"},
        producer_config={"linger.ms": 0},
        consumer_config={"fetch.wait.max.ms": 7},
    )
    assert producer_config(settings)["linger.ms"] == 0
    assert producer_config(settings)["socket.timeout.ms"] == 1234
    options = settings.consumer_options()
    assert consumer_config(settings, options, "g")["fetch.wait.max.ms"] == 7
    assert "group.id" not in reader_config(settings, options)
    assert "hidden" not in repr(settings) and describe(settings)["librdkafka"] == "***"
    transactional = producer_config(settings, transactional_id="tx-1")
    assert transactional["transactional.id"] == "tx-1" and transactional["enable.idempotence"] is True


def test_tls_and_kerberos_pass_through() -> None:
    tls = producer_config(
        kafka_settings(ssl_ca_location="/ca.pem", ssl_key_password="pw", insecure_skip_verify=True)
    )
    assert tls["security.protocol"] == "ssl" and tls["ssl.ca.location"] == "/ca.pem"
    assert tls["enable.ssl.certificate.verification"] is False
    kerberos = producer_config(kafka_settings(kerberos_principal="me@REALM", kerberos_keytab="/k.tab"))
    assert kerberos["sasl.mechanism"] == "GSSAPI" and kerberos["security.protocol"] == "sasl_ssl"
    explicit = producer_config(
        kafka_settings(sasl_username="u", sasl_password="p", security_protocol="sasl_plaintext")
    )
    assert explicit["security.protocol"] == "sasl_plaintext"
    with pytest.raises(ConfigError):
        kafka_settings(kerberos_keytab="/k.tab", sasl_mechanism="PLAIN")


def test_consumer_options_come_from_the_connection_and_per_call_overrides() -> None:
    backend = open_kafka("kafka://k:9092?batch_size=7&start=latest")
    options = backend._consumer_options({"session_timeout": "2", "heartbeat_interval": "0.3"})
    assert options == ConsumerOptions(
        start="latest", batch_size=7, session_timeout=2.0, heartbeat_interval=0.3
    )
    with pytest.raises(UnknownSetting):
        backend._consumer_options({"nonsense": 1})
    assert ConsumerOptions(assignment_strategy="cooperative-sticky").cooperative


def test_capabilities_and_registration() -> None:
    backend = open_kafka("kafka://k:9092")
    assert backend.capabilities == Capabilities(
        persistent=True,
        per_key_order=True,
        backlog_for_new_subscriptions=True,
        records=True,
        transactions=True,
        replay=True,
        # per-message acknowledgement through the marker-topic queue
        messages=True,
        nack_redelivers=True,
        delayed_nack=True,
        ack_deadline=True,
        in_progress=True,
        delivery_attempt=True,
        dead_letter=True,
        competing_consumers=True,
        max_message_bytes=1_000_000,
    )
    assert "kafka" in broker.available_backends()
    with pytest.raises(broker.errors.ConfigError):
        backend.messages("t", "")  # a subscription name is needed
    server = factory.dev_server(port=19999)
    server.stop()  # removes its unused work directory
    assert server.url == "kafka://127.0.0.1:19999" and not server.running
    assert server.command[1:] == [
        "broker",
        "--listener-url",
        "tcp://127.0.0.1:19999",
        "--advertised-listener-url",
        "tcp://127.0.0.1:19999",
        "--storage-engine",
        "memory://tansu/",
    ]
