"""Settings, URLs and secrets of the RabbitMQ backend (no server needed)."""

from __future__ import annotations

import pytest

import broker
from broker.backends.rabbitmq.backend import RabbitmqBackend
from broker.backends.rabbitmq.settings import RabbitmqSettings
from broker.driver.settings import describe
from broker.errors import ConfigError, UnknownSetting


def test_url_maps_onto_settings() -> None:
    backend = broker.connect(
        "rabbitmq://alice:s%40cret@mq.example:5673/shop?prefetch=7&ack_deadline=5&exchange_type=topic"
    )
    assert isinstance(backend, RabbitmqBackend)
    s = backend.settings
    assert (s.host, s.port, s.vhost, s.user, s.password) == ("mq.example", 5673, "shop", "alice", "s@cret")
    assert (s.prefetch, s.ack_deadline, s.exchange_type) == (7, 5.0, "topic")


@pytest.mark.parametrize(
    ("url", "vhost"),
    [("rabbitmq://h", "/"), ("rabbitmq://h/", "/"), ("rabbitmq://h/%2F", "/"), ("rabbitmq://h/a%2Fb", "a/b")],
)
def test_the_path_is_the_vhost(url: str, vhost: str) -> None:
    backend = broker.connect(url)
    assert isinstance(backend, RabbitmqBackend)
    assert backend.settings.vhost == vhost
    assert backend.settings.port == 5672


def test_ipv6_host() -> None:
    backend = broker.connect("rabbitmq://[::1]:5999/")
    assert isinstance(backend, RabbitmqBackend)
    assert (backend.settings.host, backend.settings.port) == ("::1", 5999)


def test_consumer_options_and_queue_arguments() -> None:
    backend = broker.connect("rabbitmq://h/?ack_deadline=none&max_attempts=3&dead_letter_topic=dlq")
    assert isinstance(backend, RabbitmqBackend)
    assert backend.settings.ack_deadline is None
    options = backend.settings.consumer_options({"ack-deadline": 2, "prefetch": 5})
    assert (options.ack_deadline, options.prefetch, options.max_attempts) == (2.0, 5, 3)
    assert options.queue_arguments() == {
        "x-queue-type": "quorum",
        "x-delivery-limit": 2,
        "x-dead-letter-exchange": "dlq",
    }


def test_credentials_stay_out_of_repr_and_logs() -> None:
    backend = broker.connect("rabbitmq://bob:hunter2@h:5672/?name=app")
    assert isinstance(backend, RabbitmqBackend)
    shown = repr(backend) + repr(backend.settings) + repr(describe(backend.settings))
    shown += repr(backend.connection)
    assert "hunter2" not in shown
    assert "hunter2" not in repr(RabbitmqSettings(password="hunter2"))


@pytest.mark.parametrize(
    "url",
    [
        "rabbitmq://h1:5672,h2:5672/",
        "rabbitmq://h:port/",
        "rabbitmq://h:70000/",
        "rabbitmq://h/?prefetch=0",
        "rabbitmq://h/?ack_deadline=0",
        "rabbitmq://h/?ack_deadline=soon",
        "rabbitmq://h/?max_attempts=0",
        "rabbitmq://h/?exchange_type=x-consistent-hash",
        "rabbitmq://h/?exchange_types=orders",
        "rabbitmq://h/?exchange_types=orders=x-consistent-hash",
        "rabbitmq://h/?exchange_types=amq.direct=direct",
        "rabbitmq://h/?dead_letter_topic=amq.direct",
        "rabbitmq://h/?publish_timeout=-1",
        "rabbitmq://:5672/",
        "rabbitmq://[::1/",
        "rabbitmq://h:0/",
    ],
)
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        broker.connect(url)


def test_unknown_settings_and_options() -> None:
    with pytest.raises(UnknownSetting):
        broker.connect("rabbitmq://h/?no_such_setting=1")
    backend = broker.connect("rabbitmq://h/")
    with pytest.raises(UnknownSetting):
        backend.messages("orders", "billing", no_such_option=1)
    with pytest.raises(ConfigError):
        backend.messages("amq.orders", "billing")
    with pytest.raises(ConfigError):
        backend.publisher().topic("amq.fanout")
    with pytest.raises(ConfigError):
        backend.messages("orders", "x" * 300)


def test_the_delivery_attempt_mechanism_says_what_a_classic_queue_gives() -> None:
    """The capability matrix (built from ``factory.mechanisms``) names where ``delivery_attempt``
    comes from on both kinds of queue: a quorum queue's ``x-delivery-count``, a classic queue's
    ``redelivered`` flag (1, then 2)."""
    from broker.backends.rabbitmq import factory

    text = factory.mechanisms["delivery_attempt"]
    assert "x-delivery-count" in text and "classic" in text and "redelivered" in text, text
