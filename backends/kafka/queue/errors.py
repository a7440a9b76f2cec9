"""kafka-mq-go's error predicates, on typed :mod:`broker.errors`: ``IsTimeoutError``, ``IsReconnectRequired``.

Both look through an exception, its chained causes (``__cause__``, ``__context__``) and the
``KafkaError`` a translated error carries (``kafka_error``, set by the Kafka backend's
``translate``), so they answer for what a log, a ``KafkaException`` or a wrapping error raised.

* :func:`is_timeout_error`: the operation ran out of time and may simply be tried again
  (:class:`broker.errors.Timeout`, Python's ``TimeoutError``, or librdkafka's ``_TIMED_OUT``,
  ``REQUEST_TIMED_OUT`` and ``_TIMED_OUT_QUEUE``). A delivery that timed out in the producer
  (``_MSG_TIMED_OUT``) is a failed publish, not a timeout of a wait, as in the Kafka backend.
* :func:`is_reconnect_required`: only a new client helps: librdkafka reported a *fatal* error
  (the client instance is unusable) or ``_MAX_POLL_EXCEEDED`` (the member was removed from its
  group for not polling). Timeouts, lost connections and other transient errors are retried by
  librdkafka itself, so they need no reconnect: the queue client then just polls again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from broker.errors import Timeout

__all__ = ["RECONNECT_CODES", "TIMEOUT_CODES", "is_reconnect_required", "is_timeout_error"]

#: librdkafka error names that mean a wait ran out of time.
TIMEOUT_CODES = frozenset({"_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE"})
#: librdkafka error names (besides any fatal error) after which only a new consumer helps.
RECONNECT_CODES = frozenset({"_MAX_POLL_EXCEEDED"})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _kafka_error(exc: BaseException) -> Any:
    """The ``KafkaError`` behind ``exc`` (a translated error's, a KafkaException's), or None."""
    carried = getattr(exc, "kafka_error", None)
    if carried is not None:
        return carried
    args = getattr(exc, "args", None)
    if args and hasattr(args[0], "code") and hasattr(args[0], "name"):
        return args[0]
    if hasattr(exc, "code") and hasattr(exc, "name") and callable(getattr(exc, "name", None)):
        return exc
    return None


def _name(error: Any) -> str:
    try:
        return str(error.name())
    except Exception:
        return ""


def _fatal(error: Any) -> bool:
    try:
        return bool(error.fatal())
    except Exception:
        return False


def is_timeout_error(exc: BaseException | None) -> bool:
    """True if ``exc`` says a Kafka client operation timed out (kafka-mq-go's ``IsTimeoutError``)."""
    if exc is None:
        return False
    for link in _chain(exc):
        error = _kafka_error(link)
        if error is not None:
            return _name(error) in TIMEOUT_CODES
        if isinstance(link, Timeout | TimeoutError):
            return True
    return False


def is_reconnect_required(exc: BaseException | None) -> bool:
    """True if only a new Kafka client cures ``exc`` (kafka-mq-go's ``IsReconnectRequired``).

    A fatal librdkafka error or ``_MAX_POLL_EXCEEDED``; anything else (timeouts, a broker
    connection lost for a while, an unknown topic) is retried with the same client.
    """
    if exc is None:
        return False
    for link in _chain(exc):
        error = _kafka_error(link)
        if error is not None and (_fatal(error) or _name(error) in RECONNECT_CODES):
            return True
    return False
