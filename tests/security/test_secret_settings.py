"""Every secret setting of every backend (old and new) stays out of ``repr`` and ``describe()``.

Walks the settings dataclasses: a field made with :func:`broker.driver.settings.secret` (or marked secret in
its metadata) is set to a recognisable value, which must then show nowhere. A setting whose name
says it holds a credential must be marked secret.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import pytest

from broker.driver.settings import describe

#: Each backend's settings class and the least it needs to be valid.
SETTINGS = {
    "jetstream": ("broker.backends.jetstream.settings", "JetStreamSettings", {}),
    "kafka": ("broker.backends.kafka.settings", "KafkaSettings", {"bootstrap_servers": ("h:9092",)}),
    "pulsar": ("broker.backends.pulsar.settings", "PulsarSettings", {}),
    "rabbitmq": ("broker.backends.rabbitmq.settings", "RabbitmqSettings", {}),
    "redis": ("broker.backends.redis.settings", "RedisSettings", {}),
    "pubsub": ("broker.backends.pubsub.settings", "PubsubSettings", {"project": "p"}),
    "servicebus": ("broker.backends.servicebus.settings", "ServiceBusSettings", {"namespace": "ns"}),
}

MARK = "s3cr3t-M4RK"


class _Secret:
    """An object secret (a credential object, a token callable) whose repr is the marker."""

    def __repr__(self) -> str:
        return f"<credential {MARK}>"

    def __call__(self, *args: Any) -> Any:
        return (MARK, 0.0)


def _value(settings_type: type, name: str) -> Any:
    """A valid value for secret field ``name`` that carries the marker."""
    special: dict[tuple[str, str], Any] = {
        ("ServiceBusSettings", "connection_string"): (
            f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey={MARK}"
        ),
        ("PubsubSettings", "credentials_json"): '{"marker": "' + MARK + '"}',
    }
    if (settings_type.__name__, name) in special:
        return special[(settings_type.__name__, name)]
    hint = str(settings_type.__dataclass_fields__[name].type)
    if "dict" in hint:
        return {"sasl.password": MARK}
    if "object" in hint:
        return _Secret()
    return MARK


def _exclusive(settings_type: type, name: str, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` adjusted so that ``name`` alone carries a credential."""
    kwargs = dict(base)
    if settings_type.__name__ == "ServiceBusSettings":
        if name == "connection_string":
            kwargs.pop("namespace")
        elif name == "shared_access_key":
            kwargs["shared_access_key_name"] = "k"
    if settings_type.__name__ == "RabbitmqSettings" and name == "tls_key_password":
        kwargs |= {"tls_cert_file": "/c.pem", "tls_key_file": "/k.pem"}
    return kwargs


def _secret_fields() -> list[tuple[str, type, str]]:
    found = []
    for backend, (module, name, _) in SETTINGS.items():
        try:
            settings_type = getattr(importlib.import_module(module), name)
        except ImportError:  # pragma: no cover - an extra is missing
            continue
        for field in dataclasses.fields(settings_type):
            if field.metadata.get("secret"):
                found.append((backend, settings_type, field.name))
    return found


@pytest.mark.parametrize(
    ("backend", "settings_type", "name"), _secret_fields(), ids=lambda v: getattr(v, "__name__", v)
)
def test_a_secret_setting_shows_nowhere(backend: str, settings_type: type, name: str) -> None:
    kwargs = _exclusive(settings_type, name, SETTINGS[backend][2])
    settings = settings_type(**kwargs, **{name: _value(settings_type, name)})
    shown = repr(settings) + repr(describe(settings)) + str(describe(settings))
    assert MARK not in shown, f"{settings_type.__name__}.{name} shows in repr or describe()"


_CREDENTIAL_WORDS = (
    "password",
    "token",
    "secret",
    "credential",
    "key_pem",
    "shared_access_key",
    "seed",
    "oauth",
)


@pytest.mark.parametrize("backend", list(SETTINGS))
def test_every_credential_setting_is_marked_secret(backend: str) -> None:
    module, name, _ = SETTINGS[backend]
    settings_type = getattr(importlib.import_module(module), name)
    unmarked = [
        f.name
        for f in dataclasses.fields(settings_type)
        if any(word in f.name for word in _CREDENTIAL_WORDS)
        and not f.metadata.get("secret")
        and f.name != "shared_access_key_name"
        and not f.name.endswith("_file")  # a path names where a secret is, it is none
        and f.type not in ("bool", bool)
    ]
    assert not unmarked, f"{name}: credential-like settings not marked secret: {unmarked}"
