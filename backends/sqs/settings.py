"""Settings of the Amazon SQS/SNS backend: the region, the credentials, the mode, the consumer defaults.

``sqs://REGION?setting=value`` (or a mapping with ``backend: sqs``) fills :class:`SqsSettings`.
Two modes, one URL form each:

- ``sqs://REGION`` (``mode=sns``, the default): a topic is an SNS topic, a subscription an SQS
  queue subscribed to it with raw message delivery;
- ``sqs://REGION?mode=queue``: a topic is a plain SQS queue, and every subscription of it is a
  competing consumer of that one queue (for services that only use SQS).

``fifo=true`` makes topics and queues FIFO (names get the ``.fifo`` suffix). Credentials come from
the standard AWS chain (environment, shared files, instance role) unless ``access_key_id`` and
``secret_access_key`` are given; the secret key and the session token are
:func:`~broker.driver.settings.secret` fields, never shown in ``repr`` or logs. Every time here is
whole seconds on the wire: deadlines and delays are rounded up (the visibility timeout is at most
12 hours, a delay at most 15 minutes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from broker.driver.options import build_consumer_options
from broker.driver.provision import Provision
from broker.driver.settings import check_positive, normalize_choices, secret
from broker.errors import ConfigError

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_DELAY_SECONDS",
    "MAX_PAYLOAD_BYTES",
    "MAX_QUEUE_PAYLOAD_BYTES",
    "MAX_SNS_BYTES",
    "MAX_SQS_BYTES",
    "MAX_VISIBILITY_SECONDS",
    "ConsumerOptions",
    "SqsSettings",
    "check_name",
    "whole_seconds",
]

#: The largest SNS message (payload plus attributes), 256 KiB.
MAX_SNS_BYTES = 256 * 1024
#: The largest SQS message a queue can be set to take, 1 MiB (its ``MaximumMessageSize``).
MAX_SQS_BYTES = 1024 * 1024
#: The largest payload every message can carry: a binary payload travels base64-encoded (4/3 of
#: its size) and 1 KiB is left for attributes. Text payloads travel as they are, up to 256 KiB
#: with their attributes.
MAX_PAYLOAD_BYTES = 3 * (MAX_SNS_BYTES - 1024) // 4
#: The largest payload every message of a queue at 1 MiB carries (queue mode: the queues this
#: backend creates take 1 MiB), binary ones base64-encoded, 1 KiB left for attributes.
MAX_QUEUE_PAYLOAD_BYTES = 3 * (MAX_SQS_BYTES - 1024) // 4
#: Message attributes SQS and SNS carry per message.
MAX_ATTRIBUTES = 10
#: The longest visibility timeout, 12 hours.
MAX_VISIBILITY_SECONDS = 12 * 3600
#: The longest delay (``DelaySeconds``), 15 minutes.
MAX_DELAY_SECONDS = 15 * 60

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def whole_seconds(seconds: float, most: int, what: str) -> int:
    """``seconds`` rounded up to whole seconds (AWS takes whole seconds); ``ConfigError`` past ``most``."""
    whole = max(0, math.ceil(seconds - 1e-9))
    if whole > most:
        raise ConfigError(f"{what} is at most {most} s on SQS, got {seconds} s")
    return whole


def check_name(name: str, what: str, fifo: bool = False) -> str:
    """``name`` if it can name an SNS topic or SQS queue (``ConfigError`` otherwise).

    Names are 1-80 characters of ``A-Z a-z 0-9 _ -`` (a FIFO name leaves room for ``.fifo``).
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"an SQS/SNS {what} name is made of A-Z, a-z, 0-9, '_' and '-', got {name!r}")
    most = 75 if fifo else 80
    if len(name) > most:
        raise ConfigError(f"an SQS/SNS {what} name is at most {most} characters, got {len(name)}")
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()`` (defaults from :class:`SqsSettings`)."""

    #: The visibility timeout (seconds, rounded up; at most 12 h): how long a received message stays
    #: hidden before SQS hands it out again.
    ack_deadline: float = 30.0
    #: Deliveries after which a message is dead-lettered instead of delivered again (None: no limit).
    max_attempts: int | None = None
    #: Topic dead-lettered messages are published to, with the reason as attributes; without one
    #: they are deleted and dropped.
    dead_letter_topic: str | None = None
    #: Seconds one ``ReceiveMessage`` long-polls when the queue is empty (rounded up, 1-20).
    wait_time: float = 20.0

    def __post_init__(self) -> None:
        normalize_choices(self)
        check_positive("seconds", ack_deadline=self.ack_deadline, wait_time=self.wait_time)
        whole_seconds(self.ack_deadline, MAX_VISIBILITY_SECONDS, "ack_deadline")
        whole_seconds(self.wait_time, 20, "wait_time")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1 (or None for unlimited), got {self.max_attempts}")
        if self.dead_letter_topic is not None:
            check_name(self.dead_letter_topic, "dead-letter topic")


@dataclass(frozen=True, slots=True)
class SqsSettings(ConsumerOptions):
    """``sqs://REGION?setting=value``: SNS and SQS in one AWS region (or a compatible endpoint)."""

    #: The AWS region (the URL's host).
    region: str = "us-east-1"
    #: ``sns`` (topics are SNS topics, subscriptions SQS queues) or ``queue`` (topics are queues).
    mode: Literal["sns", "queue"] = "sns"
    #: FIFO topics and queues: the key is the ``MessageGroupId``, each message has a deduplication id.
    fifo: bool = False
    #: An endpoint other than AWS's (a local fake, a VPC endpoint), for both services.
    endpoint_url: str | None = None
    #: A PEM file of the CA certificates an ``https://`` endpoint's chain is verified against (None:
    #: botocore's bundle, or ``AWS_CA_BUNDLE``); the host name is checked either way. For a VPC
    #: endpoint or a proxy with a private CA; no setting turns verification off.
    tls_ca_file: str | None = None
    #: The access key id (None: the standard AWS credential chain).
    access_key_id: str | None = None
    secret_access_key: str | None = secret()
    session_token: str | None = secret()
    #: Seconds a publish waits for the service when no ``timeout=`` is given.
    publish_timeout: float = 10.0
    #: Seconds a connection attempt may take.
    connect_timeout: float = 10.0
    #: Seconds ``close()`` waits for a receive in flight.
    close_timeout: float = 5.0
    #: Whether missing topics, queues and subscriptions are created (:mod:`broker.driver.provision`).
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        if not self.region or not re.match(r"^[a-z0-9-]+$", self.region):
            raise ConfigError(f"the AWS region is lower-case letters, digits and '-', got {self.region!r}")
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ConfigError("access_key_id and secret_access_key go together (or neither: the AWS chain)")
        if self.endpoint_url is not None and not self.endpoint_url.startswith(("http://", "https://")):
            raise ConfigError(f"endpoint_url is an http(s):// URL, got {self.endpoint_url!r}")
        check_positive(
            "seconds",
            publish_timeout=self.publish_timeout,
            connect_timeout=self.connect_timeout,
            close_timeout=self.close_timeout,
        )
        self.consumer_options({})  # validates the consumer defaults

    def consumer_options(self, overrides: dict[str, Any]) -> ConsumerOptions:
        """The options of one consumer: these settings' defaults with ``overrides`` applied."""
        return build_consumer_options(ConsumerOptions, self, overrides, native_names={}, backend="sqs")
