"""Settings of the Redis Streams backend: the connection and the consumer defaults.

``redis://[user:password@]host:port[/db]?setting=value`` (``rediss://`` for TLS, or a mapping with
``backend: redis``) fills :class:`RedisSettings`. A topic is a stream, a subscription a consumer
group of it. The consumer fields are defaults that ``Backend.messages(...)`` keyword options
override per consumer (:class:`ConsumerOptions`); ``ack_deadline`` is the portable name. The
password is a :func:`~broker.driver.settings.secret` field, never shown in ``repr`` or logs. TLS
verifies the server's certificate chain and host name; no setting turns that off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from broker.driver.options import build_consumer_options
from broker.driver.provision import Provision
from broker.driver.settings import check_positive, normalize_choices, secret
from broker.errors import ConfigError

__all__ = ["MAX_MESSAGE_BYTES", "ConsumerOptions", "RedisSettings", "check_name"]

#: The largest bulk string Redis accepts by default (``proto-max-bulk-len``, 512 MiB).
MAX_MESSAGE_BYTES = 512 * 1024 * 1024


def check_name(name: str, what: str) -> str:
    """``name`` if it can name a stream or consumer group (``ConfigError`` otherwise).

    Redis keys are binary-safe; names here are non-empty strings of at most 64 KiB of UTF-8.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a Redis {what} name must be a non-empty string, got {name!r}")
    if len(name.encode()) > 65536:
        raise ConfigError(f"a Redis {what} name is at most 64 KiB of UTF-8, got {len(name.encode())} bytes")
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()`` (defaults from :class:`RedisSettings`).

    :class:`RedisSettings` inherits these fields: they are declared here only.
    """

    #: Seconds an entry may stay pending (read, not acked) before a consumer of its group claims
    #: it with ``XAUTOCLAIM`` and hands it out again. Consumers of one subscription should share
    #: it: each claims by its own.
    ack_deadline: float = 30.0
    #: Deliveries after which an entry is dead-lettered instead of delivered again (None: no limit).
    #: A nack on the last allowed delivery, or a claim of an entry delivered that often, moves it.
    max_attempts: int | None = None
    #: Topic (stream) that dead-lettered entries are copied to, with the reason as attributes; without
    #: one they are acked and dropped.
    dead_letter_topic: str | None = None
    #: Seconds one ``XREADGROUP`` blocks when nothing is new; also how often a consumer looks for
    #: pending entries whose deadline passed (so a nacked or expired entry comes back within it).
    poll_interval: float = 0.5
    #: Where a subscription's consumer group starts when this consumer creates it: ``new`` (``$``,
    #: what is added from now on) or ``earliest`` (``0``, everything the stream holds).
    start: Literal["new", "earliest"] = "new"
    #: Entries one ``XREADGROUP`` (or ``XAUTOCLAIM``) reads ahead of the application. What is read
    #: ahead is pending in the group (its ack deadline runs); what a closing consumer read but did
    #: not hand out is made claimable at once, so another consumer of the group takes it.
    prefetch: int = 10

    def __post_init__(self) -> None:
        normalize_choices(self)
        if self.prefetch < 1:
            raise ConfigError(f"prefetch must be >= 1, got {self.prefetch}")
        check_positive("seconds", ack_deadline=self.ack_deadline, poll_interval=self.poll_interval)
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1 (or None for unlimited), got {self.max_attempts}")
        if self.dead_letter_topic is not None:
            check_name(self.dead_letter_topic, "dead-letter topic (stream)")
        if self.poll_interval > self.ack_deadline:
            raise ConfigError(
                f"poll_interval ({self.poll_interval}s) must not exceed ack_deadline ({self.ack_deadline}s): "
                "expired entries are looked for once per poll"
            )


@dataclass(frozen=True, slots=True)
class RedisSettings(ConsumerOptions):
    """``redis://[user:password@]host[:port][/db]?setting=value``: a connection to Redis.

    The consumer defaults (keyword-only) are the fields inherited from :class:`ConsumerOptions`.
    """

    #: Host name or address of the server.
    host: str = "127.0.0.1"
    #: TCP port.
    port: int = 6379
    #: Logical database number (the URL path).
    db: int = 0
    #: ACL user name (None: the ``default`` user, or ``AUTH password`` only).
    user: str | None = None
    password: str | None = secret()
    #: Connect with TLS (the ``rediss://`` scheme; implied by the ``tls_*`` file settings).
    tls: bool = False
    #: CA bundle to verify the server's certificate with (default: the system's).
    tls_ca_file: str | None = None
    #: Client certificate (and its key) for TLS client authentication.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: Connection name (``CLIENT SETNAME``), shown by ``CLIENT LIST``.
    client_name: str | None = None
    #: Seconds a connection attempt may take before ``ConnectionFailed``.
    connect_timeout: float = 10.0
    #: Seconds one command may wait for its answer (a blocking read waits ``poll_interval`` more).
    command_timeout: float = 10.0
    #: Seconds a publish waits for the server when no ``timeout=`` is given.
    publish_timeout: float = 10.0
    #: Seconds ``close()`` waits for a consumer's read in flight and for the connections to close.
    close_timeout: float = 5.0
    #: Connections the backend's pool may open (every blocked read holds one).
    max_connections: int = 100
    #: Whether missing streams and consumer groups are created (:mod:`broker.driver.provision`):
    #: ``create`` (``XGROUP CREATE ... MKSTREAM``), ``verify`` (a ``ProvisioningError`` names what
    #: is missing) or ``none`` (nothing made or checked: ``UnknownTopic``).
    provision: Provision = "create"
    #: Opt-in retention: each ``XADD`` trims its stream to about this many entries (``MAXLEN ~``:
    #: Redis drops whole nodes only, so at least this many stay). None (the default): no trimming.
    #: Redis 7 trims entries whether or not a consumer group still has them pending: a pending entry
    #: trimmed away is lost (the consumer that finds it logs it and counts it in ``lost``).
    max_length: int | None = None
    #: Opt-in retention: each ``XADD`` trims entries older than this many seconds (``MINID ~``, by
    #: the entry ids' milliseconds against this host's clock). None (the default): no trimming.
    #: The same warning as ``max_length``; the two exclude each other.
    max_age: float | None = None

    def __post_init__(self) -> None:
        normalize_choices(self)
        if self.max_length is not None and self.max_length < 1:
            raise ConfigError(f"max_length must be >= 1 (or None: no trimming), got {self.max_length}")
        if self.max_age is not None and not self.max_age > 0:
            raise ConfigError(f"max_age must be > 0 seconds (or None: no trimming), got {self.max_age}")
        if self.max_length is not None and self.max_age is not None:
            raise ConfigError("max_length and max_age exclude each other (one XADD trims by one of them)")
        if not self.host:
            raise ConfigError("the Redis host must be non-empty")
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"port must be in 1-65535, got {self.port}")
        if self.db < 0:
            raise ConfigError(f"db must be >= 0, got {self.db}")
        if self.max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1, got {self.max_connections}")
        check_positive(
            "seconds",
            connect_timeout=self.connect_timeout,
            command_timeout=self.command_timeout,
            publish_timeout=self.publish_timeout,
            close_timeout=self.close_timeout,
        )
        if self.tls_key_file and not self.tls_cert_file:
            raise ConfigError("tls_key_file needs tls_cert_file (the client certificate)")
        self.consumer_options({})  # validates the consumer defaults

    @property
    def uses_tls(self) -> bool:
        """True when the connection is to use TLS."""
        return bool(self.tls or self.tls_ca_file or self.tls_cert_file)

    def consumer_options(self, overrides: dict[str, Any]) -> ConsumerOptions:
        """The options of one consumer: these settings' defaults with ``overrides`` applied."""
        return build_consumer_options(ConsumerOptions, self, overrides, native_names={}, backend="redis")
