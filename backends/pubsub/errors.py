"""Translation of google-cloud-pubsub and google-api-core errors into :mod:`broker.errors`.

The SDK's exception is always chained as ``__cause__``. Besides the obvious ones:
``Unauthenticated`` -> ``AuthenticationFailed``, ``PermissionDenied`` -> ``PermissionDenied``
(both not retryable), ``ResourceExhausted`` / HTTP 429 (quota, rate limit, flow control) ->
``Throttled`` (retryable), ``ServiceUnavailable`` -> ``ConnectionFailed`` (retryable),
``NotFound`` -> ``UnknownTopic``.
"""

from __future__ import annotations

from google.api_core import exceptions as api_exceptions
from google.cloud.pubsub_v1.publisher import exceptions as publisher_exceptions  # type: ignore[import-untyped]

from broker import errors
from broker.driver.sdk_errors import ErrorRule, ErrorTable

__all__ = ["translate"]

_INVALID = api_exceptions.InvalidArgument

_ERRORS = ErrorTable(
    ErrorRule(api_exceptions.NotFound, errors.UnknownTopic, "not found ({exc.message})"),
    ErrorRule(publisher_exceptions.MessageTooLargeError, errors.MessageTooLarge, "{exc}"),
    ErrorRule(
        _INVALID, errors.MessageTooLarge, "{exc.message}", when=lambda exc: "too large" in str(exc).lower()
    ),
    ErrorRule(
        _INVALID,
        errors.ConfigError,
        "invalid name ({exc.message})",
        when=lambda exc: "name" in str(exc.message).lower(),
    ),
    ErrorRule(_INVALID, None, "invalid argument ({exc.message})"),
    ErrorRule(
        api_exceptions.Unauthenticated,
        errors.AuthenticationFailed,
        "the credentials were refused ({exc.message})",
    ),
    ErrorRule(api_exceptions.PermissionDenied, errors.PermissionDenied, "permission denied ({exc.message})"),
    ErrorRule(
        (api_exceptions.ResourceExhausted, api_exceptions.TooManyRequests),
        errors.Throttled,
        "quota or rate limit exceeded ({exc.message})",
    ),
    ErrorRule(api_exceptions.ServiceUnavailable, errors.ConnectionFailed, "{kind} ({exc.message})"),
    ErrorRule(
        (api_exceptions.DeadlineExceeded, api_exceptions.RetryError, TimeoutError),
        errors.Timeout,
        "timed out ({exc})",
    ),
    ErrorRule(
        RuntimeError, errors.ClosedError, "the client is closed", when=lambda exc: "stopped" in str(exc)
    ),
    fallback="{kind}: {exc}",
    chain=True,
)


def translate(
    exc: BaseException, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """The :mod:`broker.errors` error for SDK error ``exc`` raised while ``doing``.

    Errors that name their own kind (not found, too large, unreachable, ...) get the matching
    class; anything else becomes ``default``. Broker errors pass through unchanged.
    """
    cause = getattr(exc, "cause", None)
    if isinstance(exc, api_exceptions.RetryError) and isinstance(cause, api_exceptions.GoogleAPICallError):
        # retried until the deadline: the last error says why (quota, permission, ...)
        if not isinstance(cause, api_exceptions.DeadlineExceeded | api_exceptions.ServiceUnavailable):
            last = translate(cause, f"{doing} (retried until its deadline)", default)
            last.__cause__ = exc
            return last
    return _ERRORS.translate(exc, doing, default)
