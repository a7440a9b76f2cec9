"""Each backend declares its consumer options once: its settings inherit its ``ConsumerOptions``.

The settings still accept every consumer option as a URL query parameter and a mapping key, still
check the consumer fields, keep secrets out of ``repr``, and turn into a ``ConsumerOptions`` with
:func:`broker.driver.settings.options_from`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast
from urllib.parse import quote

import pytest

from broker.driver.settings import build_settings, describe, field_values, options_from, parse_url
from broker.errors import ConfigError, UnknownSetting
from tests.unit.test_shared_settings_helpers import BACKENDS, REQUIRED

#: The backends whose settings inherit the consumer fields (all but Pub/Sub), the settings class of
#: each, and the settings that need a value to be valid at all.
INHERITING = BACKENDS
#: Per backend, a consumer option set to a value other than its default, and a value it refuses.
CHANGED: dict[str, tuple[str, str, Any, Any]] = {
    "inmem": ("batch_size", "7", 7, 0),
    "jetstream": ("ack_wait", "2.5", 2.5, -1.0),
    "kafka": ("fetch_max_wait", "0.25", 0.25, -1.0),
    "pulsar": ("receiver_queue_size", "5", 5, 0),
    "rabbitmq": ("prefetch", "5", 5, 0),
    "redis": ("poll_interval", "0.25", 0.25, 0.0),
    "servicebus": ("max_wait", "2", 2.0, 0.0),
}


def _required(backend: str) -> dict[str, Any]:
    return dict(cast(Mapping[str, Any], REQUIRED.get(backend, {})))


def _module(backend: str) -> ModuleType:
    return importlib.import_module(f"broker.backends.{backend}.settings")


def _types(backend: str) -> tuple[type[Any], type[Any]]:
    module = _module(backend)
    return getattr(module, INHERITING[backend]), module.ConsumerOptions


def _as_query_value(value: Any) -> str:
    """``value`` written as a URL query parameter that :func:`build_settings` reads back as ``value``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


# -- options_from ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Options:
    ack_wait: float = 30.0
    batch_size: int = 10

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class _Settings(_Options):
    name: str = "n"

    def __post_init__(self) -> None:  # the settings' own checks; the options' run in options_from
        pass


def test_options_from_copies_the_fields_and_applies_overrides() -> None:
    settings = _Settings(ack_wait=5.0, batch_size=20)
    made = options_from(_Options, settings)
    assert type(made) is _Options
    assert made == _Options(ack_wait=5.0, batch_size=20)
    assert options_from(_Options, settings, {"batch_size": 3}) == _Options(ack_wait=5.0, batch_size=3)
    assert options_from(_Options, settings, None) == made
    assert settings.batch_size == 20  # the source is left as it is


def test_options_from_runs_the_checks_of_the_options() -> None:
    with pytest.raises(ConfigError, match="batch_size must be >= 1, got 0"):
        options_from(_Options, _Settings(batch_size=0))
    with pytest.raises(ConfigError, match="batch_size must be >= 1, got 0"):
        options_from(_Options, _Settings(), {"batch_size": 0})
    with pytest.raises(TypeError):
        options_from(_Options, _Settings(), {"no_such_option": 1})


# -- the backends ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", sorted(INHERITING))
def test_consumer_fields_are_declared_once(backend: str) -> None:
    settings_type, options_type = _types(backend)
    assert issubclass(settings_type, options_type)
    own = vars(settings_type).get("__annotations__", {})
    names = [f.name for f in dataclasses.fields(options_type)]
    assert not [name for name in names if name in own], "a consumer field is declared again on the settings"
    assert not hasattr(_module(backend), "_CONSUMER_DEFAULTS")
    settings_fields = {f.name: f for f in dataclasses.fields(settings_type)}
    for option in dataclasses.fields(options_type):
        assert settings_fields[option.name] is option  # the very field: same default, repr, metadata
        assert option.kw_only, option.name


