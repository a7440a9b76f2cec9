"""Settings, URLs and credentials of the Service Bus backend (the last tests reach the FAKE server)."""

from __future__ import annotations

import logging
import uuid

import pytest

import broker
from broker import OutboundMessage
from broker.backends.servicebus.registration import factory
from broker.backends.servicebus.settings import MAX_BATCH_SIZE, ServiceBusSettings
from broker.driver.settings import build_settings, describe, parse_url
from broker.driver.testing.harness import collect
from broker.errors import ConfigError, UnknownSetting
from tests.servicebus_fake import FakeServiceBus

SECRET = "c2VjcmV0LWtleS12YWx1ZQ=="
CONNECTION = f"Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=app;SharedAccessKey={SECRET}"


def test_url_names_the_namespace_and_an_optional_key() -> None:
    assert factory.url_options(parse_url("servicebus://myns")) == {"namespace": "myns"}
    options = factory.url_options(parse_url("servicebus://app:a%2Fb%3D@myns.servicebus.windows.net"))
    assert options == {
        "namespace": "myns.servicebus.windows.net",
        "shared_access_key_name": "app",
        "shared_access_key": "a/b=",
    }
    settings = build_settings(ServiceBusSettings, options, backend="servicebus")
    assert settings.fully_qualified_namespace == "myns.servicebus.windows.net"
    short = ServiceBusSettings(namespace="myns", sas_token="sig")
    assert short.fully_qualified_namespace == "myns.servicebus.windows.net"
    with pytest.raises(ConfigError, match="no path"):
        factory.url_options(parse_url("servicebus://myns/queue"))


def test_a_credential_is_required_and_only_one() -> None:
    with pytest.raises(ConfigError, match="credential"):
        broker.connect("servicebus://myns")
    with pytest.raises(ConfigError, match="exactly one credential"):
        ServiceBusSettings(namespace="myns", sas_token="sig", credential=object())
    with pytest.raises(ConfigError, match="go together"):
        ServiceBusSettings(namespace="myns", shared_access_key_name="app")
    with pytest.raises(ConfigError, match="not both"):
        ServiceBusSettings(connection_string=CONNECTION, namespace="myns")
    with pytest.raises(ConfigError, match="connection_string or a namespace"):
        ServiceBusSettings()
    with pytest.raises(ConfigError, match="sas_token"):
        broker.connect("servicebus://myns?credential=some-string")


def test_batch_size_is_limited_to_5000() -> None:
    assert MAX_BATCH_SIZE == 5000
    ServiceBusSettings(connection_string=CONNECTION, batch_size=5000)
    with pytest.raises(ConfigError, match="batch size needs to be at most 5000 but 5001 was provided"):
        broker.connect({"backend": "servicebus", "connection_string": CONNECTION, "batch_size": 5001})
    backend = broker.connect(CONNECTION)
    with pytest.raises(ConfigError, match="at most 5000 but 6000"):
        backend.batched_messages("q", "", batch_size=6000)
    with pytest.raises(ConfigError, match="at most 5000 but 9999"):
        backend.messages("q", "", batch_size=9999)
    with pytest.raises(UnknownSetting, match="ack_wait"):  # JetStream's name; the portable one: ack_deadline
        backend.messages("q", "", ack_wait=3)
    with pytest.raises(ConfigError, match="prefetch"):
        broker.connect("servicebus://app:key@myns?prefetch=-1")


def test_credentials_never_show_in_repr_or_describe() -> None:
    settings = ServiceBusSettings(connection_string=CONNECTION)
    keyed = ServiceBusSettings(namespace="myns", shared_access_key_name="app", shared_access_key=SECRET)
    token = ServiceBusSettings(namespace="myns", sas_token=f"SharedAccessSignature sig={SECRET}")
    for item in (settings, keyed, token):
        assert SECRET not in repr(item)
        assert SECRET not in str(describe(item))
    backend = broker.connect(CONNECTION)
    assert SECRET not in repr(backend)
    assert "myns.servicebus.windows.net" in repr(backend)
    assert describe(settings)["connection_string"] == "***"


async def test_namespace_and_key_reach_the_fake(
    fake_servicebus: FakeServiceBus, caplog: pytest.LogCaptureFixture
) -> None:
    key = "ZmFrZS1rZXk="
    queue = f"q-{uuid.uuid4().hex[:8]}"
    fake_servicebus.create_queue(queue)
    url = f"servicebus://fake:{key}@{fake_servicebus.host}:{fake_servicebus.port}?use_tls=false"
    caplog.set_level(logging.DEBUG)
    async with broker.connect(url) as backend:
        await backend.publisher().topic(queue).publish(OutboundMessage(b"hello"))
        async with backend.messages(queue, "") as consumer:
            (message,) = await collect(consumer, 1, 10)
    assert message.data == b"hello"
    assert key not in caplog.text


def test_the_management_endpoint_is_checked_and_defaults_per_connection() -> None:
    from broker.backends.servicebus.admin import management_endpoint

    with pytest.raises(ConfigError, match="management_endpoint"):
        ServiceBusSettings(connection_string=CONNECTION, management_endpoint="ftp://host")
    with pytest.raises(ConfigError):
        ServiceBusSettings(connection_string=CONNECTION, management_endpoint="http://host:99999")
    assert management_endpoint(ServiceBusSettings(connection_string=CONNECTION)) is None  # the SDK's https
    emulator = (
        "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
    )
    assert management_endpoint(ServiceBusSettings(connection_string=emulator)) == "http://127.0.0.1:5300"
    plain = ServiceBusSettings(namespace="127.0.0.1:5672", sas_token="sig", use_tls=False)
    assert management_endpoint(plain) == "http://127.0.0.1:5300"
    given = ServiceBusSettings(connection_string=emulator, management_endpoint="http://127.0.0.1:8080/")
    assert management_endpoint(given) == "http://127.0.0.1:8080"
    off = build_settings(
        ServiceBusSettings, {"connection_string": CONNECTION, "create_missing": "false"}, backend="servicebus"
    )
    assert off.create_missing is False


def test_entities_made_for_a_consumer_follow_its_options() -> None:
    from broker.backends.servicebus.admin import entity_properties
    from broker.backends.servicebus.settings import ConsumerOptions

    assert entity_properties(ConsumerOptions()) == {}
    made = entity_properties(ConsumerOptions(ack_deadline=20, max_attempts=12, sessions=True))
    assert made["lock_duration"].total_seconds() == 20
    assert made["max_delivery_count"] == 13  # above max_attempts: the consumer dead-letters first
    assert made["requires_session"] is True
    assert entity_properties(ConsumerOptions(ack_deadline=900))["lock_duration"].total_seconds() == 300
    assert "max_delivery_count" not in entity_properties(ConsumerOptions(max_attempts=3))
