"""SDK errors (``KafkaError`` / ``KafkaException``) wrapped in :mod:`broker.errors`, cause chained."""

from __future__ import annotations

from typing import Any

from broker import errors

__all__ = ["error_of", "kafka_error_class", "receive_error", "translate"]

_TOO_LARGE = {"MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"}
_UNKNOWN = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_ID"}
# A delivery that timed out (_MSG_TIMED_OUT) is a failed publish, not a Timeout of a caller's wait.
_TIMEOUT = {"_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE"}
_CONNECTION = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "NETWORK_EXCEPTION", "_AUTHENTICATION"}
_CONFIG = {"_INVALID_ARG", "INVALID_CONFIG", "INVALID_PARTITIONS", "INVALID_REPLICATION_FACTOR"}


def error_of(exc: BaseException | Any) -> Any:
    """The ``KafkaError`` inside a ``KafkaException`` (or ``exc`` itself when it is one)."""
    args = getattr(exc, "args", None)
    if args and hasattr(args[0], "code") and hasattr(args[0], "name"):
        return args[0]
    if hasattr(exc, "code") and hasattr(exc, "name"):
        return exc
    return None


def kafka_error_class(error: Any, default: type[errors.BrokerError]) -> type[errors.BrokerError]:
    """The :mod:`broker.errors` class for a ``KafkaError`` (``default`` when nothing closer fits)."""
    name = error.name() if error is not None else ""
    if name in _TOO_LARGE:
        return errors.MessageTooLarge
    if name in _UNKNOWN:
        return errors.UnknownTopic
    if name in _TIMEOUT:
        return errors.Timeout
    if name in _CONNECTION:
        return errors.ConnectionFailed
    if name in _CONFIG:
        return errors.ConfigError
    return default


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
