"""SDK exceptions -> the broker's error hierarchy (the SDK's exception is chained as ``__cause__``)."""

from __future__ import annotations

from azure.servicebus import exceptions as sb

from broker import errors
from broker.driver.sdk_errors import ErrorRule, ErrorTable

__all__ = ["translate"]

_ERRORS = ErrorTable(
    ErrorRule(sb.MessagingEntityNotFoundError, errors.UnknownTopic),
    ErrorRule(sb.MessageSizeExceededError, errors.MessageTooLarge),
    ErrorRule((sb.OperationTimeoutError, TimeoutError), errors.Timeout),
    ErrorRule(sb.ServiceBusAuthenticationError, errors.AuthenticationFailed),
    ErrorRule(sb.ServiceBusAuthorizationError, errors.PermissionDenied),
    ErrorRule((sb.ServiceBusQuotaExceededError, sb.ServiceBusServerBusyError), errors.Throttled),
    ErrorRule((sb.ServiceBusConnectionError, sb.ServiceBusCommunicationError), errors.ConnectionFailed),
    ErrorRule((sb.MessageLockLostError, sb.SessionLockLostError, sb.MessageAlreadySettled), errors.AckError),
    detail=str,
)


def translate(
    exc: BaseException, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """The broker error for SDK exception ``exc`` raised while ``doing``; raise it ``from exc``.

    Exceptions that name their own kind get the matching class, anything else ``default``.
    """
    return _ERRORS.translate(exc, doing, default)
