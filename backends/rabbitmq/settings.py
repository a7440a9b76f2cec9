"""Settings of the RabbitMQ backend: the connection, the topology and the consumer defaults.

``rabbitmq://user:password@host:port/vhost?prefetch=50`` (or a mapping with ``backend: rabbitmq``)
fills :class:`RabbitmqSettings`. A topic is a durable exchange (``exchange_type``); a subscription
is the durable quorum queue ``<topic>.<subscription>`` bound to it. The consumer fields are
defaults that ``Backend.messages(...)`` keyword options override per consumer
(:class:`ConsumerOptions`); they already carry the portable names of :mod:`broker.driver.options`.
The password (and ``tls_key_password``) are :func:`~broker.driver.settings.secret` fields, never shown in
``repr`` or logs. TLS verifies the broker's certificate chain and host name; there is no setting
that turns that off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from broker.driver.options import build_consumer_options
from broker.driver.provision import Provision
from broker.driver.settings import check_at_least, check_positive, normalize_choices, secret
from broker.errors import ConfigError

__all__ = [
    "EXCHANGE_KINDS",
    "ConsumerOptions",
    "ExchangeKind",
    "RabbitmqSettings",
    "check_name",
    "queue_name",
]

#: The exchange types a topic can be (AMQP 0-9-1's four built-in ones).
ExchangeKind = Literal["fanout", "topic", "direct", "headers"]
EXCHANGE_KINDS: tuple[str, ...] = get_args(ExchangeKind)

#: The largest payload RabbitMQ 3.x accepts by default (``max_message_size``, 128 MiB).
MAX_MESSAGE_BYTES = 128 * 1024 * 1024


def check_name(name: str, what: str) -> str:
    """``name`` if RabbitMQ takes it for an exchange or queue (``ConfigError`` otherwise)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a RabbitMQ {what} name must be a non-empty string, got {name!r}")
    if len(name.encode()) > 255:
        raise ConfigError(f"a RabbitMQ {what} name is at most 255 bytes of UTF-8, got {len(name.encode())}")
    if name.startswith("amq."):
        raise ConfigError(f"RabbitMQ reserves names starting with 'amq.' for itself: {name!r}")
    return name


