"""The portable model in AMQP terms, in one place: messages, errors, topics as exchanges.

Messages (aio-pika <-> ``OutboundMessage`` / :class:`~broker.message.Message`):


* each attribute is an AMQP header of the same name and (string) value;
* the key goes in the ``Polybroker-Key`` header, and is the routing key on ``topic`` exchanges;
  a message without that header (another client's) has its non-empty routing key as its key;
* an attribute whose name RabbitMQ or this backend reserves (``x-delivery-count``, ``x-death``,
  ``x-first-death-*``, ``Polybroker-*``) or that is longer than a header name may be travels
  JSON-encoded in the ``Polybroker-Encoded`` header, so every ``str -> str`` mapping round-trips;
* ``Message.id`` is the AMQP ``message-id`` (a UUID set on publish, the same on every
  redelivery); a message from another client without one gets ``delivery-<tag>``;
* the attribute ``content-type`` is the AMQP ``content-type`` property (and comes back as that
  attribute from a message of any client that sets the property);
* ``publish_time`` is the AMQP ``timestamp`` property (whole seconds);
* ``delivery_attempt`` is the quorum queue's ``x-delivery-count`` header plus one; a classic
  queue counts nothing, so there it is 1 on a first delivery and 2 on any redelivery (the AMQP
  ``redelivered`` flag): a lower bound, never the count.

Headers set by other AMQP clients come back as attributes when their values are strings.

Errors: :func:`translate` turns aio-pika / aiormq exceptions into :mod:`broker.errors` (the original
is chained). Topics: a topic is a durable exchange (:func:`declare_exchange`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

import aio_pika
import aio_pika.exceptions as amqp
import aiormq.exceptions
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    DeliveryMode,
    ExchangeType,
)

from broker import Message, OutboundMessage, errors
from broker.backends.rabbitmq.settings import RabbitmqSettings
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker
from broker.driver.sdk_errors import ErrorRule, ErrorTable

__all__ = [
    "CONTENT_TYPE_ATTRIBUTE",
    "ENCODED_HEADER",
    "KEY_HEADER",
    "close_quietly",
    "connect_error",
    "declare_exchange",
    "routing_key",
    "to_message",
    "to_sdk",
    "translate",
]

#: The attribute carried in the AMQP ``content-type`` property rather than a header.
CONTENT_TYPE_ATTRIBUTE: Final = "content-type"
#: Header carrying the message key.
KEY_HEADER: Final = "Polybroker-Key"
#: Header carrying, JSON-encoded, the attributes plain headers cannot.
ENCODED_HEADER: Final = "Polybroker-Encoded"
#: Headers the broker adds on delivery and dead-lettering (never attributes).
BROKER_HEADERS: Final = frozenset(
    {"x-delivery-count", "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"}
)
_RESERVED: Final = BROKER_HEADERS | {KEY_HEADER, ENCODED_HEADER}
_MAX_HEADER_NAME = 128


def _plain(name: str) -> bool:
    return (
        name not in _RESERVED
        and not name.startswith(("x-last-death-", "Polybroker-"))
        and len(name.encode()) <= _MAX_HEADER_NAME
    )


def routing_key(message: OutboundMessage, exchange_type: str) -> str:
    """The routing key ``message`` is published with: its key on ``topic`` and ``direct``
    exchanges, else empty (``fanout`` and ``headers`` exchanges ignore it)."""
    key = message.key
    if exchange_type in ("topic", "direct") and key is not None and len(key.encode()) <= 255:
        return key
    return ""


def to_sdk(message: OutboundMessage, persistent: bool) -> aio_pika.Message:
    """The aio-pika message that carries ``message`` (a new message id, now as timestamp)."""
    headers: dict[str, Any] = {}
    encoded: dict[str, str] = {}
    content_type = None
    for name, value in message.attributes.items():
        if name == CONTENT_TYPE_ATTRIBUTE:
            content_type = value
        elif _plain(name):
            headers[name] = value
        else:
            encoded[name] = value
    if encoded:
        headers[ENCODED_HEADER] = json.dumps(encoded)
    if message.key is not None:
        headers[KEY_HEADER] = message.key
    return aio_pika.Message(
        message.data,
        headers=headers or None,
        content_type=content_type,
        delivery_mode=DeliveryMode.PERSISTENT if persistent else DeliveryMode.NOT_PERSISTENT,
        message_id=uuid.uuid4().hex,
        timestamp=time.time(),
    )


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return None
    return None


def _attributes(headers: Mapping[str, Any]) -> tuple[str | None, Mapping[str, str]]:
    if not headers:
        return None, EMPTY_ATTRIBUTES
    key = _text(headers.get(KEY_HEADER))
    attributes: dict[str, str] = {}
    for name, value in headers.items():
        if name in _RESERVED or name.startswith("x-last-death-"):
            continue
        text = _text(value)
        if text is not None:
            attributes[name] = text
    encoded = _text(headers.get(ENCODED_HEADER))
    if encoded:
        attributes.update(json.loads(encoded))
    return key, attributes or EMPTY_ATTRIBUTES


def native_properties(incoming: AbstractIncomingMessage) -> dict[str, Any]:
    """The headers of ``incoming`` with the types AMQP gave them (int, bool, Decimal, datetime, bytes,
    lists and tables, ...), less the broker's and this backend's own; attributes this backend had
    to JSON-encode come back as the ``str`` they were."""
    headers = incoming.headers or {}
    out = {
        name: value
        for name, value in headers.items()
        if name not in _RESERVED and not name.startswith("x-last-death-")
    }
    encoded = _text(headers.get(ENCODED_HEADER))
    if encoded:
        out.update(json.loads(encoded))
    return out


def to_message(incoming: AbstractIncomingMessage, acker: Acker, received: float) -> Message:
    """The :class:`Message` for a delivery (``raw`` is the aio-pika ``IncomingMessage``)."""
    headers = incoming.headers
    key, attributes = _attributes(headers)
    if key is None and incoming.routing_key:  # another client's message: its native key
        key = incoming.routing_key
    content_type = incoming.content_type
    if content_type:
        attributes = {**attributes, CONTENT_TYPE_ATTRIBUTE: content_type}
    count = headers.get("x-delivery-count") if headers else None
    stamp = incoming.timestamp
    return Message(
        id=incoming.message_id or f"delivery-{incoming.delivery_tag}",
        data=incoming.body,
        key=key,
        attributes=attributes,
        publish_time=stamp.timestamp() if stamp is not None else None,
        ingestion_time=received,
        delivery_attempt=count + 1 if isinstance(count, int) else 2 if incoming.redelivered else 1,
        raw=incoming,
        acker=acker,
    )


# -- errors ------------------------------------------------------------------------------
_ERRORS = ErrorTable(
    ErrorRule(
        amqp.MessageProcessError,
        errors.AckError,
        "the message was already settled (its ack deadline passed: requeued)",
    ),
    # The application's own close is caught before the SDK is called (ClosedError there); a channel
    # the SDK finds closed under a live publisher or consumer was closed by a lost connection or a
    # stopping broker: retryable, as the robust connection opens it again.
    ErrorRule(
        amqp.ChannelInvalidStateError,
        errors.ConnectionFailed,
        "the channel is closed (the connection to the broker was lost)",
    ),
    ErrorRule(
        (amqp.ProbableAuthenticationError, aiormq.exceptions.AuthenticationError),
        errors.AuthenticationFailed,
        "the broker refused the credentials",
    ),
    ErrorRule(
        amqp.ChannelPreconditionFailed,
        errors.MessageTooLarge,
        when=lambda exc: "larger than configured max size" in str(exc),
    ),
    ErrorRule(
        amqp.ChannelPreconditionFailed,
        errors.ConfigError,
        "{detail} (an exchange or queue exists with other settings)",
    ),
    ErrorRule(amqp.ChannelNotFoundEntity, errors.UnknownTopic),
    ErrorRule(
        (aiormq.exceptions.ChannelAccessRefused, aiormq.exceptions.ConnectionNotAllowed),
        errors.PermissionDenied,
    ),
    ErrorRule(amqp.DeliveryError, errors.PublishError, "the broker did not take the message ({detail})"),
    ErrorRule(TimeoutError, errors.Timeout, "no answer from the broker in time"),
    ErrorRule((amqp.AMQPConnectionError, ConnectionError, OSError), errors.ConnectionFailed),
    ErrorRule(amqp.ChannelClosed, errors.ConnectionFailed, "the broker closed the channel ({detail})"),
)


def _certificate_problem(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind ``exc`` (the SDK wraps it), if any."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return seen
        inner = next((a for a in getattr(seen, "args", ()) if isinstance(a, BaseException)), None)
        seen = inner or seen.__cause__ or seen.__context__
    return None


def connect_error(exc: BaseException, doing: str, settings: RabbitmqSettings) -> errors.BrokerError:
    """The typed error for a failed connection attempt, with the reason a user can act on.

    A certificate the client rejects is ``ConnectionFailed`` naming the verification error; the
    broker's refusal of the client certificate (or of its absence: with TLS 1.3 that shows only as
    a reset on the first read) is ``AuthenticationFailed``; a virtual host the user may not open
    is ``PermissionDenied``.
    """
    tls_error = _certificate_problem(exc)
    if isinstance(tls_error, ssl.SSLCertVerificationError):
        return errors.ConnectionFailed(
            f"{doing}: TLS: the broker's certificate was rejected: {tls_error.verify_message or tls_error}"
        )
    if tls_error is not None and "ALERT" in str(tls_error.reason or ""):
        return errors.AuthenticationFailed(
            f"{doing}: TLS: the broker refused the client certificate ({tls_error.reason})"
        )
    text = str(exc)
    if (
        isinstance(exc, aiormq.exceptions.InvalidFrameError)
        and "Connection.OpenOk" in text
        and "Connection.Close" in text
    ):
        return errors.PermissionDenied(
            f"{doing}: the broker refused to open virtual host {settings.vhost!r} "
            f"for user {settings.user!r} (no permissions there, or no such virtual host)"
        )
    translated = translate(exc, doing, errors.ConnectionFailed)
    if (
        settings.uses_tls
        and type(translated) is errors.ConnectionFailed
        and isinstance(exc, ConnectionError | aiormq.exceptions.ConnectionClosed | amqp.AMQPConnectionError)
    ):
        which = (
            "the client certificate"
            if settings.tls_cert_file
            else "a connection without a client certificate"
        )
        return errors.ConnectionFailed(
            f"{translated} (with TLS 1.3 this is how a broker refuses {which}: mutual TLS needs "
            "tls_cert_file and tls_key_file with a certificate the broker trusts)"
        )
    return translated


def translate(
    exc: BaseException, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """The :mod:`broker.errors` exception for an SDK exception raised while ``doing`` something.

    Exceptions that name their own kind get the matching class, anything else ``default``;
    broker errors are returned unchanged. Raise the result ``from exc``.
    """
    if default is errors.AckError and isinstance(exc, amqp.ChannelInvalidStateError):
        # settling on a closed channel: RabbitMQ has already put the message back
        return errors.AckError(
            f"{doing}: the consumer's channel is closed; the message went back to the queue"
        )
    return _ERRORS.translate(exc, doing, default)


# -- topics: durable exchanges -----------------------------------------------------------
async def declare_exchange(
    channel: AbstractChannel, name: str, settings: RabbitmqSettings
) -> AbstractExchange:
    """Declare the durable exchange of topic ``name`` with its type (``settings.exchange_kind``;
    a no-op when it exists alike, ``PRECONDITION_FAILED``, a ``ConfigError``, when of another type)."""
    kind = ExchangeType(settings.exchange_kind(name))
    try:
        return await channel.declare_exchange(name, kind, durable=True)
    except Exception as exc:
        raise translate(exc, f"declaring the exchange of topic {name!r}") from exc


async def close_quietly(channel: AbstractChannel | None, timeout: float) -> None:
    """Close ``channel`` if it is open, ignoring errors (the connection may be gone)."""
    if channel is not None and not channel.is_closed:
        with contextlib.suppress(Exception, asyncio.TimeoutError):
            await asyncio.wait_for(channel.close(), timeout)
