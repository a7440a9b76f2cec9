"""Enumerated settings are accepted in any case (as librdkafka accepts ``SASL_SSL`` and ``sasl_ssl``).

A copied client config (Confluent's ``security.protocol=SASL_SSL``, ``sasl.mechanism=plain``) must
work as written: every enumerated setting of every backend takes its value in any case and keeps the
canonical spelling the SDK wants. One test per enumerated setting; a completeness test keeps the
table in step with the settings dataclasses.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from typing import Any

import pytest

from broker.connect import _factory, available_backends
from broker.driver.settings import build_settings
from broker.errors import ConfigError, NotSupported

#: The settings a backend needs before any other one can be built (no server is dialled).
BASE: dict[str, dict[str, Any]] = {
    "inmem": {},
    "kafka": {"bootstrap_servers": "127.0.0.1:9092"},
    "nats": {},
    "pubsub": {"project": "p"},
    "pulsar": {},
    "rabbitmq": {},
    "redis": {},
    "rediss": {},
    "servicebus": {
        "namespace": "ns.servicebus.windows.net",
        "shared_access_key_name": "k",
        "shared_access_key": "v",
    },
    "sqs": {},
}

#: What a value needs besides the base (a mechanism's credentials).
NEEDS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("kafka", "sasl_mechanism", "GSSAPI"): {"kerberos_service_name": "kafka"},
    ("rabbitmq", "auth_mechanism", "external"): {
        "tls": True,
        "tls_cert_file": "c.pem",
        "tls_key_file": "k.pem",
    },
}

#: Every enumerated setting, by backend scheme: its canonical values.
ENUMERATED: dict[tuple[str, str], tuple[str, ...]] = {
    ("inmem", "start"): ("earliest", "latest"),
    ("inmem", "partitioner"): ("murmur2", "fnv1a"),
    ("kafka", "start"): ("earliest", "latest"),
    ("kafka", "isolation_level"): ("read_committed", "read_uncommitted"),
    ("kafka", "security_protocol"): ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"),
    ("kafka", "sasl_mechanism"): ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"),
    ("kafka", "acks"): ("all", "leader", "none"),
    ("kafka", "compression"): ("snappy", "zstd", "gzip", "lz4", "none"),
    ("kafka", "partitioner"): (
        "random",
        "consistent",
        "consistent_random",
        "murmur2",
        "murmur2_random",
        "fnv1a",
        "fnv1a_random",
    ),
    ("nats", "deliver_policy"): ("all", "new", "last", "last_per_subject"),
    ("nats", "storage"): ("file", "memory"),
    ("nats", "retention"): ("limits", "interest", "workqueue"),
    ("pubsub", "start"): ("earliest", "latest"),
    ("pulsar", "subscription_type"): ("shared", "key_shared", "failover", "exclusive"),
    ("pulsar", "initial_position"): ("earliest", "latest"),
    ("pulsar", "compression"): ("none", "lz4", "zlib", "zstd", "snappy"),
    ("pulsar", "sdk_log_level"): ("debug", "info", "warn", "error"),
    ("pulsar", "sdk_logger"): ("logging", "console"),
    ("rabbitmq", "auth_mechanism"): ("plain", "external"),
    ("rabbitmq", "exchange_type"): ("fanout", "topic", "direct", "headers"),
    ("redis", "start"): ("new", "earliest"),
    ("rediss", "start"): ("new", "earliest"),
    ("servicebus", "receive_mode"): ("peek_lock", "receive_and_delete"),
    ("servicebus", "sub_queue"): ("dead_letter", "transfer_dead_letter"),
    ("servicebus", "key_to"): ("partition_key", "session_id"),
    ("sqs", "mode"): ("sns", "queue"),
    **{
        (scheme, "provision"): ("create", "verify", "none")
        for scheme in BASE
    },
}

#: Values a backend recognises and refuses with ``NotSupported`` (its broker cannot honour them).
NOT_SUPPORTED = {("pubsub", "start", "earliest")}


def _literal_values(hint: Any) -> tuple[Any, ...]:
    """The values of a ``Literal`` hint (also inside ``X | None``); () for any other hint."""
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    return tuple(v for arg in typing.get_args(hint) for v in _literal_values(arg))


def _classes(scheme: str) -> tuple[type[Any], type[Any]]:
    """The backend's settings dataclass and its consumer options dataclass."""
    settings_type = _factory(scheme).settings_type
    module = importlib.import_module(settings_type.__module__)
    return settings_type, module.ConsumerOptions


