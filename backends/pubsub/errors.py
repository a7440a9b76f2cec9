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

from broker.errors import (
    AuthenticationFailed,
    BrokerError,
    ClosedError,
    ConfigError,
    ConnectionFailed,
    MessageTooLarge,
    PermissionDenied,
    Throttled,
    Timeout,
    UnknownTopic,
)

__all__ = ["translate"]


def translate(exc: BaseException, doing: str, default: type[BrokerError] = BrokerError) -> BrokerError:
    """The :mod:`broker.errors` error for SDK error ``exc`` raised while ``doing``.

    Errors that name their own kind (not found, too large, unreachable, ...) get the matching
    class; anything else becomes ``default``. Broker errors pass through unchanged.
    """
    if isinstance(exc, BrokerError):
        return exc
    cause = getattr(exc, "cause", None)
    if isinstance(exc, api_exceptions.RetryError) and isinstance(cause, api_exceptions.GoogleAPICallError):
        # retried until the deadline: the last error says why (quota, permission, ...)
        if not isinstance(cause, api_exceptions.DeadlineExceeded | api_exceptions.ServiceUnavailable):
            last = translate(cause, f"{doing} (retried until its deadline)", default)
            last.__cause__ = exc
            return last
    error: BrokerError
    if isinstance(exc, api_exceptions.NotFound):
        error = UnknownTopic(f"{doing}: not found ({exc.message})")
    elif isinstance(exc, publisher_exceptions.MessageTooLargeError):
        error = MessageTooLarge(f"{doing}: {exc}")
    elif isinstance(exc, api_exceptions.InvalidArgument) and "too large" in str(exc).lower():
        error = MessageTooLarge(f"{doing}: {exc.message}")
    elif isinstance(exc, api_exceptions.InvalidArgument) and "name" in str(exc.message).lower():
        error = ConfigError(f"{doing}: invalid name ({exc.message})")
    elif isinstance(exc, api_exceptions.InvalidArgument):
        error = default(f"{doing}: invalid argument ({exc.message})")
    elif isinstance(exc, api_exceptions.Unauthenticated):
        error = AuthenticationFailed(f"{doing}: the credentials were refused ({exc.message})")
    elif isinstance(exc, api_exceptions.PermissionDenied):
        error = PermissionDenied(f"{doing}: permission denied ({exc.message})")
    elif isinstance(exc, api_exceptions.ResourceExhausted | api_exceptions.TooManyRequests):
        error = Throttled(f"{doing}: quota or rate limit exceeded ({exc.message})")
    elif isinstance(exc, api_exceptions.ServiceUnavailable):
        error = ConnectionFailed(f"{doing}: {type(exc).__name__} ({exc.message})")
    elif isinstance(exc, api_exceptions.DeadlineExceeded | api_exceptions.RetryError | TimeoutError):
        error = Timeout(f"{doing}: timed out ({exc})")
    elif isinstance(exc, RuntimeError) and "stopped" in str(exc):
        error = ClosedError(f"{doing}: the client is closed")
    else:
        error = default(f"{doing}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error
