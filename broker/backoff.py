"""Bounded exponential backoff: how long a failed message waits before it is delivered again.

Receivers nack the messages of a handler that raised with the delay a :class:`Backoff` gives
for the message's delivery attempt, so a handler that always fails neither spins the CPU nor
floods the broker, and fresh messages keep flowing between the retries.

Jitter spreads the retries of many consumers that failed at the same moment: ``"full"`` picks a
delay uniformly in ``[0, d]``, ``"equal"`` in ``[d/2, d]`` (``d`` the un-jittered delay). The
random source is injectable (``Backoff(jitter="full", random=random.Random(7).random)``), so
tests get the same delays on every run.
"""

from __future__ import annotations

import random as _random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from broker.errors import ConfigError
from broker.message import Message

__all__ = ["Backoff", "FailureCounter", "Jitter"]

#: How a delay is spread: no jitter, uniform in ``[0, d]``, or uniform in ``[d/2, d]``.
Jitter = Literal["none", "full", "equal"]

_JITTERS = ("none", "full", "equal")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay ``initial * multiplier ** (attempt - 1)`` seconds, at most ``maximum``, then jittered.

    The defaults (0.1 s, doubling, at most 10 s, no jitter) retry a transient failure quickly and
    cost a poison message a handful of handler calls a minute. ``random`` returns a float in
    ``[0, 1)`` (default :func:`random.random`); give a seeded one for reproducible delays.
    """

    initial: float = 0.1
    multiplier: float = 2.0
    maximum: float = 10.0
    jitter: Jitter = "none"
    random: Callable[[], float] = field(default=_random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.initial >= 0 and self.multiplier >= 1 and self.maximum >= self.initial):
            raise ConfigError(
                f"a Backoff needs initial >= 0, multiplier >= 1 and maximum >= initial, got {self}"
            )
        if self.jitter not in _JITTERS:
            raise ConfigError(f"Backoff jitter must be one of {', '.join(_JITTERS)}; got {self.jitter!r}")

    def base_delay(self, attempt: int) -> float:
        """The un-jittered delay after the ``attempt``-th failed delivery (1 for the first)."""
        exponent = max(0, attempt - 1)
        if exponent > 64:
            return self.maximum
        return min(self.maximum, self.initial * self.multiplier**exponent)

    def delay(self, attempt: int) -> float:
        """The delay after the ``attempt``-th failed delivery (1 for the first), jittered."""
        base = self.base_delay(attempt)
        if self.jitter == "full":
            return base * self.random()
        if self.jitter == "equal":
            return base / 2 + (base / 2) * self.random()
        return base


#: The receivers' default: 0.1 s, 0.2 s, 0.4 s, ... up to 10 s between deliveries of a failing message.
DEFAULT_BACKOFF = Backoff()


class FailureCounter:
    """Counts failed deliveries per message id where the broker does not count attempts.

    Also remembers when each message first failed (for dead-letter attributes). Bounded: the
    least recently failed ids are forgotten past ``capacity`` entries.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._counts: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._capacity = capacity

    def attempt(self, message: Message) -> int:
        """The attempt number of this failure of ``message`` (the broker's count where it has one)."""
        return self.record(message, 0.0)[0]

    def record(self, message: Message, now: float) -> tuple[int, float]:
        """Count a failure of ``message`` at time ``now``: ``(attempt number, first failure time)``.

        The attempt number is the broker's ``delivery_attempt`` where it counts, else this
        counter's. The first failure time is the earliest this counter saw (``now`` if none).
        """
        count, first = self._counts.pop(message.id, (0, now))
        count += 1
        self._counts[message.id] = (count, first)
        if len(self._counts) > self._capacity:
            self._counts.popitem(last=False)
        if message.delivery_attempt is not None:
            return message.delivery_attempt, first
        return count, first

    def forget(self, message: Message) -> None:
        """Drop what is known of ``message`` (it was handled or dead-lettered)."""
        if self._counts:
            self._counts.pop(message.id, None)
