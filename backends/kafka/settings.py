"""Settings of the Kafka backend: connection and security, producer defaults, consumer defaults.

``kafka://host:9092,host2:9092?group_id=orders&linger=0.005`` fills :class:`KafkaSettings`; every
query key is a field name here. Defaults follow lib-brokers (on franz-go) where librdkafka has
the same knob, except four, each for a reason (``docs/backends/kafka.md``):

* ``max_buffered_records`` is librdkafka's 100,000, not lib-brokers' 40: librdkafka refuses new
  records once the buffer is full, so 40 would cap every ``batch_publish`` at 40 records per
  round trip.
* ``isolation_level`` is ``read_committed`` (librdkafka's default; lib-brokers reads uncommitted
  data unless its consumer is transactional). An aborted transaction must never reach a portable
  consumer; the conformance suite checks it.
* ``fetch_min_bytes`` and ``fetch_max_wait`` are librdkafka's 1 byte and 0.5 s, not lib-brokers'
  100 bytes and 5 s: a record must not wait seconds for company before a consumer sees it. Raise
  them for fewer, larger fetches.
* ``partitioner`` is ``murmur2_random``, the Java client's (and franz-go's) key hash, so keyed records
  land where ``broker.driver.partitioning.partition_for`` and other Kafka clients put them.

Security settings pass through to librdkafka. With TLS (``ssl`` or ``sasl_ssl``) the brokers'
certificate chain and host name are verified (``enable.ssl.certificate.verification`` and
``ssl.endpoint.identification.algorithm=https`` are set explicitly); ``insecure_skip_verify`` turns
both off and logs a WARNING, as does turning either off through the raw ``librdkafka`` dict.
Fields made with :func:`broker.driver.settings.secret` (and the raw ``librdkafka``/``producer_config``/
``consumer_config`` dicts, which may carry credentials) never show in ``repr`` or
:func:`broker.driver.settings.describe`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from broker.driver.provision import Provision
from broker.driver.settings import (
    check_at_least,
    check_positive,
    field_values,
    normalize_choices,
    options_from,
    secret,
)
from broker.errors import ConfigError

__all__ = ["ConsumerOptions", "KafkaSettings"]

MiB = 1024 * 1024

Start = Literal["earliest", "latest"]
Isolation = Literal["read_committed", "read_uncommitted"]
#: librdkafka's ``partitioner`` values.
Partitioner = Literal[
    "random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"
]

#: librdkafka's ``partition.assignment.strategy`` names.
ASSIGNMENT_STRATEGIES = ("range", "roundrobin", "cooperative-sticky")


def _strategies(value: str) -> str:
    """``value`` (a comma-separated list of assignors, in any case) as librdkafka spells it."""
    names = [name.strip().lower() for name in value.split(",")]
    if not all(name in ASSIGNMENT_STRATEGIES for name in names):
        choices = ", ".join(map(repr, ASSIGNMENT_STRATEGIES))
        raise ConfigError(f"assignment_strategy is a comma-separated list of {choices}, got {value!r}")
    return ",".join(names)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Per-consumer options of ``records()`` / ``batched_records()`` / ``log().consumer()``.

    Unset options come from :class:`KafkaSettings`, which inherits these fields (they are declared
    here only); times are in seconds.
    """

    #: Where a group with no committed offset starts (librdkafka ``auto.offset.reset``).
    start: Start = "earliest"
    #: Records fetched per call to the SDK; also the largest batch a batched iterator returns.
    batch_size: int = 100
    #: ``fetch.min.bytes``: the broker waits for this much data (or ``fetch_max_wait``).
    fetch_min_bytes: int = 1
    #: ``fetch.wait.max.ms`` in seconds.
    fetch_max_wait: float = 0.5
    #: ``fetch.max.bytes`` and ``max.partition.fetch.bytes``.
    fetch_max_bytes: int = 10 * MiB
    #: ``read_committed`` hides aborted and open transactions.
    isolation_level: Isolation = "read_committed"
    #: ``session.timeout.ms`` in seconds: a silent member is removed after this long.
    session_timeout: float = 45.0
    #: ``heartbeat.interval.ms`` in seconds.
    heartbeat_interval: float = 3.0
    #: ``max.poll.interval.ms`` in seconds.
    max_poll_interval: float = 300.0
    #: ``partition.assignment.strategy``: a comma-separated list of ``range``, ``roundrobin`` and
    #: ``cooperative-sticky``, in any case (None: librdkafka's ``range,roundrobin``).
    assignment_strategy: str | None = None
    #: Raw librdkafka consumer settings applied last (may hold credentials: never shown).
    consumer_config: dict[str, Any] | None = field(default=None, repr=False, metadata={"secret": True})

    def __post_init__(self) -> None:
        normalize_choices(self)
        check_at_least(1, batch_size=self.batch_size, fetch_min_bytes=self.fetch_min_bytes)
        check_at_least(0, fetch_max_wait=self.fetch_max_wait)
        check_positive(
            fetch_max_bytes=self.fetch_max_bytes,
            session_timeout=self.session_timeout,
            heartbeat_interval=self.heartbeat_interval,
            max_poll_interval=self.max_poll_interval,
        )
        if self.heartbeat_interval >= self.session_timeout:
            raise ConfigError(
                f"heartbeat_interval ({self.heartbeat_interval}s) must be below "
                f"session_timeout ({self.session_timeout}s)"
            )
        if self.assignment_strategy is not None:
            object.__setattr__(self, "assignment_strategy", _strategies(self.assignment_strategy))

    @property
    def cooperative(self) -> bool:
        """True when the assignment strategy rebalances incrementally (cooperative-sticky)."""
        return "cooperative" in (self.assignment_strategy or "")


