"""The helpers' logging hook: any standard ``logging`` logger, also fed librdkafka's own lines."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from broker.backends.kafka.errors import translate
from broker.errors import BrokerError, ReceiveError

__all__ = [
    "DEFAULT_LOGGER",
    "LoggerLike",
    "TransientErrors",
    "is_fatal",
    "report_failure",
    "resolve_logger",
    "with_sdk_logger",
]

#: The logger helpers use when none is given.
DEFAULT_LOGGER = "broker.backends.kafka.client"

#: What ``logger=`` accepts.
LoggerLike = logging.Logger | logging.LoggerAdapter[Any]


def resolve_logger(logger: LoggerLike | None) -> LoggerLike:
    """``logger``, or the ``broker.backends.kafka.client`` logger."""
    return logger if logger is not None else logging.getLogger(DEFAULT_LOGGER)


def with_sdk_logger(config: Mapping[str, Any], logger: LoggerLike) -> dict[str, Any]:
    """A copy of ``config`` whose librdkafka log lines go to ``logger`` (unless it names a logger)."""
    out = dict(config)
    if "logger" not in out:
        out["logger"] = logger.logger if isinstance(logger, logging.LoggerAdapter) else logger
    return out


def report_failure(
    logger: LoggerLike, error_callback: Callable[[BaseException], None] | None, exc: BaseException, what: str
) -> None:
    """Log ``exc`` as ``what`` at ERROR and hand it to ``error_callback`` (whose own failure is logged)."""
    logger.error("%s: %s", what, exc, exc_info=exc)
    if error_callback is not None:
        try:
            error_callback(exc)
        except Exception:
            logger.exception("the error callback raised")


def is_fatal(exc: BaseException) -> bool:
    """True when ``exc`` ends a helper's loop: a fatal librdkafka error, or no broker error at all.

    A fatal error leaves the librdkafka client unusable (every further poll fails the same way);
    anything that is not a :class:`~broker.errors.BrokerError` is a bug, not a broker condition.
    Everything else (timeouts, lost connections, unknown topics) is transient: the loop goes on.
    """
    if not isinstance(exc, BrokerError):
        return True
    error = getattr(exc, "kafka_error", None)
    if error is None:
        return False
    try:
        return bool(error.fatal())
    except Exception:
        return False


class TransientErrors:
    """Hands librdkafka's transient errors to a helper's error callback, as kefka does.

    Two sources: ``error_cb`` (client-wide errors such as all brokers down, called on the SDK
    thread: moved to the event loop here) and error events in the fetched stream (per topic or
    partition). Each is logged at WARNING on the helper's logger and passed, as a typed
    :mod:`broker.errors` error, to ``error_callback``; fatal errors are left to the fetch, which
    raises them.
    """

    def __init__(self, logger: LoggerLike, error_callback: Callable[[BaseException], None] | None) -> None:
        self.logger = logger
        self.error_callback = error_callback
        #: The loop that runs the helper (set by the helper when it starts reading).
        self.loop: asyncio.AbstractEventLoop | None = None
        self._seen: set[str] = set()

    def install(self, config: dict[str, Any]) -> None:
        """Route librdkafka's ``error_cb`` here, unless ``config`` names its own."""
        config.setdefault("error_cb", self.on_sdk_error)

    def on_sdk_error(self, error: Any) -> None:
        """librdkafka's ``error_cb`` (SDK thread): report non-fatal errors on the loop."""
        try:
            if error.fatal():
                return
        except Exception:
            return
        exc = translate(error, "the Kafka client reported", ReceiveError)
        loop = self.loop
        if loop is None or loop.is_closed():
            self.logger.warning("%s", exc)
            return
        try:
            loop.call_soon_threadsafe(self.report, exc)
        except RuntimeError:  # the loop closed meanwhile
            self.logger.warning("%s", exc)

    def on_event(self, topic: str | None, error: Any) -> None:
        """An error event in the fetched stream (on the loop): report it unless EOF or fatal."""
        try:
            if error.name() == "_PARTITION_EOF" or error.fatal():
                return
        except Exception:
            return
        self.report(translate(error, f"reading {topic or 'the topic'} failed", ReceiveError))

    def report(self, exc: BaseException) -> None:
        """Log ``exc`` and hand it to the error callback (whose own failure is logged).

        The first error of each kind is logged at WARNING, repeats at DEBUG (librdkafka retries
        a lost connection every few hundred milliseconds); the callback sees every one.
        """
        error = getattr(exc, "kafka_error", None)
        kind = error.name() if error is not None else type(exc).__name__
        level = logging.DEBUG if kind in self._seen else logging.WARNING
        self._seen.add(kind)
        self.logger.log(level, "transient Kafka error: %s", exc)
        if self.error_callback is not None:
            try:
                self.error_callback(exc)
            except Exception:
                self.logger.exception("the error callback raised")
