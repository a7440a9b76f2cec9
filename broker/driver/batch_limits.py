"""Checks of the batch arguments that the backends' batched consumers take.

A batched iterator or receiver takes ``batch_size`` (how many messages a batch holds at most)
and usually ``batch_timeout`` (how long a batch waits for its first message, in seconds); every
backend refuses the same out-of-range values with the same :class:`~broker.errors.ConfigError`
(a ``ValueError``).
"""

from __future__ import annotations

from broker.errors import ConfigError

__all__ = ["check_batch_limits"]


def check_batch_limits(batch_size: int, batch_timeout: float | None = None) -> None:
    """Raise ``ConfigError`` unless ``batch_size >= 1`` and (when given) ``batch_timeout >= 0``."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if batch_timeout is not None and batch_timeout < 0:
        raise ConfigError(f"batch_timeout must be >= 0 seconds, got {batch_timeout}")
