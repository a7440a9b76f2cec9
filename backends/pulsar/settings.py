"""Settings of the Pulsar backend: the connection, the producers and the consumers.

Defaults follow lib-brokers (connection timeout 5 s, operation timeout 30 s, send timeout 30 s,
nack redelivery delay 30 s), except these, each for a reason (``docs/backends/pulsar.md`` has the
details):

* ``subscription_type`` maps to the Pulsar type of the same name (lib-brokers turns ``Exclusive``
  into ``KeyShared``) and defaults to ``shared``: competing consumers with per-message
  acknowledgement, which is what a message queue needs.
* ``receiver_queue_size`` (the messages a consumer prefetches) is 100, not lib-brokers' 1000, to
  bound what a crash costs: Pulsar redelivers, and counts as a redelivery, every message it had
  dispatched to a consumer that dies, also those only prefetched.
* ``max_pending_messages`` is 1000, not lib-brokers' 1, which allows one message in flight per
  producer and so serializes every batch publish.
* ``batching`` (the client's producer batching) is off: Pulsar tracks acknowledgements per batch,
  so a nack redelivers the messages of its batch that were already acknowledged. Turn it on for
  throughput when duplicates are acceptable (with ``batch_index_ack`` where the broker enables
  batch-index acknowledgement).

Consumers take their defaults from :class:`PulsarSettings`; ``backend.messages(topic, sub,
**options)`` overrides them per consumer with the fields of :class:`ConsumerOptions`.

The portable option names of :mod:`broker.driver.options` map onto Pulsar's: ``ack_deadline`` is the ack
timeout (``ack_timeout``; the client refuses less than 10 s, so a shorter ``ack_deadline`` is a
``ConfigError`` saying so), ``max_attempts`` and ``dead_letter_topic`` are the client's dead-letter
policy (``maxRedeliverCount = max_attempts - 1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from broker.driver.options import build_consumer_options, rename_portable
from broker.driver.provision import Provision
from broker.driver.settings import (
    check_at_least,
    check_positive,
    normalize_choices,
    parse_url,
    redact_url,
    secret,
)
from broker.errors import ConfigError

__all__ = [
    "MIN_ACK_TIMEOUT",
    "PORTABLE_NAMES",
    "ConsumerOptions",
    "InitialPosition",
    "PulsarSettings",
    "SubscriptionType",
    "portable_to_native",
]

#: The Pulsar client refuses ack timeouts shorter than this (seconds).
MIN_ACK_TIMEOUT = 10.0

SubscriptionType = Literal["shared", "key_shared", "failover", "exclusive"]
InitialPosition = Literal["earliest", "latest"]
Compression = Literal["none", "lz4", "zlib", "zstd", "snappy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()``, ``batched_messages()`` and ``records()``.

    :class:`PulsarSettings` inherits these fields (they are declared here only) as the defaults.
    """

    #: ``shared`` (competing consumers, the default), ``key_shared`` (competing consumers, one
    #: consumer per key at a time), ``failover`` or ``exclusive`` (one active consumer).
    subscription_type: SubscriptionType = "shared"
    #: Where a subscription that does not exist yet starts: the oldest retained message, or new ones.
    initial_position: InitialPosition = "earliest"
    #: Messages the client prefetches per consumer (Pulsar's ``receiverQueueSize``); see the module
    #: documentation for what a crash costs per prefetched message.
    receiver_queue_size: int = 100
    #: Seconds after which a nacked message is redelivered (Pulsar's nack redelivery delay).
    nack_redelivery_delay: float = 30.0
    #: Seconds an unacknowledged message may stay with a consumer before it is redelivered
    #: (Pulsar's ack timeout; None: never). The client needs at least 10 seconds.
    ack_timeout: float | None = None
    #: Deliveries after which a message goes to the dead-letter topic (None: redeliver forever).
    #: Pulsar's ``maxRedeliverCount`` is ``max_attempts - 1``, so this must be at least 2.
    max_attempts: int | None = None
    #: The dead-letter topic (None: Pulsar's default, ``<topic>-<subscription>-DLQ``): where
    #: ``Message.dead_letter()`` publishes, and, with ``max_attempts``, the dead-letter policy's topic.
    dead_letter_topic: str | None = None
    #: Acknowledge single messages of a batch (needs the broker's batch-index acknowledgement).
    batch_index_ack: bool = False
    #: The consumer's name as the broker shows it (None: generated).
    consumer_name: str | None = None
    #: Largest batch a batched consumer returns.
    batch_size: int = 100

    def __post_init__(self) -> None:
        normalize_choices(self)
        check_at_least(1, receiver_queue_size=self.receiver_queue_size)
        check_at_least(0, "seconds", nack_redelivery_delay=self.nack_redelivery_delay)
        if self.ack_timeout is not None and self.ack_timeout < MIN_ACK_TIMEOUT:
            raise ConfigError(
                f"ack_deadline (Pulsar's ack_timeout) must be at least {MIN_ACK_TIMEOUT:g} seconds: the "
                f"Pulsar client refuses shorter ack timeouts; got {self.ack_timeout}"
            )
        if self.max_attempts is not None and self.max_attempts < 2:
            raise ConfigError(
                f"max_attempts must be >= 2 (Pulsar redelivers at least once before dead-lettering), "
                f"got {self.max_attempts}"
            )
        if self.dead_letter_topic is not None and not self.dead_letter_topic:
            raise ConfigError("dead_letter_topic must be a topic name or None")
        check_at_least(1, batch_size=self.batch_size)


