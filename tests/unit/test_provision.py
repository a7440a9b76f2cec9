"""The ``provision`` setting: parsed on every backend, and each mode's behaviour on the in-memory broker.

``create`` makes what is missing; ``verify`` makes nothing and names every missing resource in a
``ProvisioningError`` (also from ``ping()``, for the resources the settings name); ``none`` makes
nothing and lets the broker's own ``UnknownTopic`` surface. A mode a backend does not implement is a
``ConfigError`` naming the backend, never a silent ``create``.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
import uuid

import pytest

import broker
from broker.driver.base import BackendBase
from broker.driver.provision import Provision
from broker.errors import ConfigError, ProvisioningError, UnknownTopic
from broker.message import OutboundMessage
from broker.testing.waiting import collect

#: Every backend's settings dataclass, by module.
SETTINGS = {
    "inmem": "InmemSettings",
    "kafka": "KafkaSettings",
    "jetstream": "JetStreamSettings",
    "pubsub": "PubsubSettings",
    "pulsar": "PulsarSettings",
    "servicebus": "ServiceBusSettings",
    "rabbitmq": "RabbitmqSettings",
    "redis": "RedisSettings",
}


def _name() -> str:
    return f"provision-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("backend", sorted(SETTINGS))
def test_every_backend_has_the_provision_setting_defaulting_to_create(backend: str) -> None:
    """Each backend's settings carry ``provision``, typed :data:`Provision`, ``"create"`` by default."""
    cls = getattr(importlib.import_module(f"broker.backends.{backend}.settings"), SETTINGS[backend])
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert "provision" in fields, f"{cls.__name__} has no provision field"
    assert fields["provision"].default == "create"
    assert typing.get_type_hints(cls)["provision"] == Provision


async def test_provision_is_read_from_the_url_and_the_mapping_in_any_case() -> None:
    name = _name()
    async with (
        broker.connect(f"inmem://{name}?provision=VERIFY") as by_url,
        broker.connect({"backend": "inmem", "name": name, "provision": "none"}) as by_mapping,
        broker.connect(f"inmem://{name}") as default,
    ):
        assert isinstance(by_url, BackendBase) and isinstance(by_mapping, BackendBase)
        assert isinstance(default, BackendBase)
        assert (by_url.settings.provision, by_url.provision) == ("verify", "verify")
        assert by_mapping.provision == "none"
        assert default.provision == "create"


def test_an_unknown_mode_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"provision.*'create', 'verify', 'none'.*'sometimes'"):
        broker.connect(f"inmem://{_name()}?provision=sometimes")


def test_a_mode_the_backend_does_not_implement_is_a_config_error_naming_it() -> None:
    """A backend declaring only ``create`` refuses ``verify`` when it is made, naming itself."""

    class CreateOnly(BackendBase):
        name = "create-only"

        def __init__(self, settings: object) -> None:
            super().__init__()
            self.settings = settings
            self._check_provision()

    @dataclasses.dataclass
    class Settings:
        provision: str = "create"

    assert CreateOnly(Settings()).provision == "create"
    with pytest.raises(ConfigError, match=r"create-only: provision='verify' is not implemented.*'create'"):
        CreateOnly(Settings("verify"))
    # a real backend of this repository that offers only ``create``
    with pytest.raises(ConfigError, match="kafka: provision='none' is not implemented"):
        broker.connect("kafka://127.0.0.1:9?provision=none")


async def test_create_makes_missing_topics_and_subscriptions() -> None:
    async with broker.connect(f"inmem://{_name()}") as backend:
        async with backend.messages("orders", "billing") as consumer:
            await backend.publisher().topic("orders").publish(OutboundMessage(b"1"))
            assert [m.data for m in await collect(consumer, 1, timeout=5)] == [b"1"]


async def test_verify_names_every_missing_resource_and_creates_none() -> None:
    name = _name()
    async with broker.connect(f"inmem://{name}?provision=verify&dead_letter_topic=orders-dlq") as backend:
        with pytest.raises(ProvisioningError) as caught:
            backend.messages("orders", "billing")
        assert caught.value.missing == (
            "topic 'orders'",
            "subscription 'billing' of 'orders'",
            "topic 'orders-dlq'",
        )
        assert caught.value.backend == "inmem"
        assert "topic 'orders'" in str(caught.value)
        with pytest.raises(ProvisioningError) as caught:
            await backend.publisher().topic("orders").publish(OutboundMessage(b"lost?"))
        assert caught.value.missing == ("topic 'orders'",)
        with pytest.raises(ProvisioningError) as caught:
            backend.records(["a", "b"], "group")
        assert caught.value.missing == ("topic 'a'", "topic 'b'")
        assert backend.broker.topics == {}, "verify created something"


