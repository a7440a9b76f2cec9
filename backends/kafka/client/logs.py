"""The helpers' logging hook: any standard ``logging`` logger, also fed librdkafka's own lines."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["DEFAULT_LOGGER", "LoggerLike", "report_failure", "resolve_logger", "with_sdk_logger"]

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
