"""Translation of aio-pika / aiormq exceptions into :mod:`broker.errors` (the original is chained)."""

from __future__ import annotations

import aio_pika.exceptions as amqp
import aiormq.exceptions

from broker.errors import (
    AckError,
    AuthenticationFailed,
    BrokerError,
    ClosedError,
    ConfigError,
    ConnectionFailed,
    MessageTooLarge,
    PermissionDenied,
    PublishError,
    Timeout,
    UnknownTopic,
)
from broker.sdk_errors import ErrorRule, ErrorTable

__all__ = ["translate"]

_ERRORS = ErrorTable(
    ErrorRule(
        amqp.MessageProcessError,
        AckError,
        "the message was already settled (its ack deadline passed: requeued)",
    ),
    ErrorRule(amqp.ChannelInvalidStateError, ClosedError, "the channel is closed"),
    ErrorRule(
        (amqp.ProbableAuthenticationError, aiormq.exceptions.AuthenticationError),
        AuthenticationFailed,
        "the broker refused the credentials",
    ),
    ErrorRule(
        amqp.ChannelPreconditionFailed,
        MessageTooLarge,
        when=lambda exc: "larger than configured max size" in str(exc),
    ),
    ErrorRule(
        amqp.ChannelPreconditionFailed,
        ConfigError,
        "{detail} (an exchange or queue exists with other settings)",
    ),
    ErrorRule(amqp.ChannelNotFoundEntity, UnknownTopic),
    ErrorRule(
        (aiormq.exceptions.ChannelAccessRefused, aiormq.exceptions.ConnectionNotAllowed),
        PermissionDenied,
    ),
    ErrorRule(amqp.DeliveryError, PublishError, "the broker did not take the message ({detail})"),
    ErrorRule(TimeoutError, Timeout, "no answer from the broker in time"),
    ErrorRule((amqp.AMQPConnectionError, ConnectionError, OSError), ConnectionFailed),
    ErrorRule(amqp.ChannelClosed, ClosedError),
)


def translate(exc: BaseException, doing: str, default: type[BrokerError] = BrokerError) -> BrokerError:
    """The :mod:`broker.errors` exception for an SDK exception raised while ``doing`` something.

    Exceptions that name their own kind get the matching class, anything else ``default``;
    broker errors are returned unchanged. Raise the result ``from exc``.
    """
    if default is AckError and isinstance(exc, amqp.ChannelInvalidStateError):
        # settling on a closed channel: RabbitMQ has already put the message back
        return AckError(f"{doing}: the consumer's channel is closed; the message went back to the queue")
    return _ERRORS.translate(exc, doing, default)
