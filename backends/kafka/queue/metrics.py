"""Counters of the queue and the tracker, with an optional hook for a metrics system."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

__all__ = ["QueueMetrics"]


class QueueMetrics:
    """Counts events (``received``, ``acked``, ``nacked``, ``redelivered``, ``dead_lettered``, ...).

    ``hook(name, amount)`` is called on every count (e.g. to feed Prometheus); ``in_flight`` is a
    gauge set by the consumer.
    """

    def __init__(self, hook: Callable[[str, int], None] | None = None) -> None:
        self.counts: Counter[str] = Counter()
        self.in_flight = 0
        self._hook = hook

    def count(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to counter ``name``."""
        if amount:
            self.counts[name] += amount
            if self._hook is not None:
                self._hook(name, amount)

    def set_in_flight(self, value: int) -> None:
        """Messages a consumer holds unsettled."""
        self.in_flight = value
        if self._hook is not None:
            self._hook("in_flight", value)
