"""Settings of the Google Cloud Pub/Sub backend: connection, topology, publishing and receiving.

The publish and receive defaults are those of dataphos lib-brokers (on the Go client
v1.30): a batch is sent after 50 ms, 50 messages or 50 MiB (the client clamps the byte
threshold to the server's 10 MB request limit), a publish gives up after 15 s, at most 800
messages / 1000 MiB are outstanding; a receiver holds at most 1000 messages / 400 MiB, extends
each lease by at most 3 minutes and for at most 30 minutes in total, and runs 10 handlers.
The Go-only ``NumGoroutines`` of publishing has no Python counterpart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from broker.driver.provision import Provision, reconcile_create_flag
from broker.driver.settings import check_at_least, check_positive, normalize_choices, secret
from broker.errors import ConfigError, NotSupported

__all__ = [
    "DEFAULT_DELIVERY_ATTEMPTS",
    "MAX_ACK_DEADLINE",
    "MAX_MESSAGE_BYTES",
    "MIN_ACK_DEADLINE",
    "MIN_DELIVERY_ATTEMPTS",
    "ConsumerOptions",
    "PubsubSettings",
]

#: Pub/Sub's bounds on a subscription's (and a modack's) ack deadline, in seconds.
MIN_ACK_DEADLINE = 10
MAX_ACK_DEADLINE = 600
#: Pub/Sub's bounds on a dead-letter policy's ``max_delivery_attempts``.
MIN_DELIVERY_ATTEMPTS = 5
MAX_DELIVERY_ATTEMPTS = 100
DEFAULT_DELIVERY_ATTEMPTS = 5
#: The largest message Pub/Sub accepts (data plus attributes and ordering key).
MAX_MESSAGE_BYTES = 10_000_000

_MIB = 1024 * 1024


def _check_ack_deadline(value: float) -> None:
    if not MIN_ACK_DEADLINE <= value <= MAX_ACK_DEADLINE:
        raise ConfigError(
            f"ack_deadline must be between {MIN_ACK_DEADLINE} and {MAX_ACK_DEADLINE} seconds "
            f"(Pub/Sub's limits), got {value}"
        )


def _check_attempts(value: int) -> None:
    if not MIN_DELIVERY_ATTEMPTS <= value <= MAX_DELIVERY_ATTEMPTS:
        raise ConfigError(
            f"max_delivery_attempts must be between {MIN_DELIVERY_ATTEMPTS} and {MAX_DELIVERY_ATTEMPTS} "
            f"(Pub/Sub's limits), got {value}"
        )


def _check_start(value: str | None) -> None:
    if value is None or value == "latest":
        return
    if value == "earliest":
        raise NotSupported(
            "start='earliest' is not supported on Pub/Sub: a subscription receives only what is "
            "published after it was created (start='latest'); create it up front with "
            "ensure_subscription() to keep what is published before the first consumer"
        )
    raise ConfigError(f"start must be 'earliest' or 'latest', got {value!r}")


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()``, ``batched_messages()`` and ``receiver()``.

    Defaults come from :class:`PubsubSettings`. The dead-letter and ordering options shape a
    subscription only when this backend creates it; an existing subscription keeps its own.
    """

    #: Seconds a pulled message stays leased before Pub/Sub redelivers it (10..600). A new
    #: subscription gets it as its ack deadline; on an existing subscription with another deadline,
    #: the iterators set it on every pulled message. Receivers extend leases on their own.
    ack_deadline: float = 10.0
    #: Topic that messages go to after ``max_delivery_attempts`` deliveries (None: no policy).
    dead_letter_topic: str | None = None
    #: Deliveries before a message is dead-lettered (5..100, Pub/Sub's limits; default 5).
    max_delivery_attempts: int | None = None
    #: Whether a new subscription delivers messages with the same ordering key in order.
    message_ordering: bool = False
    #: Messages one pull of an iterator takes at most (they wait in the iterator with their
    #: deadline running, so keep it small for slow consumers).
    pull_max_messages: int = 10
    #: Portable name of ``max_delivery_attempts``; needs ``dead_letter_topic`` (Pub/Sub counts
    #: deliveries only towards a dead-letter topic).
    max_attempts: int | None = None
    #: Portable name of ``pull_max_messages`` (``messages()``; ``batched_messages()`` takes its own).
    batch_size: int | None = None
    #: Portable: where a new subscription starts. Only ``"latest"``: a Pub/Sub subscription gets
    #: what is published after it was created; ``"earliest"`` raises ``NotSupported``.
    start: Literal["earliest", "latest"] | None = None

    def __post_init__(self) -> None:
        normalize_choices(self)
        _check_ack_deadline(self.ack_deadline)
        attempts = self.max_delivery_attempts
        if self.max_attempts is not None:
            if attempts is not None and attempts != self.max_attempts:
                raise ConfigError(
                    f"max_attempts={self.max_attempts} and max_delivery_attempts={attempts} disagree "
                    "(max_attempts is the portable name of max_delivery_attempts: give one)"
                )
            if self.dead_letter_topic is None:
                raise ConfigError(
                    f"max_attempts={self.max_attempts} needs a dead_letter_topic on Pub/Sub: it counts "
                    "deliveries only on subscriptions with a dead-letter policy, and forwards there"
                )
            attempts = self.max_attempts
        if attempts is None:
            attempts = DEFAULT_DELIVERY_ATTEMPTS
        _check_attempts(attempts)
        object.__setattr__(self, "max_delivery_attempts", attempts)
        if self.batch_size is not None:
            check_at_least(1, batch_size=self.batch_size)
            object.__setattr__(self, "pull_max_messages", self.batch_size)
        check_at_least(1, pull_max_messages=self.pull_max_messages)
        if self.dead_letter_topic is not None and not self.dead_letter_topic:
            raise ConfigError("dead_letter_topic must be a topic name or None")
        _check_start(self.start)

    @property
    def attempts(self) -> int:
        """Deliveries before a message is dead-lettered (the resolved ``max_delivery_attempts``)."""
        return self.max_delivery_attempts or DEFAULT_DELIVERY_ATTEMPTS

    @property
    def lease_seconds(self) -> int:
        """The ack deadline as the whole seconds Pub/Sub takes."""
        return math.ceil(self.ack_deadline)