def _build(scheme: str, name: str, value: Any) -> Any:
    """The settings (or, for a consumer-only option, the consumer options) with ``name=value``."""
    settings_type, options_type = _classes(scheme)
    if name not in {f.name for f in dataclasses.fields(settings_type)}:
        return build_settings(options_type, {name: value}, backend=scheme)
    needs = [
        v for (s, n, c), v in NEEDS.items() if (s, n) == (scheme, name) and c.lower() == str(value).lower()
    ]
    values = {**BASE[scheme], **(needs[0] if needs else {}), name: value}
    return build_settings(settings_type, values, backend=scheme)


def _other_cases(value: str) -> list[str]:
    """``value`` written as users copy it: upper case, title case, swapped case (lower for upper)."""
    return sorted({value.upper(), value.title(), value.swapcase(), value.lower()} - {value}) or [value]


def test_the_table_names_every_enumerated_setting_of_every_backend() -> None:
    found = set()
    for scheme in available_backends():
        for cls in _classes(scheme):
            hints = typing.get_type_hints(cls)
            for field in dataclasses.fields(cls):
                values = [v for v in _literal_values(hints[field.name]) if v != ""]
                if values:
                    found.add((scheme, field.name))
                    assert tuple(values) == ENUMERATED.get((scheme, field.name)), (scheme, field.name)
    assert found == set(ENUMERATED)


@pytest.mark.parametrize(("scheme", "name"), sorted(ENUMERATED), ids=lambda x: str(x))
def test_an_enumerated_setting_is_accepted_in_any_case(scheme: str, name: str) -> None:
    for canonical in ENUMERATED[scheme, name]:
        for written in _other_cases(canonical):
            if (scheme, name, canonical) in NOT_SUPPORTED:
                with pytest.raises(NotSupported, match=f"{name}='{canonical}' is not supported"):
                    _build(scheme, name, written)
                continue
            settings = _build(scheme, name, written)
            assert getattr(settings, name) == canonical, (written, canonical)
    with pytest.raises(ConfigError, match=rf"{name}.*must be one of .*got 'no-such-value'"):
        _build(scheme, name, "no-such-value")


def test_a_copied_confluent_config_reaches_librdkafka_as_librdkafka_spells_it() -> None:
    from broker.backends.kafka.rdkafka_config import producer_config

    settings = _build("kafka", "security_protocol", "SASL_SSL")
    settings = dataclasses.replace(settings, sasl_mechanism="plain", sasl_username="u", sasl_password="p")
    config = producer_config(settings)
    assert config["security.protocol"] == "sasl_ssl"
    assert config["sasl.mechanism"] == "PLAIN"


def test_settings_made_directly_take_any_case_too() -> None:
    from broker.backends.kafka.settings import KafkaSettings

    settings = KafkaSettings(bootstrap_servers=("h:1",), security_protocol="SASL_SSL", acks="ALL")  # type: ignore[arg-type]
    assert (settings.security_protocol, settings.acks) == ("sasl_ssl", "all")
    with pytest.raises(ConfigError, match="acks"):
        KafkaSettings(bootstrap_servers=("h:1",), acks="most")  # type: ignore[arg-type]


def test_the_kafka_queue_marker_format_is_accepted_in_any_case() -> None:
    from broker.backends.kafka.queue.settings import queue_settings_for_topic

    for canonical in ("batched", "per-message"):
        for written in _other_cases(canonical):
            assert queue_settings_for_topic("t", {"marker_format": written}).marker_format == canonical
    with pytest.raises(ConfigError, match=r"marker_format.*got 'compact'"):
        queue_settings_for_topic("t", {"marker_format": "compact"})


def test_the_kafka_assignment_strategy_list_is_accepted_in_any_case() -> None:
    settings = _build("kafka", "assignment_strategy", "Cooperative-Sticky")
    assert settings.assignment_strategy == "cooperative-sticky"
    assert settings.consumer_options().cooperative
    assert (
        _build("kafka", "assignment_strategy", "RANGE, RoundRobin").assignment_strategy == "range,roundrobin"
    )
    with pytest.raises(ConfigError, match=r"assignment_strategy .*got 'sticky'"):
        _build("kafka", "assignment_strategy", "sticky")