@dataclass(frozen=True, slots=True)
class PulsarSettings(ConsumerOptions):
    """``pulsar://host:6650[,host:6650]?setting=value``: one Pulsar client shared by everything it opens.

    Credentials (``token``, ``token_supplier``, ``oauth2``, ``basic_password``) pass through to the
    client and are never shown in ``repr`` or logs. TLS: ``tls=true`` (or a ``pulsar+ssl://``
    service URL) with ``tls_trust_certs_file_path``; mutual TLS with ``tls_certificate_file_path`` and
    ``tls_private_key_file_path``. The certificate chain and the host name are verified by default;
    ``tls_allow_insecure_connection=true`` or ``tls_validate_hostname=false`` turn that off and log a
    WARNING. The consumer defaults (keyword-only) are the fields inherited
    from :class:`ConsumerOptions`.
    """

    #: ``pulsar://host:port[,host:port]`` or ``pulsar+ssl://...``.
    service_url: str = "pulsar://127.0.0.1:6650"
    #: Connect with TLS (turns ``pulsar://`` into ``pulsar+ssl://``).
    tls: bool = False
    #: CA bundle that verifies the brokers' certificates (default: certifi's CAs).
    tls_trust_certs_file_path: str | None = None
    #: Accept any broker certificate, unverified (tests only; logs a WARNING).
    tls_allow_insecure_connection: bool = False
    #: Check that the broker's certificate names the host connected to. On by default (the Pulsar
    #: client's own default is off); turning it off logs a WARNING.
    tls_validate_hostname: bool = True
    #: Client certificate for mutual TLS.
    tls_certificate_file_path: str | None = None
    #: The client certificate's private key.
    tls_private_key_file_path: str | None = None
    #: A JWT for token authentication.
    token: str | None = secret()
    #: For tokens that rotate: a callable returning the current JWT, which the client calls
    #: whenever it (re)authenticates (instead of ``token``).
    token_supplier: object | None = secret()
    #: OAuth2 client-credentials parameters, as the JSON string the Pulsar client takes.
    oauth2: str | None = secret()
    #: Basic authentication (also taken from ``pulsar://user:password@host``).
    basic_username: str | None = None
    basic_password: str | None = secret()
    #: Seconds to establish a TCP connection.
    connection_timeout: float = 5.0
    #: Seconds for client operations (subscribe, create producer, close, ...).
    operation_timeout: float = 30.0
    #: The client's IO threads.
    io_threads: int = 1
    #: The listener name for brokers with several advertised listeners.
    listener_name: str | None = None
    #: Lowest level of the client's own log lines: debug, info, warn or error (debug slows the client).
    sdk_log_level: Literal["debug", "info", "warn", "error"] = "warn"
    #: Where the client's own log lines go: ``logging`` (the ``broker.backends.pulsar.libpulsar``
    #: logger, a repeated line at most once per 10 s with the count of those held back) or
    #: ``console`` (the client prints them to stdout). The client keeps the logger and level of the
    #: first client made in the process.
    sdk_logger: Literal["logging", "console"] = "logging"

    # -- producers ----------------------------------------------------------------------------
    #: Seconds before an unacknowledged send fails.
    send_timeout: float = 30.0
    #: Messages a producer may have in flight; further publishes wait (never block the loop).
    max_pending_messages: int = 1000
    #: The client's producer batching (see the module documentation for the trade-off).
    batching: bool = False
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    #: Seconds a batch may wait to fill.
    batching_max_delay: float = 0.01
    compression: Compression = "none"
    #: Whether missing topics are created (:mod:`broker.driver.provision`): ``create`` or ``none``;
    #: either way the broker's auto-creation policy decides (see ``PulsarBackend.provision_modes``);
    #: ``verify`` is a ``ConfigError`` (the binary protocol cannot check that a topic exists).
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        if not self.service_url.startswith(("pulsar://", "pulsar+ssl://")):
            raise ConfigError(
                f"service_url must start with pulsar:// or pulsar+ssl://, got {self.service_url!r}"
            )
        if not self.service_url.split("://", 1)[1].strip("/"):
            raise ConfigError("service_url names no host")
        if parse_url(self.service_url).path.strip("/"):  # ConfigError for bad hosts and ports too
            raise ConfigError(f"service_url names hosts only, not a path: {redact_url(self.service_url)!r}")
        if self.token_supplier is not None and not callable(self.token_supplier):
            raise ConfigError("token_supplier must be a callable returning the current token")
        given = (self.token, self.token_supplier, self.oauth2, self.basic_password)
        if sum(value is not None for value in given) > 1:
            raise ConfigError("choose one authentication: token, token_supplier, oauth2 or basic")
        if (self.tls_certificate_file_path is None) != (self.tls_private_key_file_path is None):
            raise ConfigError("mutual TLS needs both tls_certificate_file_path and tls_private_key_file_path")
        check_positive(
            "seconds",
            connection_timeout=self.connection_timeout,
            operation_timeout=self.operation_timeout,
            send_timeout=self.send_timeout,
        )
        check_at_least(1, io_threads=self.io_threads, max_pending_messages=self.max_pending_messages)
        if self.batching_max_messages < 1 or self.batching_max_bytes < 1 or self.batching_max_delay < 0:
            raise ConfigError("batching limits must be positive")
        self.consumer_options({})

    @property
    def url(self) -> str:
        """The service URL the client connects to (``pulsar+ssl://`` when ``tls`` is set)."""
        if self.tls and self.service_url.startswith("pulsar://"):
            return "pulsar+ssl://" + self.service_url.removeprefix("pulsar://")
        return self.service_url

    def consumer_options(self, overrides: dict[str, Any]) -> ConsumerOptions:
        """The options of one consumer: these settings' defaults with ``overrides`` applied."""
        return build_consumer_options(
            ConsumerOptions, self, overrides, native_names=PORTABLE_NAMES, backend="pulsar"
        )


#: Portable option names (:mod:`broker.driver.options`) and the Pulsar option each one is.
PORTABLE_NAMES: Final = {"ack_deadline": "ack_timeout"}


def portable_to_native(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the portable names replaced by Pulsar's (``ack_deadline`` -> ``ack_timeout``)."""
    return rename_portable(options, PORTABLE_NAMES)
