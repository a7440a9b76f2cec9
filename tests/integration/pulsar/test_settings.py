"""Pulsar settings, URLs, the client configuration they produce, and secrets (no server needed)."""

from __future__ import annotations

import _pulsar  # type: ignore[import-not-found]
import pytest

import broker
from broker.backends.pulsar.backend import PulsarBackend, capabilities_for
from broker.backends.pulsar.consumer import consumer_configuration
from broker.backends.pulsar.publisher import producer_configuration
from broker.backends.pulsar.registration import factory
from broker.backends.pulsar.settings import ConsumerOptions, PulsarSettings
from broker.driver.settings import describe, parse_url
from broker.errors import ConfigError, UnknownSetting


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("shared", _pulsar.ConsumerType.Shared),
        ("key_shared", _pulsar.ConsumerType.KeyShared),
        ("failover", _pulsar.ConsumerType.Failover),
        ("exclusive", _pulsar.ConsumerType.Exclusive),  # lib-brokers makes this KeyShared
    ],
)
def test_subscription_types_map_to_the_same_pulsar_type(kind: str, expected: object) -> None:
    conf = consumer_configuration(ConsumerOptions(subscription_type=kind))  # type: ignore[arg-type]
    assert conf.consumer_type() == expected


def test_defaults() -> None:
    settings = PulsarSettings()
    assert settings.subscription_type == "shared"  # queue semantics: competing consumers
    conf = consumer_configuration(settings.consumer_options({}))
    assert conf.consumer_type() == _pulsar.ConsumerType.Shared
    assert conf.receiver_queue_size() == 100
    assert conf.negative_ack_redelivery_delay_ms() == 30_000
    assert conf.unacked_messages_timeout_ms() == 0
    producer = producer_configuration(settings)
    assert producer.send_timeout_millis() == 30_000
    assert producer.block_if_queue_full() is False
    assert producer.batching_enabled() is False
    caps = capabilities_for(settings)
    assert caps.competing_consumers and not caps.per_key_order and caps.delayed_nack
    assert capabilities_for(PulsarSettings(subscription_type="key_shared")).per_key_order


def test_consumer_options() -> None:
    options = PulsarSettings(ack_timeout=30).consumer_options(
        {"max_attempts": "4", "dead_letter_topic": "dlq"}
    )
    conf = consumer_configuration(options)
    assert conf.unacked_messages_timeout_ms() == 30_000
    assert options.max_attempts == 4
    with pytest.raises(ConfigError, match="at least 10"):
        PulsarSettings().consumer_options({"ack_timeout": 5})
    with pytest.raises(ConfigError):
        PulsarSettings().consumer_options({"max_attempts": 1})
    assert PulsarSettings().consumer_options({"dead_letter_topic": "dlq"}).dead_letter_topic == "dlq"
    with pytest.raises(UnknownSetting):
        PulsarSettings().consumer_options({"no_such_option": 1})


def test_urls() -> None:
    options = factory.url_options(parse_url("pulsar://a,b:7000,[::1]"))
    assert options == {"service_url": "pulsar://a:6650,b:7000,[::1]:6650"}
    options = factory.url_options(parse_url("pulsar://user:pw@h:6650"))
    assert options["basic_username"] == "user" and options["basic_password"] == "pw"
    with pytest.raises(ConfigError):
        factory.url_options(parse_url("pulsar://h:6650/a/path"))
    assert PulsarSettings(service_url="pulsar://h:6651", tls=True).url == "pulsar+ssl://h:6651"


def test_secrets_stay_out_of_repr_and_logs() -> None:
    settings = PulsarSettings(token="eyJ-secret-token")
    assert "eyJ-secret-token" not in repr(settings)
    assert describe(settings)["token"] == "***"
    settings = PulsarSettings(basic_username="u", basic_password="hunter2")
    assert "hunter2" not in repr(settings) and describe(settings)["basic_password"] == "***"
    with pytest.raises(ConfigError):
        PulsarSettings(token="t", basic_password="p")


async def test_token_and_tls_pass_through() -> None:
    """The client accepts token auth and mutual-TLS paths (it connects lazily, so no server is needed)."""
    backend = broker.connect(
        {
            "backend": "pulsar",
            "service_url": "pulsar+ssl://127.0.0.1:1",
            "token": "eyJ-secret-token",
            "tls_trust_certs_file_path": "/nonexistent/ca.pem",
            "tls_certificate_file_path": "/nonexistent/client.pem",
            "tls_private_key_file_path": "/nonexistent/client.key",
            "tls_validate_hostname": "true",
        }
    )
    assert isinstance(backend, PulsarBackend)
    assert "eyJ-secret-token" not in repr(backend) and "eyJ-secret-token" not in repr(backend.settings)
    await backend.close()
    with pytest.raises(ConfigError):
        PulsarSettings(tls_certificate_file_path="/c.pem")


def test_registered_under_the_pulsar_scheme() -> None:
    assert "pulsar" in broker.available_backends()