@dataclass(frozen=True, slots=True)
class KafkaSettings(ConsumerOptions):
    """Everything ``kafka://`` accepts. Times are in seconds, sizes in bytes.

    The consumer defaults (keyword-only) are the fields inherited from :class:`ConsumerOptions`;
    ``records()`` and ``batched_records()`` keyword options override them per consumer.
    """

    # -- connection --------------------------------------------------------------------------
    #: Bootstrap brokers (the URL's hosts, ``host:port``); the rest of the cluster is discovered from
    #: them. Required: there is no default host (``kafka://`` alone is a ConfigError).
    bootstrap_servers: tuple[str, ...] = ()
    #: ``client.id`` reported to the brokers.
    client_id: str = "polybroker"
    #: Consumer group used by ``records()`` when no group is passed.
    group_id: str | None = None
    #: How long admin requests, commits and transaction steps may take.
    operation_timeout: float = 30.0
    #: How long ``close()`` waits for the SDK (leaving the group, flushing) before giving up.
    close_timeout: float = 10.0

    # -- security (passed through to librdkafka) ---------------------------------------------
    #: ``plaintext``, ``ssl``, ``sasl_plaintext`` or ``sasl_ssl``. None: ``sasl_ssl`` when a SASL
    #: mechanism is set (credentials never travel in clear by default, as in lib-brokers), ``ssl``
    #: when a TLS file is set, else ``plaintext``.
    security_protocol: Literal["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"] | None = None
    #: CA bundle that verifies the brokers' certificates (``ssl.ca.location``).
    ssl_ca_location: str | None = None
    #: Client certificate for mutual TLS (``ssl.certificate.location``).
    ssl_certificate_location: str | None = None
    #: Client private key (``ssl.key.location``).
    ssl_key_location: str | None = None
    #: Password of the client private key.
    ssl_key_password: str | None = secret()
    #: Client private key as PEM text (``ssl.key.pem``).
    ssl_key_pem: str | None = secret()
    #: Skip verifying the brokers' certificates and host names: for tests only.
    insecure_skip_verify: bool = False
    #: ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``GSSAPI`` (Kerberos) or ``OAUTHBEARER``;
    #: ``PLAIN`` when only a username and password are given.
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"] | None = None
    #: SASL username (the URL's user).
    sasl_username: str | None = None
    #: SASL password (the URL's password).
    sasl_password: str | None = secret()
    #: OAUTHBEARER token source, called by librdkafka whenever it needs a token (at start and
    #: before the last one expires): ``provider(sasl_oauthbearer_config) -> (token, expiry)``, the
    #: expiry in seconds since the epoch. Implies ``sasl_mechanism=OAUTHBEARER`` (``oauth_cb``).
    oauth_token_provider: object | None = secret()
    #: Kerberos service name of the brokers (``sasl.kerberos.service.name``).
    kerberos_service_name: str | None = None
    #: Kerberos principal of this client (``user@REALM``).
    kerberos_principal: str | None = None
    #: Kerberos keytab file.
    kerberos_keytab: str | None = None

    # -- escape hatches ----------------------------------------------------------------------
    #: Raw librdkafka settings for every client, applied after everything above.
    librdkafka: dict[str, Any] | None = field(default=None, repr=False, metadata={"secret": True})
    #: Raw librdkafka settings for producers only, applied last.
    producer_config: dict[str, Any] | None = field(default=None, repr=False, metadata={"secret": True})

    # -- producer ----------------------------------------------------------------------------
    #: ``linger.ms`` in seconds: how long a partition's batch waits for more records (lib-brokers: 10 ms).
    linger: float = 0.01
    #: ``batch.size``: the largest record batch in bytes (lib-brokers: 5 MiB).
    batch_bytes: int = 5 * MiB
    #: ``queue.buffering.max.messages``: records buffered before produce waits for room.
    max_buffered_records: int = 100_000
    #: ``all`` (every in-sync replica, lib-brokers' default), ``leader`` or ``none``.
    acks: Literal["all", "leader", "none"] = "all"
    #: Idempotent producer; None: on exactly when ``acks`` is ``all`` (as in lib-brokers).
    idempotence: bool | None = None
    #: ``snappy`` (lib-brokers' first choice), ``zstd``, ``gzip``, ``lz4`` or ``none``.
    compression: Literal["snappy", "zstd", "gzip", "lz4", "none"] = "snappy"
    #: librdkafka ``partitioner`` for keyed records.
    partitioner: Partitioner = "murmur2_random"
    #: Default ``transactional.id`` of ``transactional_publisher()`` (None: a unique one each time).
    transactional_id: str | None = None
    #: ``transaction.timeout.ms`` in seconds.
    transaction_timeout: float = 60.0
    #: Replication factor of topics the log port creates (-1: the broker's default).
    replication_factor: int = -1
    #: Whether missing topics are created (:mod:`broker.driver.provision`,
    #: :mod:`broker.backends.kafka.provision`): ``create`` (auto-created on first use, the marker
    #: queue's topics by its tracker), ``verify`` (a ``ProvisioningError`` names a missing topic when
    #: a publisher first sends to it or a consumer starts) or ``none`` (nothing created or checked).
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        if not self.bootstrap_servers or not all(self.bootstrap_servers):
            raise ConfigError("kafka needs at least one bootstrap server (kafka://host:port)")
        for server in self.bootstrap_servers:
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"bootstrap server {server!r} is not host:port")
            if not 0 < int(port) < 65536:
                raise ConfigError(f"bootstrap server {server!r}: ports are 1-65535")
        check_positive(
            operation_timeout=self.operation_timeout,
            close_timeout=self.close_timeout,
            transaction_timeout=self.transaction_timeout,
        )
        check_at_least(0, "seconds", linger=self.linger)
        check_positive(batch_bytes=self.batch_bytes, max_buffered_records=self.max_buffered_records)
        if self.group_id == "":
            raise ConfigError("group_id must not be empty (leave it unset instead)")
        if self.sasl_mechanism == "GSSAPI" and self.sasl_password:
            raise ConfigError("Kerberos (GSSAPI) and a SASL password cannot be used together")
        kerberos = self.kerberos_keytab or self.kerberos_principal or self.kerberos_service_name
        if kerberos and self.sasl_mechanism not in (None, "GSSAPI"):
            raise ConfigError(
                f"Kerberos settings were given with sasl_mechanism={self.sasl_mechanism}; "
                "one SASL mechanism at a time"
            )
        if kerberos and self.sasl_password:
            raise ConfigError("Kerberos settings and a SASL password cannot be used together")
        if self.oauth_token_provider is not None:
            if not callable(self.oauth_token_provider):
                raise ConfigError("oauth_token_provider must be a callable returning (token, expiry)")
            if self.sasl_mechanism not in (None, "OAUTHBEARER"):
                raise ConfigError(
                    f"oauth_token_provider is for OAUTHBEARER, not sasl_mechanism={self.sasl_mechanism}"
                )
        if self.assignment_strategy is not None:
            object.__setattr__(self, "assignment_strategy", _strategies(self.assignment_strategy))
        self.consumer_options()  # validates the consumer defaults

    def consumer_options(self, **overrides: Any) -> ConsumerOptions:
        """The consumer options of this connection, with ``overrides`` (already typed) applied."""
        return options_from(ConsumerOptions, self, overrides)

    def consumer_defaults(self) -> dict[str, Any]:
        """The consumer option defaults, by name (for ``build_settings(ConsumerOptions, ...)``)."""
        return field_values(ConsumerOptions, self)

    @property
    def servers(self) -> str:
        """``bootstrap.servers`` as librdkafka takes it."""
        return ",".join(self.bootstrap_servers)
