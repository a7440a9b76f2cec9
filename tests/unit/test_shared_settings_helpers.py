"""The helpers the backends' settings and registration modules share."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

import pytest

from broker.driver.dependencies import import_for_extra
from broker.driver.options import build_consumer_options
from broker.driver.settings import (
    build_settings,
    check_positive,
    field_values,
    parse_url,
    with_default_port,
)
from broker.errors import ConfigError, MissingDependency, UnknownSetting

BACKENDS = {
    "inmem": "InmemSettings",
    "jetstream": "JetStreamSettings",
    "kafka": "KafkaSettings",
    "pulsar": "PulsarSettings",
    "rabbitmq": "RabbitmqSettings",
    "redis": "RedisSettings",
    "servicebus": "ServiceBusSettings",
}
#: Settings that need a value to be valid at all.
REQUIRED = {
    "kafka": {"bootstrap_servers": ("h:9092",)},
    "servicebus": {"namespace": "ns", "sas_token": "t"},
}


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("h", "h:9092"),
        ("h:1", "h:1"),
        ("[::1]", "[::1]:9092"),
        ("[::1]:1", "[::1]:1"),
    ],
)
def test_with_default_port(host: str, expected: str) -> None:
    assert with_default_port(host, 9092) == expected


def test_url_credentials() -> None:
    assert parse_url("x://h").credentials("u", "p") == {}
    assert parse_url("x://me@h").credentials("u", "p") == {"u": "me"}
    assert parse_url("x://me:p%40ss@h").credentials("u", "p") == {"u": "me", "p": "p%40ss"}
    assert parse_url("x://m%40e:p%40ss@h").credentials("u", "p", decode=True) == {"u": "m@e", "p": "p@ss"}


def test_numbers_are_coerced_with_their_own_message() -> None:
    @dataclass(frozen=True)
    class S:
        count: int = 1
        seconds: float = 1.0

    assert build_settings(S, {"count": "3", "seconds": "0.5"}, backend="t") == S(3, 0.5)
    with pytest.raises(ConfigError, match="'count' must be an integer, got True"):
        build_settings(S, {"count": True}, backend="t")
    with pytest.raises(ConfigError, match=r"'count' must be an integer, got '1\.5'"):
        build_settings(S, {"count": "1.5"}, backend="t")
    with pytest.raises(ConfigError, match="'seconds' must be a number, got 'soon'"):
        build_settings(S, {"seconds": "soon"}, backend="t")


def test_check_positive_names_the_first_bad_value() -> None:
    check_positive(a=1, b=0.5)
    with pytest.raises(ConfigError, match=r"^b must be > 0, got 0$"):
        check_positive(a=1, b=0, c=-1)
    with pytest.raises(ConfigError, match=r"^close_timeout must be > 0 seconds, got -1$"):
        check_positive("seconds", close_timeout=-1)


@dataclass(frozen=True)
class _Options:
    ack_wait: float = 30.0
    batch_size: int = 10


@dataclass(frozen=True)
class _Settings:
    name: str = "n"
    ack_wait: float = 5.0
    batch_size: int = 20


def test_field_values_reads_the_fields_of_another_dataclass() -> None:
    assert field_values(_Options, _Settings()) == {"ack_wait": 5.0, "batch_size": 20}


def test_build_consumer_options() -> None:
    names = {"ack_deadline": "ack_wait"}
    made = build_consumer_options(_Options, _Settings(), {}, native_names=names, backend="t")
    assert made == _Options(5.0, 20)
    made = build_consumer_options(
        _Options, _Settings(), {"ack-deadline": "2", "batch_size": "3"}, native_names=names, backend="t"
    )
    assert made == _Options(2.0, 3)
    with pytest.raises(ConfigError, match="give ack_wait or ack_deadline, not both"):
        build_consumer_options(
            _Options, _Settings(), {"ack_deadline": 1, "ack_wait": 1}, native_names=names, backend="t"
        )
    with pytest.raises(UnknownSetting):
        build_consumer_options(_Options, _Settings(), {"nope": 1}, native_names=names, backend="t")


def test_import_for_extra() -> None:
    assert import_for_extra("x", "json") is importlib.import_module("json")
    with pytest.raises(MissingDependency, match=r"provides 'no_such_sdk'.*polybroker\[fancy\]") as caught:
        import_for_extra("fancy", "no_such_sdk.aio", named="no_such_sdk")
    assert caught.value.extra == "fancy"
    assert isinstance(caught.value.__cause__, ImportError)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_settings_carry_the_consumer_defaults(backend: str) -> None:
    module = importlib.import_module(f"broker.backends.{backend}.settings")
    settings_type = getattr(module, BACKENDS[backend])
    options_type = module.ConsumerOptions
    settings = settings_type(**REQUIRED.get(backend, {}))
    defaults = {f.name: f.default for f in dataclasses.fields(settings_type)}
    for option in dataclasses.fields(options_type):
        assert defaults[option.name] == option.default, option.name
    if hasattr(settings, "consumer_defaults"):
        assert settings.consumer_defaults() == field_values(options_type, settings)