def queue_name(topic: str, subscription: str) -> str:
    """The queue that holds ``subscription`` of ``topic``: ``<topic>.<subscription>``."""
    if not isinstance(subscription, str) or not subscription:
        raise ConfigError(f"a subscription name must be a non-empty string, got {subscription!r}")
    return check_name(f"{topic}.{subscription}", "queue (topic.subscription)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()`` (defaults from :class:`RabbitmqSettings`).

    :class:`RabbitmqSettings` inherits these fields: they are declared here only.
    """

    #: Seconds a handed-out message may stay unsettled before it is returned to the queue
    #: (a client-side timer: RabbitMQ has no per-message deadline). None: only when the channel closes.
    ack_deadline: float | None = 30.0
    #: Deliveries after which the queue dead-letters a message (quorum ``x-delivery-limit``).
    max_attempts: int | None = None
    #: Topic (exchange) that dead-lettered messages go to (the queue's ``x-dead-letter-exchange``).
    dead_letter_topic: str | None = None
    #: Unacknowledged messages the server lets this consumer have (``basic.qos`` prefetch count).
    prefetch: int = 100
    #: An existing queue to consume, by its own name (classic or quorum), instead of the
    #: subscription's queue ``<topic>.<subscription>``; it is never declared, whatever ``provision``.
    queue: str | None = None
    #: Binding key of the subscription's queue on the topic's exchange (``topic`` and ``direct``
    #: exchanges; ``#`` matches every key). None: ``#`` under ``provision=create``; under ``verify``
    #: and ``none`` the queue is bound only when a key (or ``binding_arguments``) is given.
    binding_key: str | None = None
    #: Header match of the binding on a ``headers`` exchange, as ``name=value`` strings
    #: (``("x-match=all", "region=eu")``; ``x-match`` is ``all`` unless given).
    binding_arguments: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        normalize_choices(self)
        if self.ack_deadline is not None and self.ack_deadline <= 0:
            raise ConfigError(f"ack_deadline must be > 0 seconds (or None), got {self.ack_deadline}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1 (or None for unlimited), got {self.max_attempts}")
        if self.dead_letter_topic is not None:
            check_name(self.dead_letter_topic, "dead-letter topic")
        if not 1 <= self.prefetch <= 65535:
            raise ConfigError(f"prefetch must be in 1-65535, got {self.prefetch}")
        if self.queue is not None:
            check_name(self.queue, "queue")
        if self.binding_key is not None and not 1 <= len(self.binding_key.encode()) <= 255:
            raise ConfigError("binding_key must be 1-255 bytes of UTF-8")
        self.binding_headers()  # validates binding_arguments

    def binding_headers(self) -> dict[str, str]:
        """``binding_arguments`` as the binding's arguments (``x-match`` is ``all`` unless given)."""
        arguments: dict[str, str] = {}
        for item in self.binding_arguments:
            name, equals, value = item.partition("=")
            if not equals or not name:
                raise ConfigError(f"binding_arguments are name=value strings, got {item!r}")
            arguments[name] = value
        if arguments:
            arguments.setdefault("x-match", "all")
        return arguments

    def binds(self, provision: str) -> bool:
        """Whether the consumer binds its queue to the exchange: always under ``create``, under
        ``verify`` and ``none`` only when a ``binding_key`` or ``binding_arguments`` is given."""
        if self.queue is not None and self.binding_key is None and not self.binding_arguments:
            return False  # a queue named by its owner is bound by its owner
        return provision == "create" or self.binding_key is not None or bool(self.binding_arguments)

    def queue_arguments(self) -> dict[str, Any]:
        """The arguments the subscription's quorum queue is declared with."""
        arguments: dict[str, Any] = {"x-queue-type": "quorum"}
        if self.max_attempts is not None:
            arguments["x-delivery-limit"] = self.max_attempts - 1  # limit counts redeliveries
        if self.dead_letter_topic is not None:
            arguments["x-dead-letter-exchange"] = self.dead_letter_topic
        return arguments


@dataclass(frozen=True, slots=True)
class RabbitmqSettings(ConsumerOptions):
    """``rabbitmq://[user:password@]host[:port][/vhost]?setting=value``: a connection to RabbitMQ.

    The consumer defaults (keyword-only) are the fields inherited from :class:`ConsumerOptions`.
    """

    #: Host name or address of the broker.
    host: str = "127.0.0.1"
    #: AMQP port (5671 is the usual one for TLS).
    port: int = 5672
    #: Virtual host (the URL path; ``/`` when empty; ``%2F`` is ``/``).
    vhost: str = "/"
    #: User name (``guest`` may only log in over loopback, by RabbitMQ's default).
    user: str = "guest"
    password: str = secret("guest")
    #: Connect with TLS (AMQPS; implied by ``tls_ca_file`` and the client certificate settings).
    tls: bool = False
    #: CA bundle to verify the broker's certificate with (default: the system's).
    tls_ca_file: str | None = None
    #: Client certificate (and its key) for TLS client authentication.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: Password of an encrypted ``tls_key_file``.
    tls_key_password: str | None = secret()
    #: How to log in: ``plain`` (``user`` and ``password``) or ``external`` (the TLS client
    #: certificate is the identity; needs the broker's ``rabbitmq_auth_mechanism_ssl`` plugin).
    auth_mechanism: Literal["plain", "external"] = "plain"
    #: Connection name shown by the management UI.
    name: str | None = None
    #: Seconds the first connection may take before ``ConnectionFailed``.
    connect_timeout: float = 10.0
    #: AMQP heartbeat interval in seconds (0: none).
    heartbeat: int = 60

    # -- topology ---------------------------------------------------------------------------
    #: Exchange type of topics: ``fanout`` (every queue gets every message), ``topic`` or
    #: ``direct`` (the message key is the routing key; queues bind with ``binding_key``, a pattern
    #: on ``topic``, the exact key on ``direct``) or ``headers`` (queues bind with
    #: ``binding_arguments`` matched against the message's attributes). ``create`` declares the
    #: exchange with this type, so an existing exchange of the same type is used as it is; under
    #: ``verify`` or ``none`` nothing is declared and this only says whether the key is the routing key.
    exchange_type: ExchangeKind = "fanout"
    #: The exchange type of single topics, as ``topic=type`` strings (``("audit=headers",
    #: "orders=direct")``; a URL takes them comma-separated), for an estate whose exchanges are of
    #: several types; every other topic is of ``exchange_type``.
    exchange_types: tuple[str, ...] = ()

    # -- publishing --------------------------------------------------------------------------
    #: Seconds a publish waits for the broker's confirm when no ``timeout=`` is given.
    publish_timeout: float = 10.0
    #: Mark messages persistent (delivery mode 2), so they survive a broker restart.
    persistent: bool = True
    #: Seconds ``close()`` waits for channels and the connection to close.
    close_timeout: float = 5.0
    #: Whether missing queues and exchanges are declared (:mod:`broker.driver.provision`): ``create``
    #: declares them; ``verify`` declares nothing and checks each one passively (``ProvisioningError``
    #: naming what is missing); ``none`` declares and checks nothing (``UnknownTopic`` from the broker).
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        if not self.host:
            raise ConfigError("the RabbitMQ host must be non-empty")
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"port must be in 1-65535, got {self.port}")
        check_positive(
            "seconds",
            connect_timeout=self.connect_timeout,
            publish_timeout=self.publish_timeout,
            close_timeout=self.close_timeout,
        )
        check_at_least(0, "seconds", heartbeat=self.heartbeat)
        if self.auth_mechanism == "external" and not self.tls_cert_file:
            raise ConfigError(
                "auth_mechanism=external logs in with the TLS client certificate: set tls_cert_file"
            )
        if self.tls_key_file and not self.tls_cert_file:
            raise ConfigError("tls_key_file needs tls_cert_file (the client certificate)")
        self.consumer_options({})  # validates the consumer defaults
        self._exchange_kinds()  # validates exchange_types

    def _exchange_kinds(self) -> dict[str, ExchangeKind]:
        """``exchange_types`` as topic -> exchange type (``ConfigError`` for a malformed one)."""
        kinds: dict[str, ExchangeKind] = {}
        for item in self.exchange_types:
            topic, equals, kind = item.rpartition("=")
            if not equals or not topic or kind not in EXCHANGE_KINDS:
                raise ConfigError(
                    f"exchange_types are topic=type strings with a type of {', '.join(EXCHANGE_KINDS)}, "
                    f"got {item!r}"
                )
            kinds[check_name(topic, "topic (exchange)")] = cast(ExchangeKind, kind)
        return kinds

    def exchange_kind(self, topic: str) -> ExchangeKind:
        """The exchange type of ``topic``: its ``exchange_types`` entry, else ``exchange_type``."""
        return self._exchange_kinds().get(topic, self.exchange_type)

    @property
    def uses_tls(self) -> bool:
        """True when the connection is to use TLS."""
        return bool(self.tls or self.tls_ca_file or self.tls_cert_file)

    def consumer_options(self, overrides: dict[str, Any]) -> ConsumerOptions:
        """The options of one consumer: these settings' defaults with ``overrides`` applied."""
        return build_consumer_options(ConsumerOptions, self, overrides, native_names={}, backend="rabbitmq")
