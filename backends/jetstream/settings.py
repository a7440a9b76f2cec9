"""Settings of the NATS JetStream backend: the connection, stream and consumer defaults, publishing.

``nats://host:port[,host:port]?stream=ORDERS&ack_wait=10`` (or a mapping with ``backend: nats``)
fills :class:`JetStreamSettings`. The consumer fields are defaults: ``Backend.messages(...)``
keyword options override them per consumer (:class:`ConsumerOptions`). Credentials (password,
token, NKey seed, TLS key password) are :func:`~broker.driver.settings.secret` fields, never shown in
``repr`` or logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

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
    "MSG_ID_HEADER",
    "PORTABLE_NAMES",
    "ConsumerOptions",
    "DeliverPolicy",
    "JetStreamSettings",
    "check_name",
    "check_server_url",
    "check_subject",
    "portable_to_native",
]

#: The header JetStream de-duplicates on (within the stream's ``duplicate_window``).
MSG_ID_HEADER = "Nats-Msg-Id"

#: Where a new consumer starts: every stored message, only new ones, the last one, the last per subject.
DeliverPolicy = Literal["all", "new", "last", "last_per_subject"]

_NAME_BAD = re.compile(r"[\s.*>/\\]")


def check_subject(subject: str, *, wildcards: bool = True) -> str:
    """``subject`` if it is a valid NATS subject (``ConfigError`` otherwise)."""
    if not isinstance(subject, str) or not subject:
        raise ConfigError(f"a NATS subject must be a non-empty string, got {subject!r}")
    if any(c.isspace() for c in subject):
        raise ConfigError(f"a NATS subject cannot contain whitespace: {subject!r}")
    tokens = subject.split(".")
    if any(not t for t in tokens):
        raise ConfigError(f"a NATS subject cannot have empty tokens: {subject!r}")
    for i, token in enumerate(tokens):
        if ("*" in token or ">" in token) and (
            not wildcards or token not in ("*", ">") or (token == ">" and i != len(tokens) - 1)
        ):
            raise ConfigError(f"bad wildcard in NATS subject {subject!r}")
    return subject


#: The schemes nats-py dials.
SERVER_SCHEMES = ("nats", "tls", "ws", "wss")


def check_server_url(server: str) -> str:
    """``server`` if it is a NATS server URL a client could dial (``ConfigError`` otherwise).

    ``scheme://[user:password@]host[:port]`` with a scheme of :data:`SERVER_SCHEMES`, a host name,
    a port in 1-65535 and IPv6 in brackets.
    """
    if not isinstance(server, str) or "://" not in server:
        raise ConfigError(
            f"a NATS server URL needs a scheme (nats://host:port), got {redact_url(str(server))!r}"
        )
    parsed = parse_url(server)  # ConfigError for broken IPv6, an empty host, a port outside 1-65535
    if parsed.scheme not in SERVER_SCHEMES:
        raise ConfigError(
            f"a NATS server URL starts with {', '.join(s + '://' for s in SERVER_SCHEMES)}; "
            f"got {redact_url(server)!r}"
        )
    if len(parsed.hosts) != 1:
        raise ConfigError(
            f"a NATS server URL names one host (list several servers instead): {redact_url(server)!r}"
        )
    return server


def check_name(name: str, what: str) -> str:
    """``name`` if it is a valid stream or consumer name (``ConfigError`` otherwise)."""
    if not isinstance(name, str) or not name or _NAME_BAD.search(name):
        raise ConfigError(
            f"a JetStream {what} name must be non-empty, without whitespace, '.', '*', '>', '/' or '\\'; "
            f"got {name!r}"
        )
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()``, ``batched_messages()`` and ``records()``.

    Defaults come from :class:`JetStreamSettings`, which inherits these fields (they are declared
    here only). The portable option names of :mod:`broker.driver.options` are accepted for the native
    ones (:data:`PORTABLE_NAMES`): ``ack_deadline`` is ``ack_wait``, ``max_attempts`` is
    ``max_deliver`` and ``dead_letter_topic`` is ``dead_letter_subject``.
    """

    #: The stream to consume from (None: the stream whose subjects cover the topic). On
    #: :class:`JetStreamSettings`: the stream that holds every topic of this connection (None:
    #: found or created per topic).
    stream: str | None = None
    #: Seconds a delivered message may stay unacknowledged before the server redelivers it.
    ack_wait: float = 30.0
    #: Deliveries after which the server stops redelivering a message (None: unlimited).
    max_deliver: int | None = None
    #: Unacknowledged messages the server lets this consumer have out at once (None: server default).
    max_ack_pending: int | None = None
    #: Redelivery delays (seconds) for successive ack-wait expiries; overrides ``ack_wait`` when set.
    backoff: tuple[float, ...] = ()
    #: Where a new consumer starts.
    deliver_policy: DeliverPolicy = "all"
    #: Largest batch a batched iterator returns (and pulls at once).
    batch_size: int = 100
    #: Messages a one-at-a-time iterator pulls per request (they count against ``ack_wait``).
    prefetch: int = 10
    #: Longest a single pull request waits at the server (seconds).
    pull_expires: float = 5.0
    #: Wait for the server to confirm every ack (one round trip each) instead of sending it.
    ack_sync: bool = False
    #: Subject that ``dead_letter()`` (and a ``nack`` of the last allowed delivery) republishes to.
    dead_letter_subject: str | None = None
    #: Create the consumer when it is missing.
    create_consumers: bool = True
    #: Change an existing consumer whose settings differ (instead of raising ``ConfigError``).
    update_consumers: bool = False

    def __post_init__(self) -> None:
        normalize_choices(self)
        if self.stream is not None:
            check_name(self.stream, "stream")
        check_positive("seconds", ack_wait=self.ack_wait)
        if self.max_deliver is not None and self.max_deliver < 1:
            raise ConfigError(f"max_deliver must be >= 1 (or None for unlimited), got {self.max_deliver}")
        if self.max_ack_pending is not None:
            check_at_least(1, max_ack_pending=self.max_ack_pending)
        if any(b <= 0 for b in self.backoff):
            raise ConfigError(f"backoff delays must be > 0 seconds, got {self.backoff}")
        check_at_least(1, batch_size=self.batch_size, prefetch=self.prefetch)
        check_at_least(0.05, "seconds", pull_expires=self.pull_expires)
        if self.dead_letter_subject is not None:
            check_subject(self.dead_letter_subject, wildcards=False)