@pytest.mark.parametrize("backend", sorted(INHERITING))
def test_consumer_fields_cannot_be_given_by_position(backend: str) -> None:
    settings_type, options_type = _types(backend)
    with pytest.raises(TypeError):
        options_type(next(iter(field_values(options_type, options_type()).values())))
    positional = [f for f in dataclasses.fields(settings_type) if f.init and not f.kw_only]
    values = [_required(backend).get(f.name, f.default) for f in positional]
    settings_type(*values)  # the settings' own fields still go by position, in their order
    with pytest.raises(TypeError):
        settings_type(*values, None)


@pytest.mark.parametrize("backend", sorted(INHERITING))
def test_every_consumer_option_is_a_url_query_parameter(backend: str) -> None:
    settings_type, options_type = _types(backend)
    defaults = field_values(options_type, options_type())
    query = "&".join(f"{name}={quote(_as_query_value(value))}" for name, value in defaults.items())
    values: dict[str, Any] = {**_required(backend), **parse_url(f"{backend}://h?{query}").query}
    settings = build_settings(settings_type, values, backend=backend)
    assert settings == settings_type(**_required(backend))

    name, text, value, _ = CHANGED[backend]
    changed = build_settings(settings_type, {**_required(backend), name: text}, backend=backend)
    assert getattr(changed, name) == value
    assert field_values(options_type, changed)[name] == value


@pytest.mark.parametrize("backend", sorted(INHERITING))
def test_every_consumer_option_is_a_mapping_key(backend: str) -> None:
    settings_type, options_type = _types(backend)
    defaults = field_values(options_type, options_type())
    mapping = {name.replace("_", "-"): value for name, value in defaults.items()}
    settings = build_settings(settings_type, {**_required(backend), **mapping}, backend=backend)
    assert settings == settings_type(**_required(backend))
    with pytest.raises(UnknownSetting) as caught:
        build_settings(settings_type, {"no_such_setting": 1}, backend=backend)
    assert {f.name for f in dataclasses.fields(options_type)} <= set(caught.value.valid)


@pytest.mark.parametrize("backend", sorted(INHERITING))
def test_settings_still_check_the_consumer_fields(backend: str) -> None:
    settings_type, options_type = _types(backend)
    name, _, _, bad = CHANGED[backend]
    with pytest.raises(ConfigError) as from_options:
        options_type(**{name: bad})
    with pytest.raises(ConfigError) as from_settings:
        settings_type(**_required(backend), **{name: bad})
    assert str(from_settings.value) == str(from_options.value)
    with pytest.raises(ConfigError):
        build_settings(settings_type, {**_required(backend), name: bad}, backend=backend)


def test_the_kafka_consumer_config_stays_secret() -> None:
    from broker.backends.kafka.settings import ConsumerOptions, KafkaSettings

    settings = KafkaSettings(bootstrap_servers=("h:9092",), consumer_config={"sasl.password": "hunter2"})
    assert "hunter2" not in repr(settings)
    assert describe(settings)["consumer_config"] == "***"
    options = settings.consumer_options(batch_size=3)
    assert type(options) is ConsumerOptions
    assert options.batch_size == 3
    assert options.consumer_config == {"sasl.password": "hunter2"}
    assert "hunter2" not in repr(options)


def test_consumer_options_methods_keep_their_signatures() -> None:
    from broker.backends.inmem.settings import InmemSettings
    from broker.backends.jetstream.settings import ConsumerOptions as JetStreamOptions
    from broker.backends.jetstream.settings import JetStreamSettings
    from broker.backends.kafka.settings import KafkaSettings
    from broker.backends.servicebus.settings import ServiceBusSettings

    assert InmemSettings(batch_size=4).consumer_defaults()["batch_size"] == 4
    kafka = KafkaSettings(bootstrap_servers=("h:9092",), start="latest")
    assert kafka.consumer_defaults()["start"] == "latest"
    assert kafka.consumer_options().start == "latest"
    assert kafka.consumer_options(start="earliest").start == "earliest"
    with pytest.raises(ConfigError, match="heartbeat_interval"):
        kafka.consumer_options(heartbeat_interval=60.0)
    servicebus = ServiceBusSettings(namespace="ns", sas_token="t", prefetch=3)
    assert servicebus.consumer_defaults()["prefetch"] == 3
    made = JetStreamSettings(stream="S").consumer_options({"ack_deadline": "4"})
    assert type(made) is JetStreamOptions
    assert (made.stream, made.ack_wait) == ("S", 4.0)
