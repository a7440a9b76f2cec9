"""Translation of nats-py exceptions into :mod:`broker.errors` (the original is chained)."""

from __future__ import annotations

import nats.errors
import nats.js.errors

from broker import errors
from broker.driver.sdk_errors import ErrorRule, ErrorTable

__all__ = ["translate"]

# JetStream API error codes (err_code) that mean "no such stream or consumer".
_NOT_FOUND_CODES = {10014, 10059}
# ... and those that mean the request itself is wrong.
_BAD_REQUEST_CODES = {10012, 10013, 10025, 10052, 10058, 10065, 10100}

_API = nats.js.errors.APIError

_ERRORS = ErrorTable(
    ErrorRule(
        nats.errors.MaxPayloadError,
        errors.MessageTooLarge,
        "the message is larger than the server's max_payload",
    ),
    ErrorRule(
        (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError),
        errors.ClosedError,
        "the NATS connection is closed",
    ),
    ErrorRule(
        nats.js.errors.NoStreamResponseError, errors.UnknownTopic, "no JetStream stream stores this subject"
    ),
    ErrorRule(nats.js.errors.NotFoundError, errors.UnknownTopic),
    # API errors by their JetStream error code, then by their HTTP-like status
    ErrorRule(_API, errors.UnknownTopic, when=lambda exc: exc.err_code in _NOT_FOUND_CODES),
    ErrorRule(
        _API, errors.ConfigError, when=lambda exc: exc.err_code in _BAD_REQUEST_CODES or exc.code == 400
    ),
    ErrorRule(_API, errors.PermissionDenied, when=lambda exc: exc.code in (401, 403)),
    ErrorRule(_API, errors.Throttled, when=lambda exc: exc.code == 429),
    ErrorRule(
        _API,
        errors.ConnectionFailed,
        "JetStream is not available ({detail})",
        when=lambda exc: exc.code == 503,
    ),
    ErrorRule(_API, None),
    ErrorRule(nats.errors.AuthorizationError, errors.AuthenticationFailed),
    ErrorRule(
        nats.errors.Error,
        errors.PermissionDenied,
        when=lambda exc: "permissions violation" in str(exc).lower(),
    ),
    ErrorRule((nats.errors.TimeoutError, TimeoutError), errors.Timeout, "no answer from the server in time"),
    ErrorRule(
        (
            nats.errors.NoServersError,
            nats.errors.StaleConnectionError,
            nats.errors.OutboundBufferLimitError,
            nats.errors.NoRespondersError,
            nats.errors.ConnectionReconnectingError,
            nats.errors.SecureConnFailedError,
            ConnectionError,
            OSError,
        ),
        errors.ConnectionFailed,
    ),
    ErrorRule((nats.errors.BadSubjectError, nats.errors.BadHeaderError), errors.ConfigError),
)


def translate(
    exc: BaseException, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """The :mod:`broker.errors` exception for an SDK exception raised while ``doing`` something.

    Exceptions that name their own kind get the matching class, anything else ``default``;
    broker errors are returned unchanged. Raise the result ``from exc``.
    """
    if default is errors.BrokerError and "publish" in doing and isinstance(exc, _API):
        default = errors.PublishError  # an API error with no kind of its own failed the publish
    return _ERRORS.translate(exc, doing, default)
