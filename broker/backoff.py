"""Bounded exponential backoff: how long a failed message waits before it is delivered again.

Receivers nack the messages of a handler that raised with the delay a :class:`Backoff` gives
for the message's delivery attempt, so a handler that always fails neither spins the CPU nor
floods the broker, and fresh messages keep flowing between the retries.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from broker.errors import ConfigError
from broker.message import Message

__all__ = ["DEFAULT_BACKOFF", "Backoff", "FailureCounter"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay ``initial * multiplier ** (attempt - 1)`` seconds, at most ``maximum``.

    The defaults (0.1 s, doubling, at most 10 s) retry a transient failure quickly and cost a
    poison message a handful of handler calls a minute.
    """

    initial: float = 0.1
    multiplier: float = 2.0
    maximum: float = 10.0

    def __post_init__(self) -> None:
        if not (self.initial >= 0 and self.multiplier >= 1 and self.maximum >= self.initial):
            raise ConfigError(
                f"a Backoff needs initial >= 0, multiplier >= 1 and maximum >= initial, got {self}"
            )

    def delay(self, attempt: int) -> float:
        """The delay after the ``attempt``-th failed delivery (1 for the first)."""
        exponent = max(0, attempt - 1)
        if exponent > 64:
            return self.maximum
        return min(self.maximum, self.initial * self.multiplier**exponent)


#: The receivers' default: 0.1 s, 0.2 s, 0.4 s, ... up to 10 s between deliveries of a failing message.
DEFAULT_BACKOFF = Backoff()


class FailureCounter:
    """Counts failed deliveries per message id where the broker does not count attempts.

    Bounded: the least recently failed ids are forgotten past ``capacity`` entries.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._capacity = capacity

    def attempt(self, message: Message) -> int:
        """The attempt number of this failure of ``message`` (the broker's count where it has one)."""
        if message.delivery_attempt is not None:
            return message.delivery_attempt
        count = self._counts.pop(message.id, 0) + 1
        self._counts[message.id] = count
        if len(self._counts) > self._capacity:
            self._counts.popitem(last=False)
        return count
