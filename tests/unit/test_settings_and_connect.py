"""URL parsing, settings coercion, secrets, and choosing a backend with broker.connect."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Literal

import pytest

import broker
import broker.connect
import broker.driver
from broker.driver.settings import build_settings, describe, parse_url, redact_url, secret
from broker.errors import ConfigError, MissingDependency, UnknownBackend, UnknownSetting

connect_module = sys.modules["broker.connect"]  # the module: the package attribute is the function


@dataclasses.dataclass(frozen=True)
class Example:
    hosts: tuple[str, ...] = ("localhost:1",)
    port: int = 1
    ratio: float = 0.5
    enabled: bool = False
    mode: Literal["a", "b"] = "a"
    limit: int | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    password: str | None = secret()


def test_strings_are_coerced_to_field_types() -> None:
    s = build_settings(
        Example,
        {"hosts": "a:1, b:2", "port": "9", "ratio": "1.5", "enabled": "yes", "mode": "b", "limit": "none"},
        backend="x",
    )
    assert s == Example(("a:1", "b:2"), 9, 1.5, True, "b", None)
    assert build_settings(Example, {"limit": "7", "extra": {"k": 1}}, backend="x").limit == 7


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("port", "nine"),
        ("enabled", "maybe"),
        ("mode", "c"),
        ("ratio", "fast"),
        ("port", True),
        ("extra", "no"),
    ],
)
def test_bad_values_raise_config_errors(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=key):
        build_settings(Example, {key: value}, backend="x")


def test_unknown_keys_name_the_valid_ones() -> None:
    with pytest.raises(UnknownSetting) as info:
        build_settings(Example, {"prot": "1", "mode": "a"}, backend="x")
    assert info.value.keys == ["prot"]
    assert "port" in str(info.value)


def test_dashes_are_accepted_for_underscores_but_not_twice() -> None:
    assert build_settings(Example, {"limit": "3"}, backend="x").limit == 3
    with pytest.raises(ConfigError):
        build_settings(Example, {"port": "1", "port-": "2"}, backend="x")


def test_secrets_stay_out_of_repr_and_describe() -> None:
    s = Example(password="hunter2")
    assert "hunter2" not in repr(s)
    assert describe(s)["password"] == "***"


def test_parse_url_and_redaction() -> None:
    url = parse_url("kafka://user:pw@h1:9092,h2:9093/path?group_id=g&sasl_password=pw")
    assert url.scheme == "kafka"
    assert url.hosts == ("h1:9092", "h2:9093")
    assert url.username == "user" and url.password == "pw"
    assert "pw" not in repr(url)
    assert url.query == {"group_id": "g", "sasl_password": "pw"}
    redacted = redact_url("kafka://user:pw@h1:9092?group_id=g&sasl_password=pw")
    assert "pw" not in redacted.replace("sasl_password", "") and "group_id=g" in redacted
    assert redact_url("Endpoint=sb://x/;SharedAccessKey=abc") == "Endpoint=***"
    for bad in ("", "no scheme", "://x", "kafka://h?a=1&a=2"):
        with pytest.raises(ConfigError):
            parse_url(bad)


def test_connect_by_url_and_mapping() -> None:
    by_url = broker.connect("inmem://settings-test?partitions=4&ack_deadline=2")
    assert by_url.settings.partitions == 4  # type: ignore[attr-defined]
    by_mapping = broker.connect({"backend": "inmem", "name": "settings-test", "partitions": 2})
    assert by_mapping.broker is by_url.broker  # type: ignore[attr-defined]
    overlay = broker.connect({"url": "inmem://settings-test", "partitions": 3})
    assert overlay.settings.partitions == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("nosuch://x", UnknownBackend),
        ("inmem://x?bogus=1", UnknownSetting),
        ("inmem://x?partitions=0", ConfigError),
        ({"partitions": 1}, ConfigError),
        ({"backend": "inmem", "url": "inmem://a", "bogus": 1}, UnknownSetting),
        ({"backend": "kafka", "url": "inmem://a"}, ConfigError),
        (42, ConfigError),
    ],
)
def test_connect_errors_are_typed(target: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        broker.connect(target)


def test_unknown_backend_lists_the_registered_ones() -> None:
    with pytest.raises(UnknownBackend, match="inmem://"):
        broker.connect("nosuchbroker://localhost")


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    class BrokenEntryPoint:
        name = "fancy"
        value = "broker.backends.fancy:factory"

        def load(self) -> Any:
            raise ModuleNotFoundError("No module named 'fancy_sdk'", name="fancy_sdk")

    monkeypatch.setattr(connect_module, "_entry_points", lambda: {"fancy": BrokenEntryPoint()})
    with pytest.raises(MissingDependency, match=r"polybroker\[fancy\]"):
        broker.connect("fancy://host")


def test_third_parties_can_register_a_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.backends.inmem.registration import InmemFactory

    # registered for this test only: a backend left behind would show in every later capability
    # matrix of this worker (tests/unit/test_readme.py compares the README's with it)
    monkeypatch.setattr(connect_module, "_loaded", dict(connect_module._loaded))
    broker.driver.register_backend("mine", InmemFactory())
    assert "mine" in broker.available_backends()
    assert broker.connect("mine://registered").name == "inmem"


@pytest.mark.parametrize(
    "url",
    [
        "inmem://x:99999",
        "inmem://x:0",
        "inmem://x:port",
        "inmem://[::1:4222",
        "inmem://::1:4222",
        "inmem://:4222",
        "inmem://[::1]x",
    ],
)
def test_undialable_hosts_are_config_errors_from_connect(url: str) -> None:
    with pytest.raises(broker.errors.ConfigError):
        broker.connect(url)


def test_bracketed_ipv6_and_host_lists_parse() -> None:
    from broker.driver.settings import parse_url

    assert parse_url("kafka://[::1]:9092,h2:9093").hosts == ("[::1]:9092", "h2:9093")
