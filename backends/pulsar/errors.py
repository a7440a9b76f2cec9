"""Pulsar client failures as :mod:`broker.errors`, with the client's own exception chained."""

from __future__ import annotations

from typing import Any

import _pulsar  # type: ignore[import-not-found]

from broker import errors

__all__ = ["as_exception", "is_closed", "is_timeout", "translate"]

_BY_NAME: dict[str, type[errors.BrokerError]] = {
    "Timeout": errors.Timeout,
    "AlreadyClosed": errors.ClosedError,
    "ConsumerNotInitialized": errors.ClosedError,
    "ProducerNotInitialized": errors.ClosedError,
    "ConnectError": errors.ConnectionFailed,
    "NotConnected": errors.ConnectionFailed,
    "ServiceUnitNotReady": errors.ConnectionFailed,
    "LookupError": errors.ConnectionFailed,
    "AuthenticationError": errors.AuthenticationFailed,
    "AuthorizationError": errors.PermissionDenied,
    "ErrorGettingAuthenticationData": errors.AuthenticationFailed,
    "ProducerBlockedQuotaExceededError": errors.Throttled,
    "ProducerBlockedQuotaExceededException": errors.Throttled,
    "ProducerQueueIsFull": errors.Throttled,
    "TooManyLookupRequestException": errors.Throttled,
    "MessageTooBig": errors.MessageTooLarge,
    "TopicNotFound": errors.UnknownTopic,
    "SubscriptionNotFound": errors.UnknownTopic,
    "InvalidConfiguration": errors.ConfigError,
    "InvalidTopicName": errors.ConfigError,
    "InvalidUrl": errors.ConfigError,
}


def as_exception(failure: Any) -> BaseException:
    """The client's exception for ``failure``: a ``Result`` code, an ``Error`` or an exception."""
    if isinstance(failure, BaseException):
        return failure
    if isinstance(failure, _pulsar.Error):
        result, text = failure.error, failure.message
    else:
        result, text = failure, ""
    name = getattr(result, "name", str(result))
    cls = getattr(_pulsar, name, None)
    message = f"Pulsar error: {name}" + (f": {text}" if text else "")
    if isinstance(cls, type) and issubclass(cls, _pulsar.PulsarException):
        return cls(message)  # type: ignore[no-any-return]
    return _pulsar.PulsarException(message)  # type: ignore[no-any-return]


def _name(failure: Any) -> str:
    if isinstance(failure, _pulsar.Error):
        failure = failure.error
    if isinstance(failure, BaseException):
        return type(failure).__name__
    return str(getattr(failure, "name", failure))


def is_timeout(failure: Any) -> bool:
    """True when ``failure`` is the client's timeout."""
    return _name(failure) == "Timeout"


def is_closed(failure: Any) -> bool:
    """True when ``failure`` says the producer, consumer or client was closed."""
    return _name(failure) in ("AlreadyClosed", "ConsumerNotInitialized", "ProducerNotInitialized")


def translate(
    exc: Any, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """A broker error for ``exc`` while ``doing`` something; the client's exception is its cause.

    ``exc`` is the client's exception, or the ``Result`` code or ``Error`` its callbacks report.
    ``default`` is the class used when no more specific one fits (``PublishError`` for sends, ...).
    """
    cause = as_exception(exc)
    if isinstance(cause, errors.BrokerError):
        return cause
    cls = _BY_NAME.get(_name(exc), default)
    error = cls(f"{doing} failed: {cause}")
    error.__cause__ = cause
    return error
