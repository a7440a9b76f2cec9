"""SDK errors (``KafkaError`` / ``KafkaException``) wrapped in :mod:`broker.errors`, cause chained."""

from __future__ import annotations

from typing import Any

from broker import errors

__all__ = [
    "AUTHENTICATION",
    "DENIED",
    "error_of",
    "is_refusal",
    "kafka_error_class",
    "receive_error",
    "translate",
]

_TOO_LARGE = {"MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"}
_UNKNOWN = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_ID"}
# A delivery that timed out (_MSG_TIMED_OUT) is a failed publish, not a Timeout of a caller's wait.
_TIMEOUT = {"_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE"}
_CONNECTION = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "NETWORK_EXCEPTION", "_SSL"}
#: The broker refused the client's credentials (SASL) or certificate: not retryable.
AUTHENTICATION = frozenset({"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"})
#: The identity is known but may not do this.
DENIED = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    }
)
_CONFIG = {"_INVALID_ARG", "INVALID_CONFIG", "INVALID_PARTITIONS", "INVALID_REPLICATION_FACTOR"}


#: TLS alerts by which a broker refuses the client's certificate, or its absence (TLS 1.3 shows
#: them on the first read after the handshake, as a ``_TRANSPORT`` error).
_CLIENT_CERT_REFUSED = (
    "alert certificate required",
    "alert unknown ca",
    "alert bad certificate",
    "alert certificate unknown",
    "alert access denied",
)


def _client_certificate_refused(error: Any) -> bool:
    text = error.str().lower()
    return error.name() in ("_SSL", "_TRANSPORT") and any(alert in text for alert in _CLIENT_CERT_REFUSED)


def is_refusal(error: Any) -> bool:
    """True for a ``KafkaError`` that retrying cannot fix: the broker refused the login or the
    client certificate, or the client refused the broker's certificate (untrusted, expired,
    another host name)."""
    name = error.name()
    return (
        name in AUTHENTICATION
        or (name == "_SSL" and "certificate verify failed" in error.str())
        or _client_certificate_refused(error)
    )


def error_of(exc: BaseException | Any) -> Any:
    """The ``KafkaError`` inside a ``KafkaException`` (or ``exc`` itself when it is one)."""
    args = getattr(exc, "args", None)
    if args and hasattr(args[0], "code") and hasattr(args[0], "name"):
        return args[0]
    if hasattr(exc, "code") and hasattr(exc, "name"):
        return exc
    return None


#: The :mod:`broker.errors` class of each ``KafkaError`` name that has a closer one than the default.
_CLASS_OF: dict[str, type[errors.BrokerError]] = {
    **dict.fromkeys(_TOO_LARGE, errors.MessageTooLarge),
    **dict.fromkeys(_UNKNOWN, errors.UnknownTopic),
    **dict.fromkeys(_TIMEOUT, errors.Timeout),
    **dict.fromkeys(AUTHENTICATION, errors.AuthenticationFailed),
    **dict.fromkeys(DENIED, errors.PermissionDenied),
    **dict.fromkeys(_CONNECTION, errors.ConnectionFailed),
    **dict.fromkeys(_CONFIG, errors.ConfigError),
}


def kafka_error_class(error: Any, default: type[errors.BrokerError]) -> type[errors.BrokerError]:
    """The :mod:`broker.errors` class for a ``KafkaError`` (``default`` when nothing closer fits)."""
    if error is None:
        return default
    if _client_certificate_refused(error):  # a _TRANSPORT or _SSL error that is a refused login
        return errors.AuthenticationFailed
    return _CLASS_OF.get(error.name(), default)


def translate(
    exc: BaseException | Any, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """A broker error for ``exc`` (a KafkaException, KafkaError or other SDK error) raised while ``doing``.

    Raise it ``from exc`` when ``exc`` is an exception, so the SDK's error stays chained. Broker
    errors are returned unchanged.
    """
    if isinstance(exc, errors.BrokerError):
        return exc
    error = error_of(exc)
    cls = kafka_error_class(error, default)
    detail = f"{error.name()}: {error.str()}" if error is not None else str(exc)
    wrapped = cls(f"{doing}: {detail}")
    wrapped.kafka_error = error  # type: ignore[attr-defined]
    return wrapped


def receive_error(error: Any) -> errors.BrokerError:
    """The error a failed fetch becomes."""
    return translate(error, "consuming failed", errors.ReceiveError)
