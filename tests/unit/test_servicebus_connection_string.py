"""Service Bus connection strings: an unknown property is a ConfigError from ``broker.connect()`` (issue 27).

It used to be accepted, and the first publish then timed out after about 5 s. Unknown properties are
refused like unknown URL query keys; the error names the property but never shows the key, the
signature or the whole connection string. Nothing here reaches a server (the backend connects lazily).
"""

from __future__ import annotations

from typing import Any

import pytest

import broker
from broker.driver.settings import redact_url
from broker.errors import ConfigError

pytest.importorskip("azure.servicebus")

SECRET = "c2VjcmV0LWtleS12YWx1ZS0yNw=="
ENDPOINT = "Endpoint=sb://myns.servicebus.windows.net/"
GOOD = f"{ENDPOINT};SharedAccessKeyName=app;SharedAccessKey={SECRET}"
BOGUS = f"{GOOD};Bogus=1"


def _targets(connection_string: str) -> list[Any]:
    """Every way ``broker.connect`` takes a connection string."""
    return [
        connection_string,
        {"backend": "servicebus", "connection_string": connection_string},
        {"url": connection_string},
        {"url": connection_string, "backend": "servicebus"},
    ]


@pytest.mark.parametrize("target", _targets(BOGUS), ids=["string", "mapping", "url-key", "url-and-backend"])
def test_an_unknown_property_is_a_config_error_from_connect(target: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        broker.connect(target)
    text = str(caught.value)
    assert "Bogus" in text, "the error names the unknown property"
    assert SECRET not in text
    assert BOGUS not in text and GOOD not in text
    assert SECRET not in repr(caught.value)


@pytest.mark.parametrize(
    "extra",
    [
        "Bogus=1",
        "bogus=",  # no value: still unknown
        "HostName=myns.servicebus.windows.net",  # an IoT Hub property, not a Service Bus one
        "TransportType=AmqpWebSockets",  # a .NET client option, not a connection string property
        "SharedAccessKeyNam=app2",  # a typo
    ],
)
def test_unknown_properties_are_refused_wherever_they_sit(extra: str) -> None:
    name = extra.partition("=")[0]
    targets: list[Any] = [
        f"{GOOD};{extra}",
        f"{ENDPOINT};{extra};SharedAccessKeyName=app;SharedAccessKey={SECRET};",
        # Only a string starting with Endpoint= is taken for a connection string where a URL is
        # expected; in a mapping the properties may come in any order.
        {"backend": "servicebus", "connection_string": f"{extra};{GOOD}"},
    ]
    for target in targets:
        with pytest.raises(ConfigError, match="unknown") as caught:
            broker.connect(target)
        assert name in str(caught.value)
        assert SECRET not in str(caught.value)


def test_a_property_name_that_may_be_a_secret_is_not_shown() -> None:
    # A key pasted without its "SharedAccessKey=" becomes a property name: the error must not echo
    # a name that does not look like a property name, nor one that is part of a secret value.
    pasted = "dGhpcyBpcyBhIHNlY3JldCBrZXk0Mg+/x"
    with pytest.raises(ConfigError, match="unknown") as caught:
        broker.connect(f"{GOOD};{pasted}==")
    assert pasted not in str(caught.value) and SECRET not in str(caught.value)
    with pytest.raises(ConfigError, match="unknown") as caught:
        broker.connect(f"{ENDPOINT};SharedAccessKeyName=app;SharedAccessKey=Zm9vHiddenWordYmFy;HiddenWord=1")
    assert "HiddenWord" not in str(caught.value)
    signature = f"SharedAccessSignature sr=myns&sig={SECRET}&se=1"
    with pytest.raises(ConfigError, match="unknown") as caught:
        broker.connect(f"{ENDPOINT};SharedAccessSignature={signature};Extra=1")
    assert SECRET not in str(caught.value) and "sig=" not in str(caught.value)
    assert "Extra" in str(caught.value)


def test_several_unknown_properties_are_named_together() -> None:
    with pytest.raises(ConfigError) as caught:
        broker.connect(f"{GOOD};Bogus=1;Other=2")
    assert "Bogus" in str(caught.value) and "Other" in str(caught.value)


@pytest.mark.parametrize(
    "connection_string",
    [
        GOOD,
        f"{GOOD};EntityPath=orders",
        f"{GOOD};UseDevelopmentEmulator=false",
        "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=app;SharedAccessKey=k;UseDevelopmentEmulator=true",
        f"{ENDPOINT};SharedAccessSignature=SharedAccessSignature sr=x&sig=y&se=1;EntityPath=orders",
        # Property names are matched without regard to case, as azure-servicebus does.
        f"endpoint=sb://myns.servicebus.windows.net/;sharedaccesskeyname=app;SHAREDACCESSKEY={SECRET};entitypath=q",
    ],
)
async def test_every_known_property_is_accepted(connection_string: str) -> None:
    for target in _targets(connection_string):
        backend = broker.connect(target)
        assert SECRET not in repr(backend)
        await backend.close()



@pytest.mark.parametrize(
    "target",
    [
        "SharedAccessKey=TOPSECRETVALUE;Endpoint=sb://ns/;Bogus=1",
        {"url": "SharedAccessKey=TOPSECRETVALUE;SharedAccessKeyName=k;Endpoint=sb://ns/;Bogus=1"},
    ],
)
def test_a_connection_string_whose_keys_come_in_any_order_never_shows_its_key(target: Any) -> None:
    """Azure accepts the keys in any order: such a string is a connection string, not a URL with a
    bad scheme, and its error never carries the key."""
    with pytest.raises(ConfigError) as caught:
        broker.connect(target)
    assert "TOPSECRETVALUE" not in str(caught.value)
    assert "Bogus" in str(caught.value)


def test_redacting_a_connection_string_in_any_key_order_hides_it_whole() -> None:
    text = "SharedAccessKeyName=k;SharedAccessKey=TOPSECRETVALUE;Endpoint=sb://ns.servicebus.windows.net/"
    assert "TOPSECRETVALUE" not in redact_url(text)
    assert redact_url("kafka://h:9092?sasl_password=x") == "kafka://h:9092?sasl_password=***"