async def test_verify_uses_what_exists() -> None:
    """What a ``create`` connection made, a ``verify`` connection uses: nothing is lost in between."""
    name = _name()
    async with broker.connect(f"inmem://{name}") as admin:
        await admin.log().create_topic("orders-dlq")
        async with admin.messages("orders", "billing"):
            pass
    async with broker.connect(f"inmem://{name}?provision=verify&dead_letter_topic=orders-dlq") as backend:
        await backend.ping(timeout=5)
        with pytest.raises(ProvisioningError) as caught:
            backend.messages("orders", "shipping")
        assert caught.value.missing == ("subscription 'shipping' of 'orders'",)
        async with backend.messages("orders", "billing") as consumer:
            topic = backend.publisher().topic("orders")
            await topic.batch_publish(*(OutboundMessage(str(i).encode()) for i in range(5)))
            received = await collect(consumer, 5, timeout=5)
            assert sorted(m.data for m in received) == [str(i).encode() for i in range(5)]


async def test_ping_under_verify_names_the_configured_resources_that_are_missing() -> None:
    name = _name()
    async with broker.connect(f"inmem://{name}?dead_letter_topic=dlq") as creating:
        await creating.ping(timeout=5)  # create: nothing is checked
    async with broker.connect(f"inmem://{name}?provision=verify&dead_letter_topic=dlq") as backend:
        with pytest.raises(ProvisioningError) as caught:
            await backend.ping(timeout=5)
        assert caught.value.missing == ("topic 'dlq'",)
        await creating_topic(name, "dlq")
        await backend.ping(timeout=5)


async def creating_topic(name: str, topic: str) -> None:
    async with broker.connect(f"inmem://{name}") as admin:
        await admin.log().create_topic(topic)


async def test_none_creates_nothing_and_the_broker_error_surfaces() -> None:
    name = _name()
    async with broker.connect(f"inmem://{name}?provision=none") as backend:
        with pytest.raises(UnknownTopic) as missing_topic:
            await backend.publisher().topic("orders").publish(OutboundMessage(b"x"))
        assert not isinstance(missing_topic.value, ProvisioningError)
        with pytest.raises(UnknownTopic, match="orders"):
            backend.messages("orders", "billing")
        await creating_topic(name, "orders")
        with pytest.raises(UnknownTopic, match="subscription 'billing'"):
            backend.messages("orders", "billing")
        await backend.ping(timeout=5)  # none: ping checks nothing
        assert list(backend.broker.topics) == ["orders"]
        assert backend.broker.topics["orders"].subscriptions == {}


#: The settings Pub/Sub and Service Bus need besides ``provision`` / ``create_missing`` (nothing is dialled).
OWN_CREATE_FLAG = {
    "pubsub": {"project": "p"},
    "servicebus": {
        "namespace": "ns.servicebus.windows.net",
        "shared_access_key_name": "k",
        "shared_access_key": "v",
    },
}


@pytest.mark.parametrize("scheme", sorted(OWN_CREATE_FLAG))
def test_create_missing_and_provision_agree_or_are_a_config_error(scheme: str) -> None:
    """``create_missing`` unset follows ``provision``; ``false`` is ``none``; ``true`` with
    ``verify`` or ``none`` is a ``ConfigError``."""
    from broker.connect import _factory
    from broker.driver.settings import build_settings

    cls = _factory(scheme).settings_type
    base = OWN_CREATE_FLAG[scheme]

    def built(**values: str) -> tuple[str, bool]:
        settings = build_settings(cls, {**base, **values}, backend=scheme)
        return settings.provision, settings.create_missing

    assert built() == ("create", True)
    assert built(provision="none") == ("none", False)
    assert built(create_missing="false") == ("none", False)
    assert built(provision="none", create_missing="false") == ("none", False)
    assert built(provision="create", create_missing="true") == ("create", True)
    for mode in ("verify", "none"):
        with pytest.raises(
            ConfigError, match=rf"{scheme}: provision='{mode}' creates nothing.*create_missing=true"
        ):
            built(provision=mode, create_missing="true")
