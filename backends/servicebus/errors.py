"""SDK exceptions -> the broker's error hierarchy (the SDK's exception is chained as ``__cause__``)."""

from __future__ import annotations

from azure.servicebus import exceptions as sb

from broker.errors import (
    AckError,
    AuthenticationFailed,
    BrokerError,
    ConnectionFailed,
    MessageTooLarge,
    PermissionDenied,
    Throttled,
    Timeout,
    UnknownTopic,
)

__all__ = ["translate"]


def translate(exc: BaseException, doing: str, default: type[BrokerError] = BrokerError) -> BrokerError:
    """The broker error for SDK exception ``exc`` raised while ``doing``; raise it ``from exc``.

    Exceptions that name their own kind get the matching class, anything else ``default``.
    """
    message = f"{doing}: {exc}"
    if isinstance(exc, BrokerError):
        return exc
    if isinstance(exc, sb.MessagingEntityNotFoundError):
        return UnknownTopic(message)
    if isinstance(exc, sb.MessageSizeExceededError):
        return MessageTooLarge(message)
    if isinstance(exc, sb.OperationTimeoutError | TimeoutError):
        return Timeout(message)
    if isinstance(exc, sb.ServiceBusAuthenticationError):
        return AuthenticationFailed(message)
    if isinstance(exc, sb.ServiceBusAuthorizationError):
        return PermissionDenied(message)
    if isinstance(exc, sb.ServiceBusQuotaExceededError | sb.ServiceBusServerBusyError):
        return Throttled(message)
    if isinstance(exc, sb.ServiceBusConnectionError | sb.ServiceBusCommunicationError):
        return ConnectionFailed(message)
    if isinstance(exc, sb.MessageLockLostError | sb.SessionLockLostError | sb.MessageAlreadySettled):
        return AckError(message)
    return default(message)
