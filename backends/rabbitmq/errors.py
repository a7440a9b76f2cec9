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

__all__ = ["translate"]


def translate(exc: BaseException, doing: str, default: type[BrokerError] = BrokerError) -> BrokerError:
    """The :mod:`broker.errors` exception for an SDK exception raised while ``doing`` something.

    Exceptions that name their own kind get the matching class, anything else ``default``;
    broker errors are returned unchanged. Raise the result ``from exc``.
    """
    if isinstance(exc, BrokerError):
        return exc
    detail = str(exc) or type(exc).__name__
    message = f"{doing}: {detail}"
    if isinstance(exc, amqp.MessageProcessError):
        return AckError(f"{doing}: the message was already settled (its ack deadline passed: requeued)")
    if isinstance(exc, amqp.ChannelInvalidStateError):
        if default is AckError:
            return AckError(f"{doing}: the consumer's channel is closed; the message went back to the queue")
        return ClosedError(f"{doing}: the channel is closed")
    if isinstance(exc, amqp.ProbableAuthenticationError | aiormq.exceptions.AuthenticationError):
        return AuthenticationFailed(f"{doing}: the broker refused the credentials")
    if isinstance(exc, amqp.ChannelPreconditionFailed) and "larger than configured max size" in detail:
        return MessageTooLarge(message)
    if isinstance(exc, amqp.ChannelPreconditionFailed):
        return ConfigError(f"{message} (an exchange or queue exists with other settings)")
    if isinstance(exc, amqp.ChannelNotFoundEntity):
        return UnknownTopic(message)
    if isinstance(exc, aiormq.exceptions.ChannelAccessRefused | aiormq.exceptions.ConnectionNotAllowed):
        return PermissionDenied(message)
    if isinstance(exc, amqp.DeliveryError):
        return PublishError(f"{doing}: the broker did not take the message ({detail})")
    if isinstance(exc, TimeoutError):
        return Timeout(f"{doing}: no answer from the broker in time")
    if isinstance(exc, amqp.AMQPConnectionError | ConnectionError | OSError):
        return ConnectionFailed(message)
    if isinstance(exc, amqp.ChannelClosed):
        return ClosedError(message)
    return default(message)
