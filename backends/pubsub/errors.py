"""Translation of google-cloud-pubsub and google-api-core errors into :mod:`broker.errors`.

The SDK's exception is always chained as ``__cause__``.
"""

from __future__ import annotations

from google.api_core import exceptions as api_exceptions
from google.cloud.pubsub_v1.publisher import exceptions as publisher_exceptions  # type: ignore[import-untyped]

from broker.errors import (
    BrokerError,
    ClosedError,
    ConfigError,
    ConnectionFailed,
    MessageTooLarge,
    Timeout,
    UnknownTopic,
)

__all__ = ["translate"]


def translate(exc: BaseException, fallback: type[BrokerError], what: str) -> BrokerError:
    """The :mod:`broker.errors` error for SDK error ``exc`` raised while doing ``what``.

    Errors that name their own kind (not found, too large, unreachable, ...) get the matching
    class; anything else becomes ``fallback``. Broker errors pass through unchanged.
    """
    if isinstance(exc, BrokerError):
        return exc
    error: BrokerError
    if isinstance(exc, api_exceptions.NotFound):
        error = UnknownTopic(f"{what}: not found ({exc.message})")
    elif isinstance(exc, publisher_exceptions.MessageTooLargeError):
        error = MessageTooLarge(f"{what}: {exc}")
    elif isinstance(exc, api_exceptions.InvalidArgument) and "too large" in str(exc).lower():
        error = MessageTooLarge(f"{what}: {exc.message}")
    elif isinstance(exc, api_exceptions.InvalidArgument) and "name" in str(exc.message).lower():
        error = ConfigError(f"{what}: invalid name ({exc.message})")
    elif isinstance(exc, api_exceptions.InvalidArgument):
        error = fallback(f"{what}: invalid argument ({exc.message})")
    elif isinstance(exc, api_exceptions.ServiceUnavailable | api_exceptions.Unauthenticated):
        error = ConnectionFailed(f"{what}: {type(exc).__name__} ({exc.message})")
    elif isinstance(exc, api_exceptions.PermissionDenied):
        error = ConfigError(f"{what}: permission denied ({exc.message})")
    elif isinstance(exc, api_exceptions.DeadlineExceeded | api_exceptions.RetryError | TimeoutError):
        error = Timeout(f"{what}: timed out ({exc})")
    elif isinstance(exc, RuntimeError) and "stopped" in str(exc):
        error = ClosedError(f"{what}: the client is closed")
    else:
        error = fallback(f"{what}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error
