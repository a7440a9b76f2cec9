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
from broker.sdk_errors import ErrorRule, ErrorTable

__all__ = ["translate"]

_ERRORS = ErrorTable(
    ErrorRule(sb.MessagingEntityNotFoundError, UnknownTopic),
    ErrorRule(sb.MessageSizeExceededError, MessageTooLarge),
    ErrorRule((sb.OperationTimeoutError, TimeoutError), Timeout),
    ErrorRule(sb.ServiceBusAuthenticationError, AuthenticationFailed),
    ErrorRule(sb.ServiceBusAuthorizationError, PermissionDenied),
    ErrorRule((sb.ServiceBusQuotaExceededError, sb.ServiceBusServerBusyError), Throttled),
    ErrorRule((sb.ServiceBusConnectionError, sb.ServiceBusCommunicationError), ConnectionFailed),
    ErrorRule((sb.MessageLockLostError, sb.SessionLockLostError, sb.MessageAlreadySettled), AckError),
    detail=str,
)


def translate(exc: BaseException, doing: str, default: type[BrokerError] = BrokerError) -> BrokerError:
    """The broker error for SDK exception ``exc`` raised while ``doing``; raise it ``from exc``.

    Exceptions that name their own kind get the matching class, anything else ``default``.
    """
    return _ERRORS.translate(exc, doing, default)
