"""One typed error hierarchy for every backend.

Every error the library raises derives from :class:`BrokerError`. Where a Python built-in
exception names the same kind of problem, the error also derives from it (``ConfigError`` is a
``ValueError``, ``InvalidAttributes`` a ``TypeError``, ``Timeout`` a ``TimeoutError``), so code
written against the built-ins keeps working. Errors raised by a broker SDK are wrapped in the
closest class here, with the SDK's exception chained as ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

__all__ = [
    "KINDS",
    "AckError",
    "AuthenticationFailed",
    "BlockingInEventLoop",
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
    "ProvisioningError",
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
    #: The portable kind of failure, one per class (:data:`KINDS` lists them); a subclass
    #: names its own with ``class X(BrokerError, kind="..."):`` or keeps its parent's.
    kind: ClassVar[str] = "unknown"

    def __init_subclass__(cls, kind: str | None = None, **rest: Any) -> None:
        super().__init_subclass__(**rest)
        if kind is not None:
            cls.kind = kind


class ConfigError(BrokerError, ValueError, kind="invalid_config"):
    """A URL, mapping or setting is invalid."""


class UnknownBackend(ConfigError, kind="unknown_backend"):
    """No backend is registered for the URL scheme or ``backend`` key."""

    def __init__(self, scheme: str, available: list[str]) -> None:
        self.scheme = scheme
        self.available = sorted(available)
        names = ", ".join(f"{name}://" for name in self.available) or "none"
        super().__init__(
            f"no backend is registered for {scheme!r}; registered backends: {names}. "
            "Backends register under the 'broker.backends' entry-point group."
        )


class UnknownSetting(ConfigError, kind="unknown_setting"):
    """A URL query parameter or mapping key names no field of the backend's settings."""

    def __init__(self, backend: str, keys: list[str], valid: list[str]) -> None:
        self.backend = backend
        self.keys = sorted(keys)
        self.valid = sorted(valid)
        super().__init__(
            f"unknown setting(s) for backend {backend!r}: {', '.join(self.keys)}; "
            f"valid settings: {', '.join(self.valid)}"
        )


class ProvisioningError(ConfigError, kind="not_provisioned"):
    """Resources the application needs do not exist, and the backend may not create them.

    Raised under ``provision="verify"`` (by ``ping()``, or when a consumer or publisher needs a
    resource) naming every missing resource in :attr:`missing`; with ``provision="create"`` (the
    default) the backend creates what is missing instead.
    """

    def __init__(self, backend: str, missing: Sequence[str], hint: str = "") -> None:
        self.backend = backend
        self.missing = tuple(missing)
        names = ", ".join(self.missing) or "(none named)"
        super().__init__(
            f"{backend}: missing resources under provision='verify': {names}"
            + (f"; {hint}" if hint else "; create them, or connect with provision='create'")
        )


class MissingDependency(BrokerError, ImportError, kind="missing_dependency"):
    """A backend's SDK (or a library a feature needs) is not installed; the message names the extra."""

    def __init__(self, extra: str, module: str, *, needed_by: str | None = None) -> None:
        self.extra = extra
        self.module = module
        who = needed_by if needed_by is not None else f"the {extra!r} backend"
        super().__init__(
            f"{who} needs the Python package that provides {module!r}; "
            f"install it with: pip install 'polybroker[{extra}]'"
        )


class ClosedError(BrokerError, RuntimeError, kind="closed"):
    """The resource (publisher, topic, consumer, backend) was closed before this call."""


class BlockingInEventLoop(BrokerError, RuntimeError, kind="blocking_in_event_loop"):
    """A blocking call (:mod:`broker.sync`) was made from a thread running an event loop.

    Waiting there would stall that loop (or deadlock it); async code uses the async API instead.
    """


class ConnectionFailed(BrokerError, ConnectionError, kind="unavailable"):
    """The broker could not be reached or dropped the connection."""

    retryable = True


class AuthenticationFailed(ConnectionFailed, PermissionError, kind="unauthenticated"):
    """The broker refused the credentials (wrong, expired or missing)."""

    retryable = False


class PermissionDenied(BrokerError, PermissionError, kind="permission_denied"):
    """The identity is known but may not do this (publish, consume, create, ...)."""


class Throttled(BrokerError, kind="throttled"):
    """The broker refused the call for now: a quota, rate limit or server busy; retry after a pause."""

    retryable = True


class Timeout(BrokerError, TimeoutError, kind="timeout"):
    """An operation did not finish within its ``timeout=``."""

    retryable = True


class NotSupported(BrokerError, NotImplementedError, kind="not_supported"):
    """The backend has no such feature (see ``Backend.capabilities``)."""


class PublishError(BrokerError, kind="publish_failed"):
    """The broker did not accept a message."""


class MessageTooLarge(PublishError, ValueError, kind="message_too_large"):
    """A single message is larger than the broker accepts."""


class InvalidMessage(BrokerError, TypeError, kind="invalid_message"):
    """What was published is not a well-formed :class:`~broker.OutboundMessage`.

    Raised for anything but an ``OutboundMessage``, data that is not bytes, and a key that is
    neither ``str`` nor None.
    """


class InvalidAttributes(InvalidMessage, kind="invalid_attributes"):
    """Attributes are not a ``str -> str`` mapping (and the backend documents nothing richer)."""


class ReceiveError(BrokerError, kind="receive_failed"):
    """Receiving from the broker failed."""


class AckError(BrokerError, kind="ack_failed"):
    """An acknowledgement was refused: settled twice in conflicting ways, or the broker failed."""


class TransactionError(BrokerError, kind="transaction_failed"):
    """A transaction was misused (commit without begin, begin twice) or the broker failed it."""


class UnknownTopic(BrokerError, LookupError, kind="not_found"):
    """The topic, subscription or partition does not exist."""


class EncodeError(BrokerError, ValueError, kind="encode_failed"):
    """A codec could not encode a value."""


class DecodeError(BrokerError, ValueError, kind="decode_failed"):
    """A codec could not decode bytes (never retryable: the same bytes fail the same way).

    Raised by the typed API (:mod:`broker.typed`) when a received message's ``decoded`` is read:
    ``received`` is then the :class:`~broker.Message` or :class:`~broker.Record` whose payload
    did not decode (its bytes, key, attributes and settlement unchanged) and ``content_type`` the
    content type it was decoded as (None: the binding's default). Both are None when a codec is
    called directly.
    """

    def __init__(self, *args: Any, received: Any = None, content_type: str | None = None) -> None:
        super().__init__(*args)
        #: The received Message or Record whose payload failed to decode (None outside the typed API).
        self.received = received
        #: The content type the payload was decoded as (None: none was given).
        self.content_type = content_type


#: Every portable error ``kind`` and the class of :mod:`broker.errors` that carries it.
KINDS: dict[str, type[BrokerError]] = {
    cls.kind: cls for cls in (globals()[name] for name in __all__ if name != "KINDS")
}
