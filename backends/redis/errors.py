"""Translation of redis-py exceptions into :mod:`broker.errors` (the original is chained)."""

from __future__ import annotations

from collections.abc import Callable

import redis.exceptions as sdk

from broker import errors
from broker.driver.sdk_errors import ErrorRule, ErrorTable

__all__ = ["translate"]


def _says(*prefixes: str) -> Callable[[BaseException], bool]:
    def check(exc: BaseException) -> bool:
        return str(exc).upper().startswith(prefixes)

    return check


_ERRORS = ErrorTable(
    # redis-py raises AuthenticationError for WRONGPASS (and some NOAUTH); a plain NOAUTH answer
    # comes back as a ResponseError or AuthenticationError depending on the command.
    ErrorRule(sdk.AuthenticationError, errors.AuthenticationFailed, "the server refused the credentials"),
    ErrorRule(sdk.AuthenticationWrongNumberOfArgsError, errors.AuthenticationFailed),
    ErrorRule(
        sdk.ResponseError,
        errors.AuthenticationFailed,
        "the server wants credentials ({detail})",
        when=_says("NOAUTH", "WRONGPASS"),
    ),
    ErrorRule(
        (sdk.NoPermissionError, sdk.AuthorizationError),
        errors.PermissionDenied,
        "the user may not do this ({detail})",
    ),
    ErrorRule(
        sdk.ResponseError,
        errors.PermissionDenied,
        "the user may not do this ({detail})",
        when=_says("NOPERM"),
    ),
    ErrorRule(sdk.ResponseError, errors.UnknownTopic, when=_says("NOGROUP")),
    ErrorRule(sdk.BusyLoadingError, errors.ConnectionFailed, "the server is loading its data ({detail})"),
    ErrorRule((sdk.TimeoutError, TimeoutError), errors.Timeout, "no answer from the server in time"),
    ErrorRule((sdk.ConnectionError, ConnectionError, OSError), errors.ConnectionFailed),
    ErrorRule(sdk.OutOfMemoryError, errors.Throttled, "the server is out of memory ({detail})"),
    ErrorRule(sdk.DataError, errors.ConfigError),
)


def translate(
    exc: BaseException, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """The :mod:`broker.errors` exception for a redis-py exception raised while ``doing`` something.

    Exceptions that name their own kind get the matching class, anything else ``default``;
    broker errors are returned unchanged. Raise the result ``from exc``.
    """
    return _ERRORS.translate(exc, doing, default)
