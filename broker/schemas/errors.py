"""Schema Registry failures as :mod:`broker.errors` classes.

:func:`translate` maps what confluent-kafka's registry client raises onto the portable hierarchy,
with the original chained: an unknown subject, version, id or GUID is :class:`SchemaNotFound` (an
:class:`~broker.errors.UnknownTopic`, kind ``not_found``); a schema refused on registration as
incompatible is :class:`IncompatibleSchema` and an invalid one :class:`InvalidSchema` (both
:class:`~broker.errors.ConfigError`); 401 is :class:`~broker.errors.AuthenticationFailed`, 403
:class:`~broker.errors.PermissionDenied`, 429 :class:`~broker.errors.Throttled`; a registry that
cannot be reached, or answers 5xx, is :class:`~broker.errors.ConnectionFailed` (retryable) and one
that does not answer in time :class:`~broker.errors.Timeout`. Messages never hold credentials: a
URL in an error is shown without its user information.
"""

from __future__ import annotations

import re
from typing import Any

from broker.errors import (
    AuthenticationFailed,
    BrokerError,
    ConfigError,
    ConnectionFailed,
    PermissionDenied,
    Throttled,
    Timeout,
    UnknownTopic,
)

__all__ = ["IncompatibleSchema", "InvalidSchema", "SchemaNotFound", "redact", "translate"]


class SchemaNotFound(UnknownTopic):
    """The registry knows no such subject, version, schema id or GUID (HTTP 404)."""

    def __init__(self, *args: Any, status: int | None = None, code: int | None = None) -> None:
        super().__init__(*args)
        #: The HTTP status and the registry's error code (40401 subject, 40402 version, 40403 schema).
        self.status, self.code = status, code


class IncompatibleSchema(ConfigError):
    """The registry refused to register a schema that breaks the subject's compatibility (HTTP 409)."""


class InvalidSchema(ConfigError):
    """The schema is not valid for its format, or the registry refused it as such (HTTP 422)."""


_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")


def redact(text: str) -> str:
    """``text`` with the user information of every URL in it removed (``https://u:p@h`` -> ``https://h``)."""
    return _USERINFO.sub(r"\g<scheme>", text)


def _status(exc: BaseException) -> tuple[int | None, int | None, str]:
    status = getattr(exc, "http_status_code", None)
    code = getattr(exc, "error_code", None)
    message = getattr(exc, "error_message", None) or str(exc)
    return status, code, redact(str(message))


def translate(exc: BaseException, doing: str) -> BrokerError:
    """The :mod:`broker.errors` error for ``exc`` raised by the registry client while ``doing``.

    Raise the result ``from exc``. A :class:`~broker.errors.BrokerError` is returned as it is.
    """
    if isinstance(exc, BrokerError):
        return exc
    name = type(exc).__name__
    module = type(exc).__module__
    if name == "SchemaRegistryError":
        status, code, message = _status(exc)
        text = f"schema registry refused {doing}: {message} (HTTP {status}, code {code})"
        if status == 404:
            return SchemaNotFound(text, status=status, code=code)
        if status == 409:
            return IncompatibleSchema(text)
        if status == 422:
            return InvalidSchema(text)
        if status == 401:
            return AuthenticationFailed(text)
        if status == 403:
            return PermissionDenied(text)
        if status == 429:
            return Throttled(text)
        if status is not None and (status >= 500 or status in (408, -1)):
            return ConnectionFailed(text)
        return BrokerError(text)
    text = redact(str(exc)) or name
    if "Timeout" in name or isinstance(exc, TimeoutError):
        return Timeout(f"the schema registry did not answer in time while {doing}: {text}")
    if module.startswith(("httpx", "httpcore")) or isinstance(exc, OSError):
        return ConnectionFailed(f"cannot reach the schema registry while {doing}: {name}: {text}")
    if name in ("SchemaParseException", "UnknownType") or module.startswith(("fastavro", "google.protobuf")):
        return InvalidSchema(f"invalid schema while {doing}: {text}")
    if name == "OAuthTokenError":
        return AuthenticationFailed(f"the schema registry's OAuth token could not be had while {doing}")
    return BrokerError(f"schema registry failure while {doing}: {name}: {text}")
