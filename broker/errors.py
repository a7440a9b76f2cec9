"""One typed error hierarchy for every backend.

Every error the library raises derives from :class:`BrokerError`. Where a Python built-in
exception names the same kind of problem, the error also derives from it (``ConfigError`` is a
``ValueError``, ``InvalidAttributes`` a ``TypeError``, ``Timeout`` a ``TimeoutError``), so code
written against the built-ins keeps working. Errors raised by a broker SDK are wrapped in the
closest class here, with the SDK's exception chained as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "KINDS",
    "AckError",
    "AuthenticationFailed",
    "BrokerError",
    "ClosedError",
    "ConfigError",
    "ConnectionFailed",
    "DecodeError",
    "EncodeError",
    "InvalidAttributes",
    "InvalidMessage",
    "MessageTooLarge",
    "MissingDependency",
    "NotSupported",
    "PermissionDenied",
    "PublishError",
    "ReceiveError",
    "Throttled",
    "Timeout",
    "TransactionError",
    "UnknownBackend",
    "UnknownSetting",
    "UnknownTopic",
]


class BrokerError(Exception):
    """Base class of every error raised by polybroker.

    ``retryable`` tells a caller whether the same call may succeed if tried again later
    (a dropped connection, throttling) or will fail the same way (bad input, no permission).
    ``kind`` names the failure in a word that stays the same across backends and
    releases (``"timeout"``, ``"not_found"``, ...): for logs, metric labels and policies that
    should not depend on class names.
    """

    #: Whether trying the same call again later may succeed.
    retryable: bool = False
    #: The portable kind of failure, one per class (:data:`KINDS` lists them).
    kind: str = "unknown"


class ConfigError(BrokerError, ValueError):
    """A URL, mapping or setting is invalid."""

    kind = "invalid_config"


class UnknownBackend(ConfigError):
    """No backend is registered for the URL scheme or ``backend`` key."""

    kind = "unknown_backend"

    def __init__(self, scheme: str, available: list[str]) -> None:
        self.scheme = scheme
        self.available = sorted(available)
        names = ", ".join(f"{name}://" for name in self.available) or "none"
        super().__init__(
            f"no backend is registered for {scheme!r}; registered backends: {names}. "
            "Backends register under the 'broker.backends' entry-point group."
        )


class UnknownSetting(ConfigError):
    """A URL query parameter or mapping key names no field of the backend's settings."""

    kind = "unknown_setting"

    def __init__(self, backend: str, keys: list[str], valid: list[str]) -> None:
        self.backend = backend
        self.keys = sorted(keys)
        self.valid = sorted(valid)
        super().__init__(
            f"unknown setting(s) for backend {backend!r}: {', '.join(self.keys)}; "
            f"valid settings: {', '.join(self.valid)}"
        )


class MissingDependency(BrokerError, ImportError):
    """A backend's SDK is not installed; the message names the extra to install."""

    kind = "missing_dependency"

    def __init__(self, extra: str, module: str) -> None:
        self.extra = extra
        self.module = module
        super().__init__(
            f"the {extra!r} backend needs the Python package that provides {module!r}; "
            f"install it with: pip install 'polybroker[{extra}]'"
        )


class ClosedError(BrokerError, RuntimeError):
    """The resource (publisher, topic, consumer, backend) was closed before this call."""

    kind = "closed"


class ConnectionFailed(BrokerError, ConnectionError):
    """The broker could not be reached or dropped the connection."""

    kind = "unavailable"

    retryable = True


class AuthenticationFailed(ConnectionFailed, PermissionError):
    """The broker refused the credentials (wrong, expired or missing)."""

    kind = "unauthenticated"

    retryable = False


class PermissionDenied(BrokerError, PermissionError):
    """The identity is known but may not do this (publish, consume, create, ...)."""

    kind = "permission_denied"


class Throttled(BrokerError):
    """The broker refused the call for now: a quota, rate limit or server busy; retry after a pause."""

    kind = "throttled"

    retryable = True


class Timeout(BrokerError, TimeoutError):
    """An operation did not finish within its ``timeout=``."""

    kind = "timeout"

    retryable = True


class NotSupported(BrokerError, NotImplementedError):
    """The backend has no such feature (see ``Backend.capabilities``)."""

    kind = "not_supported"


class PublishError(BrokerError):
    """The broker did not accept a message."""

    kind = "publish_failed"


class MessageTooLarge(PublishError, ValueError):
    """A single message is larger than the broker accepts."""

    kind = "message_too_large"


class InvalidMessage(BrokerError, TypeError):
    """What was published is not a well-formed :class:`~broker.OutboundMessage`.

    Raised for anything but an ``OutboundMessage``, data that is not bytes, and a key that is
    neither ``str`` nor None.
    """

    kind = "invalid_message"


class InvalidAttributes(InvalidMessage):
    """Attributes are not a ``str -> str`` mapping (and the backend documents nothing richer)."""

    kind = "invalid_attributes"


class ReceiveError(BrokerError):
    """Receiving from the broker failed."""

    kind = "receive_failed"


class AckError(BrokerError):
    """An acknowledgement was refused: settled twice in conflicting ways, or the broker failed."""

    kind = "ack_failed"


class TransactionError(BrokerError):
    """A transaction was misused (commit without begin, begin twice) or the broker failed it."""

    kind = "transaction_failed"


class UnknownTopic(BrokerError, LookupError):
    """The topic, subscription or partition does not exist."""

    kind = "not_found"


class EncodeError(BrokerError, ValueError):
    """A codec could not encode a value."""

    kind = "encode_failed"


class DecodeError(BrokerError, ValueError):
    """A codec could not decode bytes."""

    kind = "decode_failed"


#: Every portable error ``kind`` and the class of :mod:`broker.errors` that carries it.
KINDS: dict[str, type[BrokerError]] = {
    cls.kind: cls for cls in (globals()[name] for name in __all__ if name != "KINDS")
}