@dataclass(frozen=True, slots=True)
class PubsubSettings:
    """``pubsub://PROJECT?setting=value``: a Google Cloud Pub/Sub project.

    Connection: ``emulator_host`` (``host:port`` of an emulator: plain-text gRPC, no
    credentials; ``PUBSUB_EMULATOR_HOST`` in the environment is used when it is not set),
    ``endpoint`` (another API endpoint, such as a regional one), and credentials from
    ``credentials_file`` or ``credentials_json`` (a key file's content) or ``credentials`` (a
    google-auth credentials object, which refreshes its own tokens), else Application Default
    Credentials. Credentials never appear in ``repr`` or logs. Outside the emulator every channel
    is TLS with the chain and the host name verified (gRPC's defaults; no setting turns that off).
    """

    #: The Google Cloud project id.
    project: str = ""
    #: ``host:port`` of a Pub/Sub emulator (plain-text gRPC, anonymous credentials).
    emulator_host: str | None = None
    #: API endpoint override, e.g. ``europe-west1-pubsub.googleapis.com:443``.
    endpoint: str | None = None
    #: Path of a credentials JSON file (service account key or other google-auth file).
    credentials_file: str | None = secret()
    #: Content of a credentials JSON file.
    credentials_json: str | None = secret()
    #: A google-auth credentials object (``google.auth.credentials.Credentials``), for secrets that
    #: rotate: it refreshes its own access tokens (service account, impersonated, external account
    #: or a custom subclass whose ``refresh()`` reads the current token from anywhere).
    credentials: object | None = secret()

    #: Create topics and subscriptions that do not exist yet (else using one is ``UnknownTopic``).
    #: Unset, it follows ``provision``; ``false`` is the other spelling of ``provision=none``, and
    #: ``true`` with ``provision`` other than ``create`` is a ``ConfigError``.
    create_missing: bool | None = None
    #: Publish ordering keys (``OutboundMessage.key``) and create subscriptions with ordering.
    #: Off, publishing a message with a key raises ``ConfigError`` rather than dropping the key.
    message_ordering: bool = False
    #: Default ack deadline of consumers and of subscriptions this backend creates (10..600 s).
    ack_deadline: float = 10.0
    #: Dead-letter topic of the subscriptions this backend creates (None: no dead-letter policy).
    dead_letter_topic: str | None = None
    #: Deliveries before a message goes to ``dead_letter_topic`` (5..100).
    max_delivery_attempts: int = DEFAULT_DELIVERY_ATTEMPTS
    #: Portable name of ``max_delivery_attempts`` (needs ``dead_letter_topic``).
    max_attempts: int | None = None
    #: Messages one pull of an iterator takes at most.
    pull_max_messages: int = 10
    #: Longest single pull RPC of an iterator, in seconds (an idle pull is simply renewed).
    pull_timeout: float = 30.0

    #: Publish a batch after this many seconds (lib-brokers: 50 ms).
    publish_delay_threshold: float = 0.05
    #: Publish a batch when it holds this many messages (lib-brokers: 50).
    publish_count_threshold: int = 50
    #: Publish a batch when it holds this many bytes (lib-brokers: 50 MiB; the client caps it at 10 MB).
    publish_byte_threshold: int = 50 * _MIB
    #: Seconds one publish may take, retries included (lib-brokers: 15 s).
    publish_timeout: float = 15.0
    #: Messages published and not yet confirmed, at most; publishing waits beyond (lib-brokers: 800).
    publish_max_outstanding_messages: int = 800
    #: Bytes published and not yet confirmed, at most (lib-brokers: 1000 MiB).
    publish_max_outstanding_bytes: int = 1000 * _MIB

    #: Seconds a receiver keeps extending a message's lease, in total (lib-brokers: 30 min).
    receive_max_extension: float = 1800.0
    #: Longest single lease extension of a receiver, in seconds (lib-brokers: 3 min).
    receive_max_extension_period: float = 180.0
    #: Messages a receiver holds (leased, not yet settled) at most (lib-brokers: 1000).
    receive_max_outstanding_messages: int = 1000
    #: Bytes a receiver holds at most (lib-brokers: 400 MiB).
    receive_max_outstanding_bytes: int = 400 * _MIB
    #: Handlers a receiver runs at once unless ``receiver(concurrency=...)`` says (lib-brokers: 10).
    receive_concurrency: int = 10

    #: Seconds ``close()`` waits for in-flight publishes and for the streaming pull to stop.
    close_timeout: float = 10.0
    #: Seconds one acknowledgement, deadline change or dead-letter forward may take, the client's
    #: retries included: past it, ``ack()``, ``nack()``, ``in_progress()`` and ``dead_letter()``
    #: raise a typed error (the broker redelivers the message after its deadline).
    rpc_timeout: float = 30.0
    #: Whether missing topics and subscriptions are created (:mod:`broker.driver.provision`): ``create``,
    #: ``verify`` (``get_topic`` / ``get_subscription``; a missing one is a ``ProvisioningError`` naming
    #: it) or ``none`` (a missing one is ``UnknownTopic``), the latter also ``create_missing=false``.
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        provision, create = reconcile_create_flag("pubsub", self.provision, self.create_missing)
        object.__setattr__(self, "provision", provision)
        object.__setattr__(self, "create_missing", create)
        if not self.project:
            raise ConfigError("the pubsub backend needs a project: pubsub://PROJECT_ID")
        if (
            sum(
                x is not None and x != ""
                for x in (self.credentials_file, self.credentials_json, self.credentials)
            )
            > 1
        ):
            raise ConfigError("give one of credentials_file, credentials_json and credentials")
        if isinstance(self.credentials, str | bytes):
            raise ConfigError(
                "credentials must be a google-auth credentials object; give JSON as credentials_json"
            )
        if self.emulator_host is not None and ":" not in self.emulator_host:
            raise ConfigError(f"emulator_host must be host:port, got {self.emulator_host!r}")
        _check_ack_deadline(self.ack_deadline)
        _check_attempts(self.max_delivery_attempts)
        if self.max_attempts is not None:
            ConsumerOptions(
                ack_deadline=self.ack_deadline,
                dead_letter_topic=self.dead_letter_topic,
                max_attempts=self.max_attempts,
                max_delivery_attempts=(
                    None
                    if self.max_delivery_attempts == DEFAULT_DELIVERY_ATTEMPTS
                    else self.max_delivery_attempts
                ),
            )
        check_positive(
            pull_timeout=self.pull_timeout,
            publish_delay_threshold=self.publish_delay_threshold,
            publish_count_threshold=self.publish_count_threshold,
            publish_byte_threshold=self.publish_byte_threshold,
            publish_timeout=self.publish_timeout,
            publish_max_outstanding_messages=self.publish_max_outstanding_messages,
            publish_max_outstanding_bytes=self.publish_max_outstanding_bytes,
            receive_max_extension=self.receive_max_extension,
            receive_max_extension_period=self.receive_max_extension_period,
            receive_max_outstanding_messages=self.receive_max_outstanding_messages,
            receive_max_outstanding_bytes=self.receive_max_outstanding_bytes,
            receive_concurrency=self.receive_concurrency,
            close_timeout=self.close_timeout,
            rpc_timeout=self.rpc_timeout,
            pull_max_messages=self.pull_max_messages,
        )

    def consumer_defaults(self) -> dict[str, Any]:
        """The consumer options this connection uses unless a consumer overrides them."""
        return {
            "ack_deadline": self.ack_deadline,
            "dead_letter_topic": self.dead_letter_topic,
            "max_delivery_attempts": (
                self.max_attempts if self.max_attempts is not None else self.max_delivery_attempts
            ),
            "message_ordering": self.message_ordering,
            "pull_max_messages": self.pull_max_messages,
        }