@dataclass(frozen=True, slots=True)
class JetStreamSettings(ConsumerOptions):
    """``nats://host:port[,host:port]?setting=value``: a connection to NATS with JetStream.

    Topics are subjects. A topic is stored in ``stream`` when it is set, else in the stream whose
    subjects cover it, else (``create_streams``) in a new stream named after the subject.

    The consumer fields (keyword-only, ``stream`` among them) are inherited from
    :class:`ConsumerOptions`: they are the defaults that consumer keyword options override.
    """

    #: Server URLs (``nats://``, ``tls://``, ``ws://``, ``wss://``).
    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    #: Client name shown by the server's monitoring.
    name: str | None = None
    user: str | None = None
    password: str | None = secret()
    token: str | None = secret()
    #: Path of a ``.creds`` file (user JWT and NKey seed).
    credentials_file: str | None = None
    #: An NKey seed (``SU...``), for NKey authentication.
    nkeys_seed: str | None = secret()
    #: Use TLS even for ``nats://`` URLs (implied by any ``tls_*`` file and by ``tls://`` URLs).
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_key_password: str | None = secret()
    #: Host name to verify the server certificate against (when it differs from the URL's).
    tls_hostname: str | None = None
    #: Skip verification of the server certificate (tests only).
    tls_insecure: bool = False
    #: Seconds the first connection may take before ``ConnectionFailed``.
    connect_timeout: float = 5.0
    #: Seconds between reconnection attempts after the connection drops.
    reconnect_wait: float = 0.5
    #: Reconnection attempts per server before giving up (-1: never give up).
    max_reconnect_attempts: int = -1
    #: Seconds a JetStream API request (stream and consumer management) may take.
    request_timeout: float = 5.0
    #: Seconds ``close()`` waits for pending acks and the connection to close.
    close_timeout: float = 5.0
    #: JetStream domain (leaf-node setups).
    domain: str | None = None

    # -- streams (``stream`` is a consumer field) ----------------------------------------------
    #: Subjects of ``stream`` when it is created (default: the topics as they are used).
    subjects: tuple[str, ...] = ()
    #: Create missing streams (and add a topic to ``stream`` when it does not cover it yet).
    create_streams: bool = True
    storage: Literal["file", "memory"] = "file"
    replicas: int = 1
    retention: Literal["limits", "interest", "workqueue"] = "limits"
    #: Seconds within which JetStream drops a message whose ``Nats-Msg-Id`` it has already stored.
    duplicate_window: float = 120.0
    #: Seconds a message is kept (None: no age limit).
    max_age: float | None = None
    #: Bytes a stream may hold (None: no limit).
    max_bytes: int | None = None

    # -- consumers (the rest are the fields of ConsumerOptions) ----------------------------
    #: Consumer name used when ``messages()`` gets an empty subscription.
    durable: str | None = None

    # -- publishing --------------------------------------------------------------------------
    #: Seconds a publish waits for its PubAck when no ``timeout=`` is given.
    publish_timeout: float = 10.0
    #: PubAcks ``batch_publish`` lets be outstanding at once.
    publish_window: int = 1000
    #: Attribute whose value is sent as ``Nats-Msg-Id`` (the de-duplication id).
    msg_id_attribute: str = MSG_ID_HEADER
    #: Times a publish of a message that carries a de-duplication id is retried after a timeout
    #: or a lost connection (retries without an id could store the message twice, so none are made).
    publish_retries: int = 2
    #: Whether missing streams and consumers are created (:mod:`broker.driver.provision`): ``create``
    #: (where ``create_streams`` and ``create_consumers`` turn either part off), ``verify`` (nothing
    #: created, a missing stream or consumer is ``ProvisioningError``) or ``none`` (nothing created or
    #: asked beforehand; the server's ``UnknownTopic``). ``verify`` and ``none`` override both flags.
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        if not self.servers:
            raise ConfigError("at least one NATS server URL is needed")
        for server in self.servers:
            check_server_url(server)
        check_positive(
            "seconds",
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            close_timeout=self.close_timeout,
            publish_timeout=self.publish_timeout,
        )
        check_at_least(0, "seconds", reconnect_wait=self.reconnect_wait)
        if self.stream is not None:
            check_name(self.stream, "stream")
        for subject in self.subjects:
            check_subject(subject)
        check_at_least(1, replicas=self.replicas)
        check_at_least(0, "seconds", duplicate_window=self.duplicate_window)
        if self.max_age is not None:
            check_positive("seconds", max_age=self.max_age)
        check_at_least(1, publish_window=self.publish_window)
        check_at_least(0, publish_retries=self.publish_retries)
        if not self.msg_id_attribute:
            raise ConfigError("msg_id_attribute must be a non-empty attribute name")
        if self.durable is not None:
            check_name(self.durable, "consumer")
        self.consumer_options({})  # validates the consumer defaults

    @property
    def uses_tls(self) -> bool:
        """True when the connection is to use TLS."""
        return bool(
            self.tls
            or self.tls_ca_file
            or self.tls_cert_file
            or self.tls_insecure
            or any(s.startswith(("tls://", "wss://")) for s in self.servers)
        )

    def consumer_options(self, overrides: dict[str, Any]) -> ConsumerOptions:
        """The options of one consumer: these settings' defaults with ``overrides`` applied."""
        return build_consumer_options(
            ConsumerOptions, self, overrides, native_names=PORTABLE_NAMES, backend="nats"
        )


#: Portable option names (:mod:`broker.driver.options`) and the JetStream consumer option each one is.
PORTABLE_NAMES: dict[str, str] = {
    "ack_deadline": "ack_wait",
    "max_attempts": "max_deliver",
    "dead_letter_topic": "dead_letter_subject",
}


def portable_to_native(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the portable names replaced by JetStream's (``ack_deadline`` -> ``ack_wait``, ...)."""
    return rename_portable(options, PORTABLE_NAMES)
