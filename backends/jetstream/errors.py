"""Translation of nats-py exceptions into :mod:`broker.errors` (the original is chained)."""

from __future__ import annotations

import nats.errors
import nats.js.errors

from broker.errors import (
    AuthenticationFailed,
    BrokerError,
    ClosedError,
    ConfigError,
    ConnectionFailed,
    MessageTooLarge,
    PermissionDenied,
    PublishError,
    Throttled,
    Timeout,
    UnknownTopic,
)

__all__ = ["translate"]

# JetStream API error codes (err_code) that mean "no such stream or consumer".
_NOT_FOUND_CODES = {10014, 10059}
# ... and those that mean the request itself is wrong.
_BAD_REQUEST_CODES = {10012, 10013, 10025, 10052, 10058, 10065, 10100}


def translate(exc: BaseException, doing: str, default: type[BrokerError] = BrokerError) -> BrokerError:
    """The :mod:`broker.errors` exception for an SDK exception raised while ``doing`` something.

    Exceptions that name their own kind get the matching class, anything else ``default``;
    broker errors are returned unchanged. Raise the result ``from exc``.
    """
    if isinstance(exc, BrokerError):
        return exc
    detail = str(exc) or type(exc).__name__
    message = f"{doing}: {detail}"
    if isinstance(exc, nats.errors.MaxPayloadError):
        return MessageTooLarge(f"{doing}: the message is larger than the server's max_payload")
    if isinstance(exc, nats.errors.ConnectionClosedError | nats.errors.ConnectionDrainingError):
        return ClosedError(f"{doing}: the NATS connection is closed")
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return UnknownTopic(f"{doing}: no JetStream stream stores this subject")
    if isinstance(exc, nats.js.errors.NotFoundError):
        return UnknownTopic(message)
    if isinstance(exc, nats.js.errors.APIError):
        if exc.err_code in _NOT_FOUND_CODES:
            return UnknownTopic(message)
        if exc.err_code in _BAD_REQUEST_CODES or exc.code == 400:
            return ConfigError(message)
        if exc.code in (401, 403):
            return PermissionDenied(message)
        if exc.code == 429:
            return Throttled(message)
        if exc.code == 503:
            return ConnectionFailed(f"{doing}: JetStream is not available ({detail})")
        if default is BrokerError and "publish" in doing:
            return PublishError(message)
        return default(message)
    if isinstance(exc, nats.errors.AuthorizationError):
        return AuthenticationFailed(message)
    if isinstance(exc, nats.errors.Error) and "permissions violation" in detail.lower():
        return PermissionDenied(message)
    if isinstance(exc, nats.errors.TimeoutError | TimeoutError):
        return Timeout(f"{doing}: no answer from the server in time")
    if isinstance(
        exc,
        nats.errors.NoServersError
        | nats.errors.StaleConnectionError
        | nats.errors.OutboundBufferLimitError
        | nats.errors.NoRespondersError
        | nats.errors.ConnectionReconnectingError
        | nats.errors.SecureConnFailedError
        | ConnectionError
        | OSError,
    ):
        return ConnectionFailed(message)
    if isinstance(exc, nats.errors.BadSubjectError | nats.errors.BadHeaderError):
        return ConfigError(message)
    return default(message)
